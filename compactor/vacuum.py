"""Vacuum: delete data objects no commit references or can ever reference again.

Candidates are shared WAL blobs (``wal-shared/{session}/{blob}``) and compacted blobs
(``{topic}/partitions/{p}/data/compacted/{session}/{blob}``). One pass:

(a) list the objects;
(b) AFTER the listing, read the live sessions (the keys under ``_sessions/``);
(c) AFTER that, scan the references: every transaction's staged appends (spec §15.3),
    then every compaction record, ``pending`` and index entry of every partition;
(d) delete each listed object that the scan did not find AND whose session (from its
    key) was not live at (b).

Why an object deleted in (d) can never be referenced, however long any process or
the vacuum itself pauses (spec §11):

* A transaction that creates a reference to an object of session S (a writer's W2,
  a compactor's K3) compares ``create_revision(_sessions/S) = R``, where R is the
  revision that created S's key. The key is created before any object of S is PUT,
  and bound to S's lease; once the lease ends the key is gone, and it is never put
  again (a process whose session ended opens a new one with a new id), so after
  that instant no transaction can create a reference to an object of S.
* An object in the listing (a) was PUT before (a), so its session key was created
  before (a). If the key is absent at (b), every reference to the object that will
  ever exist was created before (b), hence before the scan (c) began.
* References only move from a compaction record or a ``pending`` into the index (the
  scan reads them in that order) and are otherwise only removed, so a reference that
  exists when the scan starts is seen by it, or was removed during it (the object is
  garbage then too).

So an object unreferenced at (c) whose session was dead at (b) stays unreferenced
forever, and the delete in (d) may happen at any time later. No clock is involved.

A table topic's Parquet files are also named by its Iceberg table, which follows the
index through syncs (:mod:`llog.table.sync`). Before (d) deletes any of them, vacuum
runs a fencing sync of that table: its commit drops the files the index no longer
names and makes every sync that read the table earlier fail, so no sync can put a
deleted file back. Files any snapshot the table keeps still names are kept (time travel
to each kept snapshot reads every file it names); if the catalog cannot be reached, or
holds another table under the name, every file of that topic is kept for a later pass.

Objects whose key has no session segment (written before sessions existed) keep the
old age rule: deleted only if unreferenced and older than ``vacuum_grace_s``, the
cutoff taken BEFORE the listing so a stalled vacuum never widens it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from compactor.metrics import compactor_metrics
from compactor.stages import decode_record
from llog.connection import Connection
from llog.errors import LlogError, UnknownTopic
from llog.state.control import decode_index, read_control
from llog.state.keys import prefix_range_end
from llog.store import ObjectInfo
from llog.table import TableCatalog, sync_table
from llog.topic.admin import Topics
from llog.txn.records import staged_data_keys

log = logging.getLogger(__name__)

#: Called at "after_listing", "after_sessions", "after_scan" and "after_tables" with the root prefix;
#: tests stall or kill the vacuum there (the shape of the writer's fault hook).
VacuumHook = Callable[[str, str], None]


@dataclass(frozen=True)
class VacuumReport:
    """One vacuum pass: ``deleted`` keys (or, on a dry run, the keys it would delete).
    ``live_session``: unreferenced objects kept because their session was live;
    ``too_young``: unreferenced objects of the layout before sessions kept by the
    grace period."""

    dry_run: bool
    grace_s: float
    objects: int
    object_bytes: int
    referenced: int
    live_session: int
    too_young: int
    #: Unreferenced files of table topics kept because their table still holds them
    #: (or its catalog could not be reached).
    table_files: int
    deleted: tuple[str, ...]
    freed_bytes: int

    def to_json(self) -> dict[str, object]:
        return {
            "dry_run": self.dry_run,
            "grace_s": self.grace_s,
            "objects": self.objects,
            "object_bytes": self.object_bytes,
            "referenced": self.referenced,
            "live_session": self.live_session,
            "too_young": self.too_young,
            "table_files": self.table_files,
            "deleted": list(self.deleted),
            "deleted_count": len(self.deleted),
            "freed_bytes": self.freed_bytes,
        }


def data_objects(conn: Connection) -> Iterator[ObjectInfo]:
    """Every shared WAL blob and compacted blob under the connection's root."""
    keys = conn.keys
    wal = keys.wal_prefix()
    for info in conn.store.list(keys.all_prefix()):
        if info.key.startswith(wal) or keys.topic_of_compacted(info.key) is not None:
            yield info


def referenced_keys(conn: Connection) -> set[str]:
    """Every object key a transaction's staged append, a compaction record, a pending or
    an index entry names."""
    etcd, keys = conn.etcd, conn.keys
    # First: a staged reference only ever moves from its transaction into a partition.
    refs: set[str] = staged_data_keys(conn)
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


def live_sessions(conn: Connection) -> set[str]:
    """The ids of the sessions whose key exists now."""
    prefix = conn.keys.sessions_prefix()
    return {kv.key[len(prefix):] for kv in conn.etcd.scan(prefix, prefix_range_end(prefix))}


