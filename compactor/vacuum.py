"""Vacuum: delete data objects nothing references any more.

Candidates are shared WAL blobs (``wal-shared/``) and compacted blobs
(``{topic}/partitions/{p}/data/compacted/``). One is deleted only when no index entry,
no ``pending`` and no in-flight compaction record names it, AND it is older than the
grace period (``vacuum_grace_s``).

Races, and what closes them:

* Objects are listed BEFORE references are read, so a reference written after the
  listing (to an object in it) is seen by the reference scan.
* A writer that PUT its blob and has not committed yet, and a compaction that PUT its
  blob and has not created its record yet, hold unreferenced objects: the grace period
  covers them (a compaction drops its blob rather than create a record for it once
  half the grace has passed).
* References only ever move from ``meta/compaction`` or ``meta/control`` (pending)
  into the index, so each partition is read in that order — a reference that moves
  while the partition is read is seen at its old place or its new one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass

from compactor.metrics import compactor_metrics
from compactor.stages import decode_record
from llog.connection import Connection
from llog.control import decode_index, read_control
from llog.store import ObjectInfo
from llog.topics import Topics

log = logging.getLogger(__name__)

_COMPACTED_MARK = "/data/compacted/"


@dataclass(frozen=True)
class VacuumReport:
    """One vacuum pass: ``deleted`` keys (or, on a dry run, the keys it would delete)."""

    dry_run: bool
    grace_s: float
    objects: int
    object_bytes: int
    referenced: int
    too_young: int
    deleted: tuple[str, ...]
    freed_bytes: int

    def to_json(self) -> dict[str, object]:
        return {
            "dry_run": self.dry_run,
            "grace_s": self.grace_s,
            "objects": self.objects,
            "object_bytes": self.object_bytes,
            "referenced": self.referenced,
            "too_young": self.too_young,
            "deleted": list(self.deleted),
            "deleted_count": len(self.deleted),
            "freed_bytes": self.freed_bytes,
        }


def data_objects(conn: Connection) -> Iterator[ObjectInfo]:
    """Every shared WAL blob and compacted blob under the connection's root."""
    keys = conn.keys
    wal = keys.wal_prefix()
    for info in conn.store.list(keys.all_prefix()):
        if info.key.startswith(wal) or (_COMPACTED_MARK in info.key and "/partitions/" in info.key):
            yield info


def referenced_keys(conn: Connection) -> set[str]:
    """Every object key a compaction record, a pending or an index entry names."""
    etcd, keys = conn.etcd, conn.keys
    refs: set[str] = set()
    for meta in Topics(conn).list():
        t = meta.name
        for p in range(meta.partitions):
            # Order matters: compaction record, then control, then index (see module doc).
            kv = etcd.get(keys.compaction(t, p))
            if kv is not None:
                refs.add(decode_record(kv).data_key)
            pending = read_control(conn, t, p).control.pending
            if pending is not None:
                refs.add(pending.data_key)
            for kv in etcd.scan(keys.index_prefix(t, p), keys.index_range_end(t, p)):
                refs.add(decode_index(kv.key, kv.value).data_key)
    return refs


def vacuum(
    conn: Connection,
    *,
    grace_s: float | None = None,
    dry_run: bool = False,
    now: float | None = None,
) -> VacuumReport:
    """Delete unreferenced data objects older than ``grace_s`` (default: the config's
    ``vacuum_grace_s``); with ``dry_run`` only report what would go."""
    grace = conn.config.vacuum_grace_s if grace_s is None else grace_s
    objects = list(data_objects(conn))
    refs = referenced_keys(conn)  # after the listing: see the module doc
    cutoff = (time.time() if now is None else now) - grace
    doomed: list[ObjectInfo] = []
    referenced = young = 0
    for o in objects:
        if o.key in refs:
            referenced += 1
        elif o.modified >= cutoff:
            young += 1
        else:
            doomed.append(o)
    if doomed and not dry_run:
        conn.store.delete(o.key for o in doomed)
    freed = sum(o.size for o in doomed)
    m = compactor_metrics(conn.metrics)
    m.stored_bytes.set(sum(o.size for o in objects) - (0 if dry_run else freed))
    if not dry_run:
        m.vacuum_objects.inc(len(doomed))
        m.vacuum_bytes.inc(freed)
    log.info(
        "vacuum%s: %d objects, %d referenced, %d within grace, %d deleted (%d bytes)",
        " (dry run)" if dry_run else "", len(objects), referenced, young, len(doomed), freed,
    )
    return VacuumReport(
        dry_run=dry_run,
        grace_s=grace,
        objects=len(objects),
        object_bytes=sum(o.size for o in objects),
        referenced=referenced,
        too_young=young,
        deleted=tuple(o.key for o in doomed),
        freed_bytes=freed,
    )
