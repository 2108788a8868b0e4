"""Read resolution (protocol/README.md §9) against the real servers: bounds, the
pending tail, index paging, coalesced GETs and the etcd round trips a scan costs."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

import llog
from compactor import compact_once
from compactor.retention import apply_retention
from compactor.vacuum import vacuum
from llog import AppendGroup
from llog.codec import batch
from llog.state.control import decode_index, read_control


def _etcd_ops(conn: llog.Connection) -> dict[str, float]:
    return {op: conn.metrics.value("llog_etcd_ops_total", op=op) for op in ("get", "range", "get_many", "txn")}


def _delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {op: after[op] - before[op] for op in before if after[op] != before[op]}


@pytest.fixture
def rconn(config: llog.LlogConfig) -> Iterator[llog.Connection]:
    # settle_after_ms high: nothing settles the pending tail behind a test's back.
    with llog.Connection(replace(config, settle_after_ms=3_600_000)) as conn:
        llog.Topics(conn).create("t", 2)
        yield conn


def test_bounds_empty_at_and_after_next_offset(rconn: llog.Connection) -> None:
    with llog.Writer(rconn) as w:
        w.append("t", 0, [b"a", b"b", b"c"])
    with llog.Reader(rconn) as r:
        assert [x.offset for x in r.scan("t", 0, 1, 99)] == [1, 2]  # end past next_offset stops there
        assert r.read("t", 0, 3) is None
        assert list(r.scan("t", 0, 3)) == []
        assert list(r.scan("t", 0, 2, 2)) == []
        assert list(r.scan("t", 1, 0)) == []  # a partition never written


def test_the_pending_tail_is_read_before_it_has_an_index_key(rconn: llog.Connection) -> None:
    w = llog.Writer(rconn)
    w.append("t", 0, [b"a", b"b"])
    w.append("t", 0, [b"c"])  # materializes the first append; this one stays pending
    pending = read_control(rconn, "t", 0).control.pending
    assert pending is not None and (pending.start_offset, pending.end_offset) == (2, 2)
    with llog.Reader(rconn, settle_pending=False) as r:
        assert [x.value for x in r.scan("t", 0)] == [b"a", b"b", b"c"]
        got = r.read("t", 0, 2)
        assert got is not None and got.value == b"c"
    assert read_control(rconn, "t", 0).control.pending == pending  # nothing settled it
    w.close()


def test_a_short_scan_costs_one_etcd_round_trip_before_its_gets(rconn: llog.Connection) -> None:
    with llog.Writer(rconn) as w:
        for i in range(5):
            w.append("t", 0, [b"r%d" % i])
    with llog.Reader(rconn) as r:
        before = _etcd_ops(rconn)
        assert [x.value for x in r.scan("t", 0)] == [b"r%d" % i for i in range(5)]
        assert _delta(before, _etcd_ops(rconn)) == {"get_many": 1}
        before = _etcd_ops(rconn)
        got = r.read("t", 0, 3)
        assert got is not None and got.value == b"r3"
        assert _delta(before, _etcd_ops(rconn)) == {"get_many": 1}


def test_a_scan_walks_index_pages_past_the_first(rconn: llog.Connection) -> None:
    n = 300  # more index keys than one page (256)
    with llog.Writer(rconn) as w:
        for i in range(n):
            w.append("t", 1, [b"%d" % i])
    with llog.Reader(rconn) as r:
        before = _etcd_ops(rconn)
        assert [int(x.value) for x in r.scan("t", 1)] == list(range(n))
        assert _delta(before, _etcd_ops(rconn)) == {"get_many": 1, "range": 1}
        assert [int(x.value) for x in r.scan("t", 1, 250, 270)] == list(range(250, 270))


def test_adjacent_slices_of_one_blob_come_in_one_get(rconn: llog.Connection) -> None:
    with llog.Writer(rconn) as w:
        # One shared blob holding three consecutive appends of partition 0.
        w.append_shared([AppendGroup("t", 0, [b"a"]), AppendGroup("t", 1, [b"x"])])
        w.append_shared([AppendGroup("t", 0, [b"b", b"c"]), AppendGroup("t", 0, [b"d"])])
    gets = rconn.metrics.value("llog_s3_ops_total", op="get_range")
    with llog.Reader(rconn) as r:
        assert [x.value for x in r.scan("t", 0)] == [b"a", b"b", b"c", b"d"]
    # Two blobs; the second blob's two bodies of partition 0 are adjacent: one GET.
    assert rconn.metrics.value("llog_s3_ops_total", op="get_range") - gets == 2


def test_scan_many_reads_like_chained_scans_with_one_round_trip(rconn: llog.Connection) -> None:
    llog.Topics(rconn).create("u", 8)
    with llog.Writer(rconn) as w:
        for p in (0, 2, 5):
            w.append("u", p, [b"%d-a" % p, b"%d-b" % p])
            w.append("u", p, [b"%d-c" % p])
    requests: list[tuple[str, int, int, int | None]] = [
        ("u", 5, 1, None), ("u", 1, 0, None), ("u", 0, 0, 2), ("u", 2, 3, None), ("u", 2, 0, None),
    ]
    with llog.Reader(rconn) as r:
        expected = [(x.partition, x.offset, x.value) for t, p, s, e in requests for x in r.scan(t, p, s, e)]
        before = _etcd_ops(rconn)
        got = [(x.partition, x.offset, x.value) for x in r.scan_many(requests)]
        assert _delta(before, _etcd_ops(rconn)) == {"get_many": 1}
    assert got == expected
    assert got == [(5, 1, b"5-b"), (5, 2, b"5-c"), (0, 0, b"0-a"), (0, 1, b"0-b"),
                   (2, 0, b"2-a"), (2, 1, b"2-b"), (2, 2, b"2-c")]


def test_scan_many_resolves_64_partitions_per_round_trip(rconn: llog.Connection) -> None:
    llog.Topics(rconn).create("wide", 130)
    with llog.Writer(rconn) as w:
        w.append("wide", 129, [b"last"])
    with llog.Reader(rconn) as r:
        before = _etcd_ops(rconn)
        got = [x.value for x in r.scan_many([("wide", p, 0, None) for p in range(130)])]
        assert _delta(before, _etcd_ops(rconn)) == {"get_many": 3}  # 64 + 64 + 2
    assert got == [b"last"]


def test_scan_many_checks_every_request_before_reading(rconn: llog.Connection) -> None:
    before = _etcd_ops(rconn)
    with llog.Reader(rconn) as r:
        with pytest.raises(llog.InvalidInput):
            list(r.scan_many([("t", 0, 0, None), ("t", -1, 0, None)]))
        with pytest.raises(llog.InvalidInput):
            list(r.scan_many([("t", 0, 0, None), ("t", 0, -5, None)]))
        with pytest.raises(llog.UnknownPartition):
            list(r.scan_many([("t", 0, 0, None), ("t", 7, 0, None)]))
    # Only topic metadata was looked up (to check the partitions), no partition read.
    assert set(_delta(before, _etcd_ops(rconn))) <= {"get"}


def test_scan_many_stops_at_max_records_without_fetching_past_it(rconn: llog.Connection) -> None:
    llog.Topics(rconn).create("b", 3)
    with llog.Writer(rconn) as w:
        for p in range(3):
            for i in range(3):
                w.append("b", p, [b"%d-%d" % (p, i)])  # one blob, so one GET, per record
    requests: list[tuple[str, int, int, int | None]] = [("b", p, 0, None) for p in range(3)]
    with llog.Reader(rconn) as r:
        gets = rconn.metrics.value("llog_s3_ops_total", op="get_range")
        got = [x.value for x in r.scan_many(requests, max_records=4)]
        assert got == [b"0-0", b"0-1", b"0-2", b"1-0"]
        # Partition 1's scan ended at the budget: its other two records were not fetched.
        assert rconn.metrics.value("llog_s3_ops_total", op="get_range") - gets == 4
        assert list(r.scan_many(requests, max_records=0)) == []
        with pytest.raises(llog.InvalidInput):
            list(r.scan_many(requests, max_records=-1))


class _GatedReader(llog.Reader):
    """Notes the object key of every range GET as it starts, and holds the GETs of
    ``held`` until ``go`` is set."""

    def __init__(self, conn: llog.Connection, held: frozenset[str] = frozenset()) -> None:
        super().__init__(conn)
        self.started: list[str] = []
        self.held = held
        self.go = threading.Event()
        self._changed = threading.Condition()

    def _get(self, f: Any) -> bytes:
        with self._changed:
            self.started.append(f.data_key)
            self._changed.notify_all()
        if f.data_key in self.held:
            assert self.go.wait(30)
        return super()._get(f)

    def wait_started(self, n: int) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: len(self.started) >= n, 30)


def _data_keys(conn: llog.Connection, topic: str, partition: int) -> list[str]:
    return [
        decode_index(kv.key, kv.value).data_key
        for kv in conn.etcd.scan(conn.keys.index(topic, partition, 0), conn.keys.index_range_end(topic, partition))
    ]


def test_scan_many_fetches_the_next_partition_while_this_one_is_consumed(rconn: llog.Connection) -> None:
    llog.Topics(rconn).create("x", 2)
    with llog.Writer(rconn) as w:
        w.append("x", 0, [b"p0"])
        w.append("x", 1, [b"p1"])
    with _GatedReader(rconn) as r:
        scan = r.scan_many([("x", 0, 0, None), ("x", 1, 0, None)])
        first = next(scan)
        # Partition 0's only GET is consumed; partition 1's is under way already.
        assert r.wait_started(2), f"GETs started while partition 0 was consumed: {r.started}"
        assert (first.partition, first.value) == (0, b"p0")
        assert [(x.partition, x.value) for x in scan] == [(1, b"p1")]
    assert r.started == [_data_keys(rconn, "x", 0)[0], _data_keys(rconn, "x", 1)[0]]


@pytest.mark.parametrize("cache_bytes", [0, 1 << 20], ids=["no-cache", "blob-cache"])
def test_scan_many_rereads_every_partition_whose_blobs_vacuum_deleted_mid_scan(
    config: llog.LlogConfig, cache_bytes: int
) -> None:
    """A scan resolved before compaction and vacuum replaced its blobs: the partition
    whose GET found its blob gone resolves again, and the next partition's scan, whose
    GET was already in flight, starts over. Every record comes back once, in order."""
    cfg = replace(config, read_prefetch=2, compact_min_age_ms=0, settle_after_ms=0, read_cache_bytes=cache_bytes)
    with llog.Connection(cfg) as conn:
        llog.Topics(conn).create("y", 2)
        with llog.Writer(conn) as w:
            for i in range(2):
                w.append("y", 0, [b"0-%d" % i])  # a blob each
            w.append("y", 1, [b"1-0", b"1-1"])
        first, second = _data_keys(conn, "y", 0)
        [other] = _data_keys(conn, "y", 1)
        with _GatedReader(conn, held=frozenset({second})) as r:
            scan = r.scan_many([("y", 0, 0, None), ("y", 1, 0, None)])
            got = [next(scan)]
            # Partition 0's second GET is held; partition 1's is under way.
            assert r.wait_started(3) and sorted(r.started) == sorted([first, second, other])
            for p in (0, 1):
                assert compact_once(conn, "y", p).outcome == "compacted"
            assert len(vacuum(conn, grace_s=0).deleted) == 3
            r.go.set()
            got += list(scan)
        assert [(x.partition, x.offset, x.value) for x in got] == [
            (0, 0, b"0-0"), (0, 1, b"0-1"), (1, 0, b"1-0"), (1, 1, b"1-1")
        ]
        # Both partitions were read again from their compacted blobs; partition 1
        # started over, so its old blob was asked for once more (and found gone).
        compacted = [_data_keys(conn, "y", p)[0] for p in (0, 1)]
        if cache_bytes:
            # The blob cache still held partition 1's old blob (fetched before vacuum;
            # an object key's bytes never change), so its restart read no storage.
            assert sorted(r.started[3:]) == sorted([compacted[0], other])
            assert conn.metrics.read_cache_requests.labels("hit")._value.get() >= 1
        else:
            assert sorted(r.started[3:]) == sorted([*compacted, other])


def test_a_partition_below_its_log_start_raises_when_its_turn_comes(rconn: llog.Connection) -> None:
    slice_bytes = len(batch.encode([llog.Record(b"v", timestamp=1)]))
    llog.Topics(rconn).create("z", 2, retention_bytes=slice_bytes)  # keeps the newest slice
    with llog.Writer(rconn) as w:
        w.append("z", 0, [b"a"])
        for _ in range(3):
            w.append("z", 1, [b"v"])
    assert apply_retention(rconn, "z", 1).new_start == 2
    with llog.Reader(rconn) as r:
        scan = r.scan_many([("z", 0, 0, None), ("z", 1, 0, None), ("z", 0, 0, None)])
        assert next(scan).value == b"a"  # partition 0's records come first
        with pytest.raises(llog.OffsetOutOfRange) as exc:
            next(scan)
        assert (exc.value.topic, exc.value.partition, exc.value.offset) == ("z", 1, 0)
        assert [x.offset for x in r.scan_many([("z", 1, 2, None), ("z", 0, 0, None)])] == [2, 0]