def vacuum(
    conn: Connection,
    *,
    grace_s: float | None = None,
    dry_run: bool = False,
    now: float | None = None,
    fault_hook: VacuumHook | None = None,
) -> VacuumReport:
    """Delete data objects that are unreferenced and whose session has ended (objects
    without a session in their key: unreferenced and older than ``grace_s``, default
    the config's ``vacuum_grace_s``); with ``dry_run`` only report what would go. The
    steps run in the order the module docstring proves safe."""
    keys = conn.keys

    def hook(point: str) -> None:
        if fault_hook is not None:
            fault_hook(point, keys.root)

    grace = conn.config.vacuum_grace_s if grace_s is None else grace_s
    cutoff = (time.time() if now is None else now) - grace  # before the listing
    objects = list(data_objects(conn))
    hook("after_listing")
    live = live_sessions(conn)  # after the listing
    hook("after_sessions")
    refs = referenced_keys(conn)  # after the session read
    hook("after_scan")
    doomed, referenced, kept_live, young = _triage(conn, objects, refs, live, cutoff)
    doomed, kept_by_tables = _spare_table_files(conn, doomed, dry_run)
    hook("after_tables")
    if doomed and not dry_run:
        conn.store.delete(o.key for o in doomed)
    report = VacuumReport(
        dry_run=dry_run,
        grace_s=grace,
        objects=len(objects),
        object_bytes=sum(o.size for o in objects),
        referenced=referenced,
        live_session=kept_live,
        table_files=kept_by_tables,
        too_young=young,
        deleted=tuple(o.key for o in doomed),
        freed_bytes=sum(o.size for o in doomed),
    )
    _account(conn, report)
    return report


def _triage(
    conn: Connection, objects: list[ObjectInfo], refs: set[str], live: set[str], cutoff: float
) -> tuple[list[ObjectInfo], int, int, int]:
    """``(doomed, referenced, kept for a live session, kept by the grace period)``:
    an object is doomed if unreferenced and its session is not live (no session in
    its key: not modified since ``cutoff``)."""
    doomed: list[ObjectInfo] = []
    referenced = kept_live = young = 0
    for o in objects:
        session = conn.keys.session_of(o.key)
        if o.key in refs:
            referenced += 1
        elif session is not None and session in live:
            kept_live += 1
        elif session is None and o.modified >= cutoff:
            young += 1
        else:
            doomed.append(o)
    return doomed, referenced, kept_live, young


def _spare_table_files(
    conn: Connection, doomed: list[ObjectInfo], dry_run: bool
) -> tuple[list[ObjectInfo], int]:
    """``(doomed without the files a kept snapshot of a table topic's table names, how
    many were kept)``: a fencing sync of every table topic first (module doc; the fence
    also deletes the table's orphaned metadata). A dry run does not commit to a
    catalog: it keeps every table topic's file."""
    by_topic: dict[str, list[ObjectInfo]] = {}
    for o in doomed:
        topic = conn.keys.topic_of_compacted(o.key)
        if topic is not None:
            by_topic.setdefault(topic, []).append(o)
    tables = sorted({m.name for m in Topics(conn).list() if m.table is not None} | set(by_topic))
    tables = [t for t in tables if _has_table(conn, t)]
    if not tables:
        return doomed, 0
    spared: set[str] = set()
    if dry_run:
        spared = {o.key for t in tables for o in by_topic.get(t, [])}
    else:
        metrics = compactor_metrics(conn.metrics)
        with TableCatalog(conn) as catalog:
            for t in tables:
                mine = by_topic.get(t, [])
                try:
                    synced = sync_table(catalog, t, fence=True)
                except LlogError as exc:
                    metrics.table_synced(None)
                    log.warning("vacuum keeps the files of table topic %s: %s", t, exc)
                    files = frozenset(conn.store.object_uri(o.key) for o in mine)
                else:
                    metrics.table_synced(synced)
                    files = synced.kept
                spared |= {o.key for o in mine if conn.store.object_uri(o.key) in files}
    return [o for o in doomed if o.key not in spared], len(spared)


def _has_table(conn: Connection, topic: str) -> bool:
    try:
        return conn.topic(topic, refresh=True).table is not None
    except UnknownTopic:
        return False


def _account(conn: Connection, r: VacuumReport) -> None:
    """Set the stored-bytes gauge, count what was deleted (not on a dry run), log it."""
    m = compactor_metrics(conn.metrics)
    m.stored_bytes.set(r.object_bytes - (0 if r.dry_run else r.freed_bytes))
    if not r.dry_run:
        m.vacuum_objects.inc(len(r.deleted))
        m.vacuum_bytes.inc(r.freed_bytes)
    log.info(
        "vacuum%s: %d objects, %d referenced, %d of live sessions, %d within grace, %d held by tables, "
        "%d deleted (%d bytes)",
        " (dry run)" if r.dry_run else "", r.objects, r.referenced, r.live_session, r.too_young, r.table_files,
        len(r.deleted), r.freed_bytes,
    )
