"""Metadata files no snapshot names: manifests of commits that lost their
compare-and-swap, pyiceberg's merge inputs (a merge-append writes the new files'
manifest, then a merged one, and names only the latter), metadata JSON of refused
commits. A fencing sync (vacuum's) deletes them, and only those that cannot become
named any more, judged without a clock:

a file written before the fence commit's metadata file was written by a sync that
read the table before the fence committed, and such a sync's commit is refused (it
requires the snapshot it read, and the fence moved it). Both times are the object
store's own (``LastModified``), compared with two seconds to spare for its one-second
resolution. A later commit's files are newer and are left to a later fence.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from llog.connection import Connection

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from llog.table.snapshots import ManifestLists

log = logging.getLogger(__name__)

#: Seconds a file must predate the fence's metadata file, for the store's clock resolution.
RESOLUTION_MARGIN_S = 2.0


def delete_orphans(conn: Connection, topic: str, table: Table, fence_metadata: str, lists: ManifestLists) -> int:
    """Delete the table's metadata files that no snapshot, metadata log entry or current
    metadata names and that predate ``fence_metadata`` (the fence commit's metadata
    file); how many were deleted."""
    location = table.location().rstrip("/")
    prefix = conn.keys.table_location(topic) + "/metadata/"
    listed = {location + "/metadata/" + o.key[len(prefix):]: o for o in conn.store.list(prefix)}
    fence = listed.get(fence_metadata)
    if fence is None:  # not where this deployment keeps it: leave everything
        return 0
    meta = table.metadata
    named = {table.metadata_location, fence_metadata, *(e.metadata_file for e in meta.metadata_log)}
    named |= lists.metadata_of(table, meta.snapshots)
    cutoff = fence.modified - RESOLUTION_MARGIN_S
    doomed = sorted(o.key for uri, o in listed.items() if uri not in named and o.modified < cutoff)
    if doomed:
        conn.store.delete(doomed)
        log.info("table of %s: deleted %d metadata files no snapshot names", topic, len(doomed))
    return len(doomed)
