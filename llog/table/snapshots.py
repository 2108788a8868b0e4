"""A table's snapshots: which it keeps, expiring the rest, and the data files the kept
ones name (what vacuum must not delete: spec §10.1, §11).

Kept are the newest ``iceberg_snapshots_kept`` snapshots along the current snapshot's
ancestry, plus every branch or tag head. Ancestry, not timestamps: a process with a
skewed clock stamps a snapshot older than its parent, and ordering by time would expire
the current one. Expiry is idempotent: a snapshot another process expired first, or a
commit that lost a race, leaves the work to the next sync, never fails the sync that
already committed.

After an expiry commits, the manifest lists and manifests that only expired snapshots
named are deleted: no later commit names them (a commit builds on the current snapshot,
which is kept, or fails its compare-and-swap), so the table's metadata stays the size
of what it keeps.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot

log = logging.getLogger(__name__)


def kept_ids(table: Table, keep: int) -> set[int]:
    """The snapshot ids ``table`` keeps: the newest ``keep`` of the current ancestry and
    the head of every branch and tag."""
    from pyiceberg.table.snapshots import ancestors_of

    meta = table.metadata
    ids = {ref.snapshot_id for ref in meta.refs.values()}
    for i, snap in enumerate(ancestors_of(table.current_snapshot(), meta)):
        if i >= keep:
            break
        ids.add(snap.snapshot_id)
    return ids


class ManifestLists:
    """Manifest list path → the manifests it names. Both are immutable files, so a
    sync reads each list once, not every kept snapshot's on every expiry."""

    def __init__(self) -> None:
        self._lists: dict[str, tuple[str, ...]] = {}

    def manifests(self, table: Table, snap: Snapshot) -> tuple[str, ...]:
        got = self._lists.get(snap.manifest_list)
        if got is None:
            got = tuple(m.manifest_path for m in snap.manifests(table.io))
            self._lists[snap.manifest_list] = got
        return got

    def metadata_of(self, table: Table, snaps: Iterable[Snapshot]) -> set[str]:
        """The manifest lists and manifests ``snaps`` name."""
        out: set[str] = set()
        for snap in snaps:
            out.add(snap.manifest_list)
            out.update(self.manifests(table, snap))
        return out

    def forget_all_but(self, lists: set[str]) -> None:
        self._lists = {k: v for k, v in self._lists.items() if k in lists}


def expire(table: Table, keep: int, lists: ManifestLists, delete: Callable[[list[str]], None]) -> int:
    """Expire the snapshots ``table`` does not keep and ``delete`` the metadata files
    only they named (data files leave storage by vacuum, never here); how many were
    expired, 0 if the commit lost a race."""
    from pyiceberg.exceptions import CommitFailedException

    kept = kept_ids(table, keep)
    old = [s for s in table.metadata.snapshots if s.snapshot_id not in kept]
    if not old:
        return 0
    young = [s for s in table.metadata.snapshots if s.snapshot_id in kept]
    try:
        table.maintenance.expire_snapshots().by_ids([s.snapshot_id for s in old]).commit()
    except (CommitFailedException, ValueError) as exc:  # ValueError: expired by another process first
        log.info("expiring %d snapshots of %s left to the next sync: %s", len(old), ".".join(table.name()), exc)
        return 0
    try:
        delete(sorted(lists.metadata_of(table, old) - lists.metadata_of(table, young)))
    except Exception as exc:  # the store's and FileIO's own errors: orphans, not a failed sync
        log.warning("metadata files of %d expired snapshots of %s not deleted: %s",
                    len(old), ".".join(table.name()), exc)
    lists.forget_all_but({s.manifest_list for s in young})
    return len(old)


def files_of_snapshots(table: Table) -> frozenset[str]:
    """Every data file any snapshot of ``table`` names (each manifest read once)."""
    files: set[str] = set()
    seen: set[str] = set()
    for snap in table.metadata.snapshots:
        for manifest in snap.manifests(table.io):
            if manifest.manifest_path in seen:
                continue
            seen.add(manifest.manifest_path)
            files.update(e.data_file.file_path for e in manifest.fetch_manifest_entry(table.io, discard_deleted=True))
    return frozenset(files)
