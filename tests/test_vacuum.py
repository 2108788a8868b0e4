"""Vacuum against the real etcd and S3 servers: it never deletes a referenced object
or one of a live session (or, for keys without a session, one younger than the grace
period, by the objects' real modification times), and deletes every other one."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import replace

import pytest

import llog
from compactor import Compactor, StageEvent, compact_once
from compactor.stages import StageHook
from compactor.vacuum import referenced_keys, vacuum
from llog import AppendGroup
from llog.state.control import read_control

TOPIC = "v"
#: S3 reports modification times in whole seconds, so the grace must exceed one.
GRACE = 2.0


@pytest.fixture
def vconn(config: llog.LlogConfig) -> Iterator[llog.Connection]:
    with llog.Connection(replace(config, compact_min_age_ms=0, settle_after_ms=0)) as c:
        llog.Topics(c).create(TOPIC, 3)
        yield c


def _scan(conn: llog.Connection, p: int) -> list[bytes]:
    with llog.Reader(conn) as r:
        return [c.value for c in r.scan(TOPIC, p)]


def _objects(conn: llog.Connection) -> dict[str, float]:
    return {o.key: o.modified for o in conn.store.list(conn.keys.all_prefix())}


def _wait_older_than_grace(conn: llog.Connection, keys: set[str]) -> None:
    """Wait (by the store's own clock readings) until every key is older than GRACE."""
    deadline = time.monotonic() + 30
    while True:
        mtimes = _objects(conn)
        if all(mtimes[k] < time.time() - GRACE - 0.05 for k in keys):
            return
        assert time.monotonic() < deadline, "objects never aged past the grace period"
        time.sleep(0.2)


class _Stop(Exception):
    pass


def _stop_at(point: str) -> StageHook:
    def hook(ev: StageEvent) -> None:
        if ev.point == point:
            raise _Stop(point)

    return hook


def test_vacuum_deletes_old_orphans_only(vconn: llog.Connection) -> None:
    conn, keys = vconn, vconn.keys
    w = llog.Writer(conn)
    # Blob A: partitions 0 and 1; blob B: partition 0 only; blob D: partition 2, left pending.
    first = w.append_shared([AppendGroup(TOPIC, 0, [b"a0"]), AppendGroup(TOPIC, 1, [b"a1"])])[0]
    assert isinstance(first, llog.AppendResult)
    a = first.data_key
    b = w.append(TOPIC, 0, [b"b0"]).data_key
    w.settle_all()
    d = w.append(TOPIC, 2, [b"d2"]).data_key
    assert read_control(conn, TOPIC, 2).control.pending is not None
    # Partition 0 compacted fully: B is unreferenced now (but its writer's session
    # lives), A still is referenced by partition 1.
    assert compact_once(conn, TOPIC, 0).outcome == "compacted"
    [c0] = [o for o in _objects(conn) if o.startswith(keys.compacted_prefix(TOPIC, 0))]
    # Partition 1: a compaction stopped after its record: its blob is referenced by the record only.
    with pytest.raises(_Stop), Compactor(conn, hook=_stop_at("after_record")) as c:
        c.compact_once(TOPIC, 1)
    [c1] = [o for o in _objects(conn) if o.startswith(keys.compacted_prefix(TOPIC, 1))]
    # An orphan compacted blob (as a compaction that died after its PUT leaves), of a gone
    # topic, of a session that ended; and one in the key layout before sessions.
    orphan = keys.compacted_blob("gone", 0, "dead", "blob")
    conn.store.put(orphan, b"never referenced")
    legacy = f"{keys.compacted_prefix('gone', 0)}legacy"
    conn.store.put(legacy, b"never referenced either")
    other = f"{keys.all_prefix()}not-data/file"
    conn.store.put(other, b"not a data object")
    before = {p: _scan(conn, p) for p in range(3)}
    _wait_older_than_grace(conn, {a, b, d, c0, c1, orphan, legacy, other})
    young = f"{keys.wal_prefix()}young"  # an old writer's in-flight blob, without a session
    conn.store.put(young, b"an in-flight writer's blob")

    assert {a, d, c0, c1} <= referenced_keys(conn)
    dry = vacuum(conn, grace_s=GRACE, dry_run=True)
    assert set(dry.deleted) == {orphan, legacy}
    assert dry.freed_bytes == sum(o.size for o in conn.store.list(keys.all_prefix()) if o.key in {orphan, legacy})
    assert set(_objects(conn)) >= {a, b, d, c0, c1, orphan, legacy, young}

    report = vacuum(conn, grace_s=GRACE)
    assert set(report.deleted) == {orphan, legacy}
    assert report.freed_bytes == dry.freed_bytes
    assert (report.too_young, report.live_session, report.referenced) == (1, 1, 4)
    left = set(_objects(conn))
    assert {a, b, d, c0, c1, young, other} <= left and not {orphan, legacy} & left
    assert {p: _scan(conn, p) for p in range(3)} == before
    assert conn.metrics.value("llog_vacuum_deleted_objects_total") == 2

    # Finishing partition 1's compaction and materializing 2's pending: A and D lose their
    # last references, the writer's session ends with it, and A, B and D go on the next
    # pass; every scan still reads the same records.
    res = compact_once(conn, TOPIC, 1)
    assert res.recovered is not None and res.outcome == "idle"
    assert compact_once(conn, TOPIC, 2).outcome == "compacted"
    w.close()
    _wait_older_than_grace(conn, {young})
    report = vacuum(conn, grace_s=GRACE)
    assert set(report.deleted) == {a, b, d, young}
    assert {p: _scan(conn, p) for p in range(3)} == before
    assert report.referenced == 3  # the three compacted blobs


def test_vacuum_spares_the_blob_of_a_writer_that_has_not_committed(vconn: llog.Connection) -> None:
    conn = vconn
    put_done, go_on = threading.Event(), threading.Event()
    blob: list[str] = []

    def hook(point: str, data_key: str) -> None:
        if point == "after_put":
            blob.append(data_key)
            put_done.set()
            assert go_on.wait(60)

    result: list[object] = []
    with llog.Writer(conn, fault_hook=hook) as w:
        t = threading.Thread(target=lambda: result.append(w.append(TOPIC, 0, [b"late", b"but acked"])))
        t.start()
        try:
            assert put_done.wait(30)
            # The blob is in the store and referenced by nothing yet: its session protects
            # it, whatever the grace.
            assert blob[0] in _objects(conn)
            assert blob[0] not in referenced_keys(conn)
            report = vacuum(conn, grace_s=0)
            assert blob[0] not in report.deleted and report.live_session == 1
        finally:
            go_on.set()
            t.join()
    assert [getattr(r, "start_offset", None) for r in result] == [0]
    assert _scan(conn, 0) == [b"late", b"but acked"]


def test_a_scan_resolved_before_compaction_and_vacuum_reads_on(vconn: llog.Connection) -> None:
    """A reader that resolved slices before compaction replaced them and vacuum deleted
    their blobs resolves again and returns the same records."""
    conn = llog.Connection(replace(vconn.config, read_prefetch=1))
    try:
        with llog.Writer(conn) as w:
            for i in range(12):
                w.append(TOPIC, 0, [b"%d" % i])  # a blob each
        with llog.Reader(conn) as r:
            scan = r.scan(TOPIC, 0)
            got = [next(scan).value]  # the index is resolved, the next GET may be queued
            assert compact_once(conn, TOPIC, 0).outcome == "compacted"
            report = vacuum(conn, grace_s=0)
            assert len(report.deleted) == 12
            got += [c.value for c in scan]
        assert got == [b"%d" % i for i in range(12)]
    finally:
        conn.close()
