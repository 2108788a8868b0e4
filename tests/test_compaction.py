"""compact_once against the real etcd and S3 servers: what it writes, the stage
machine, recovery from every stage in-process, claims, and readers during compaction."""

from __future__ import annotations

import random
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import replace

import pytest

import llog
from compactor import ClaimLost, Compactor, StageEvent, claimed, compact_once
from compactor.claims import LeaseKeeper, release_claim, try_claim
from compactor.compact import COMPACTED, CONFLICT, IDLE
from compactor.metrics import compactor_metrics
from compactor.planner import select_run
from compactor.recovery import finish_interrupted
from compactor.stages import StageHook
from llog import AppendGroup, Record
from llog.codec.etcd_values.compaction import CompactionRecord
from llog.codec.etcd_values.partition import COMPACTED as KIND_COMPACTED
from llog.codec.etcd_values.partition import WAL, IndexEntry
from llog.state.control import read_control

TOPIC = "orders"
#: select_run's aged_revision with no minimum age: above every key's mod_revision.
EVERY_KEY = sys.maxsize


@pytest.fixture
def cconn(config: llog.LlogConfig) -> Iterator[llog.Connection]:
    """A connection whose compactions take any entry, however young."""
    with llog.Connection(replace(config, compact_min_age_ms=0, settle_after_ms=0)) as c:
        llog.Topics(c).create(TOPIC, 2)
        yield c


def _records(i: int) -> list[Record]:
    return [
        Record(f"v{i}".encode(), key=f"k{i}".encode() if i % 3 else None, timestamp=1_000 + i,
               headers=(("h", bytes([i % 256])),) if i % 2 else ()),
        Record(b"x" * (i % 7)),
    ]


def _write(conn: llog.Connection, appends: int, partition: int = 0, per_blob: int = 10) -> None:
    with llog.Writer(conn) as w:
        for base in range(0, appends, per_blob):
            w.append_shared([AppendGroup(TOPIC, partition, _records(i))
                             for i in range(base, min(appends, base + per_blob))])


def _scan(conn: llog.Connection, partition: int = 0) -> list[tuple[int, int, bytes | None, bytes, object]]:
    with llog.Reader(conn) as r:
        return [(c.offset, c.timestamp, c.key, c.value, c.headers) for c in r.scan(TOPIC, partition)]


def _index(conn: llog.Connection, partition: int = 0) -> list[tuple[int, int, IndexEntry]]:
    keys = conn.keys
    out = []
    for kv in conn.etcd.scan(keys.index_prefix(TOPIC, partition), keys.index_range_end(TOPIC, partition)):
        e = IndexEntry.decode(kv.value)
        end = keys.end_offset_of(kv.key)
        out.append((end - e.msg_count + 1, end, e))
    return out


def _assert_tiles(conn: llog.Connection, partition: int = 0) -> None:
    """Index entries cover [log_start, next_offset) exactly once each (pending aside)."""
    ctl = read_control(conn, TOPIC, partition).control
    nxt = ctl.log_start_offset
    for start, end, _ in _index(conn, partition):
        assert start == nxt, f"entry [{start}, {end}] does not start at {nxt}"
        nxt = end + 1
    top = ctl.pending.start_offset if ctl.pending is not None else ctl.next_offset
    assert nxt == top


def _cursor(conn: llog.Connection, partition: int = 0) -> int | None:
    from compactor.compact import read_cursor

    return read_cursor(conn, TOPIC, partition)[0]


def test_compact_once_rewrites_runs_and_scans_stay_identical(cconn: llog.Connection) -> None:
    conn = llog.Connection(replace(cconn.config, compact_max_records=30))
    try:
        _write(conn, 50)
        before = _scan(conn)
        assert len(_index(conn)) == 50
        outcomes = []
        with Compactor(conn) as c:
            while (res := c.compact_once(TOPIC, 0)).outcome == COMPACTED:
                assert res.record is not None
                outcomes.append((res.record.start_offset, res.record.end_offset, res.entries))
        assert res.outcome == IDLE
        # Runs of whole appends (2 records each), cut at 30 records, from the cursor on.
        assert outcomes == [(0, 29, 15), (30, 59, 15), (60, 89, 15), (90, 99, 5)]
        assert _scan(conn) == before
        idx = _index(conn)
        assert [(s, e) for s, e, _ in idx] == [(0, 29), (30, 59), (60, 89), (90, 99)]
        assert {x.kind for _, _, x in idx} == {KIND_COMPACTED}
        assert all(x.data_key.startswith(conn.keys.compacted_prefix(TOPIC, 0)) for _, _, x in idx)
        assert _cursor(conn) == 100
        assert conn.etcd.get(conn.keys.compaction(TOPIC, 0)) is None
        assert conn.metrics.value("llog_compactor_records_total") == 100
        assert conn.metrics.value("llog_compactor_index_keys_removed_total") == 46
        assert conn.metrics.value("llog_compactor_runs_total", outcome="compacted") == 4
        desc = llog.Topics(conn).describe(TOPIC).partitions[0]
        assert (desc.index_keys, desc.compaction_cursor, desc.compaction_lag) == (4, 100, 0)
        assert desc.last_compaction_ms is not None
        # New appends after the cursor are compacted next, never the compacted entries again.
        _write(conn, 3)
        res = compact_once(conn, TOPIC, 0)
        assert res.outcome == COMPACTED and res.record is not None
        assert (res.record.start_offset, res.record.end_offset) == (100, 105)
        assert _scan(conn)[:100] == before
        _assert_tiles(conn)
    finally:
        conn.close()


def test_selection_respects_min_age_and_byte_target(cconn: llog.Connection) -> None:
    _write(cconn, 6)
    young = llog.Connection(replace(cconn.config, compact_min_age_ms=3_600_000))
    try:
        listed = list(young.store.list(young.keys.all_prefix()))
        assert compact_once(young, TOPIC, 0).outcome == IDLE
        assert list(young.store.list(young.keys.all_prefix())) == listed  # nothing written
    finally:
        young.close()
    sizes = [e.byte_length for _, _, e in _index(cconn)]
    run = select_run(cconn, TOPIC, 0, 0, target_bytes=sizes[0] + sizes[1], max_records=10**6,
                     aged_revision=EVERY_KEY)
    assert run is not None and (run.start_offset, run.end_offset, run.entries) == (0, 3, 2)
    # A first entry bigger than the target is still taken alone: the cursor never sticks.
    run = select_run(cconn, TOPIC, 0, 2, target_bytes=1, max_records=1, aged_revision=EVERY_KEY)
    assert run is not None and (run.start_offset, run.end_offset, run.last_wal_start_offset) == (2, 3, 2)
    # Inside an entry (where DeleteRecords moved the log start): the run starts there,
    # its first entry's key and start kept for the stages' checks.
    run = select_run(cconn, TOPIC, 0, 1, target_bytes=sizes[0], max_records=10**6, aged_revision=EVERY_KEY)
    assert run is not None and (run.start_offset, run.end_offset, run.last_wal_start_offset) == (1, 1, 0)


def test_pending_is_settled_then_compacted(cconn: llog.Connection) -> None:
    w = llog.Writer(cconn)
    try:
        w.append(TOPIC, 1, [b"a", b"b"])
        w.append(TOPIC, 1, [b"c"])
        assert read_control(cconn, TOPIC, 1).control.pending is not None
        res = compact_once(cconn, TOPIC, 1)
        assert res.outcome == COMPACTED and res.record is not None
        assert (res.record.start_offset, res.record.end_offset) == (0, 2)
        assert read_control(cconn, TOPIC, 1).control.pending is None
        assert [v for *_, v, _ in _scan(cconn, 1)] == [b"a", b"b", b"c"]
        # The writer's cached control is stale now; its next append still lands right.
        r = w.append(TOPIC, 1, [b"d"])
        assert r.start_offset == 3
    finally:
        w.close()
    assert [v for *_, v, _ in _scan(cconn, 1)] == [b"a", b"b", b"c", b"d"]


class _Crash(Exception):
    pass


def _crash_at(point: str) -> StageHook:
    def hook(ev: StageEvent) -> None:
        if ev.point == point:
            raise _Crash(point)

    return hook


@pytest.mark.parametrize(
    ("point", "stage_left"),
    [
        ("after_put", None),
        ("after_record", "WRITING_COMPACTED_INDEX"),
        ("after_WRITING_COMPACTED_INDEX", "DELETING_OLD"),
        ("after_DELETING_OLD", "UPDATING_CURSOR"),
        ("after_UPDATING_CURSOR", None),
    ],
)
def test_interrupted_compaction_is_finished_by_the_next(
    cconn: llog.Connection, point: str, stage_left: str | None
) -> None:
    _write(cconn, 8)
    before = _scan(cconn)
    with pytest.raises(_Crash), Compactor(cconn, hook=_crash_at(point)) as c:
        c.compact_once(TOPIC, 0)
    kv = cconn.etcd.get(cconn.keys.compaction(TOPIC, 0))
    assert (CompactionRecord.decode(kv.value).stage if kv else None) == stage_left
    assert _scan(cconn) == before  # readers are right in the interrupted state too
    res = compact_once(cconn, TOPIC, 0)
    if stage_left is None:
        assert res.recovered is None
    else:
        assert res.recovered is not None and res.recovered.stage == stage_left
        assert res.recovered.finished.outcome == "done"
    assert cconn.etcd.get(cconn.keys.compaction(TOPIC, 0)) is None
    assert _scan(cconn) == before
    assert all(e.kind == KIND_COMPACTED for _, _, e in _index(cconn))
    _assert_tiles(cconn)
    assert _cursor(cconn) == 16


POINTS = ("after_put", "after_record", "after_WRITING_COMPACTED_INDEX", "after_DELETING_OLD",
          "after_UPDATING_CURSOR")


def test_readers_are_right_at_every_instant_of_the_stage_sequence(cconn: llog.Connection) -> None:
    """At each protocol point: a fresh full scan, point reads across the compacted
    range and its edges, and a scan that resolved its first slices before compaction
    began (drained only now) all return exactly the records written."""
    conn = llog.Connection(replace(cconn.config, compact_max_records=10, read_prefetch=1))
    try:
        _write(conn, 8, per_blob=1)  # 16 records; the run is [0, 9], five WAL entries
        expected = _scan(conn)
        seen: list[str] = []
        with llog.Reader(conn) as r:
            early = {pt: r.scan(TOPIC, 0) for pt in POINTS}
            for i, it in enumerate(early.values()):
                for _ in range(2 * i + 1):  # each stopped somewhere else in the range
                    next(it)

            def check(ev: StageEvent) -> None:
                seen.append(ev.point)
                assert _scan(conn) == expected, ev.point
                for off in (0, 1, 7, 8, 9, 10, 15):
                    c = r.read(TOPIC, 0, off)
                    assert c is not None
                    assert (c.offset, c.timestamp, c.key, c.value, c.headers) == expected[off], ev.point
                rest = [(c.offset, c.timestamp, c.key, c.value, c.headers) for c in early[ev.point]]
                start = 2 * POINTS.index(ev.point) + 1
                assert rest == expected[start:], ev.point

            with Compactor(conn, hook=check) as c:
                res = c.compact_once(TOPIC, 0)
        assert res.outcome == COMPACTED and res.record is not None
        assert (res.record.start_offset, res.record.end_offset) == (0, 9)
        assert seen == list(POINTS)
        assert _scan(conn) == expected
        _assert_tiles(conn)
    finally:
        conn.close()


def test_stale_claim_cannot_finish_a_stage(cconn: llog.Connection) -> None:
    _write(cconn, 4)
    before = _scan(cconn)
    etcd = cconn.etcd
    with LeaseKeeper(etcd, 30) as a_lease, LeaseKeeper(etcd, 30) as b_lease:
        a = try_claim(cconn, TOPIC, 0, a_lease.lease, "A")
        assert not isinstance(a, Exception)
        with pytest.raises(_Crash), Compactor(cconn, hook=_crash_at("after_record")) as c:
            c.compact_once(TOPIC, 0, claim=a)
        # A's lease lapses (revoked here); B claims the partition.
        etcd.revoke_lease(a_lease.lease)
        b = try_claim(cconn, TOPIC, 0, b_lease.lease, "B")
        assert not isinstance(b, Exception)
        m = compactor_metrics(cconn.metrics)
        with pytest.raises(ClaimLost):
            finish_interrupted(cconn, TOPIC, 0, claim=a, metrics=m)
        kv = etcd.get(cconn.keys.compaction(TOPIC, 0))
        assert kv is not None and CompactionRecord.decode(kv.value).stage == "WRITING_COMPACTED_INDEX"
        # Unclaimed callers cannot touch a claimed partition either.
        with pytest.raises(ClaimLost):
            compact_once(cconn, TOPIC, 0)
        got = finish_interrupted(cconn, TOPIC, 0, claim=b, metrics=m)
        assert got is not None and got.finished.outcome == "done"
        assert release_claim(cconn, b)
    assert _scan(cconn) == before
    _assert_tiles(cconn)


def test_claimed_is_exclusive(cconn: llog.Connection) -> None:
    from compactor import ClaimConflict

    with claimed(cconn, TOPIC, 0) as held:
        assert cconn.etcd.get(held.key) is not None
        with pytest.raises(ClaimConflict), claimed(cconn, TOPIC, 0):
            pass
    assert cconn.etcd.get(cconn.keys.compactor_claim(TOPIC, 0)) is None


def test_second_compaction_on_a_moved_cursor_is_a_conflict(cconn: llog.Connection) -> None:
    """Two unclaimed compactions racing: the one whose cursor moved makes no change."""
    _write(cconn, 6)
    before = _scan(cconn)
    inner: list[object] = []

    def race(ev: StageEvent) -> None:
        if ev.point == "after_put" and not inner:
            inner.append(compact_once(cconn, TOPIC, 0))

    with Compactor(cconn, hook=race) as c:
        res = c.compact_once(TOPIC, 0)
    assert res.outcome == CONFLICT
    assert getattr(inner[0], "outcome", None) == COMPACTED
    assert _scan(cconn) == before
    _assert_tiles(cconn)


def test_bad_input_is_rejected_and_changes_nothing(cconn: llog.Connection) -> None:
    _write(cconn, 2)
    snapshot = _index(cconn)
    for topic, part, err in [
        ("bad topic!", 0, llog.InvalidTopicName),
        (TOPIC, -1, llog.InvalidPartition),
        (TOPIC, 7, llog.UnknownPartition),
        ("missing", 0, llog.UnknownTopic),
    ]:
        with pytest.raises(err):
            compact_once(cconn, topic, part)
    assert _index(cconn) == snapshot


def test_readers_never_see_wrong_missing_or_duplicate_records_during_200_compactions(
    cconn: llog.Connection,
) -> None:
    conn = llog.Connection(replace(cconn.config, compact_max_records=4))
    try:
        _write(conn, 420, per_blob=30)
        expected = _scan(conn)
        assert len(expected) == 840
        stop = threading.Event()
        problems: list[str] = []
        scans = [0, 0]

        def scanner() -> None:
            # Mostly short scans that start near the compaction cursor, where the index
            # changes; every fifth a full scan.
            rnd = random.Random(7)
            with llog.Reader(conn) as r:
                while not stop.is_set():
                    lo, hi = 0, len(expected)
                    if scans[0] % 5:
                        lo = max(0, min(hi - 1, (_cursor(conn) or 0) + rnd.randrange(-12, 12)))
                        hi = min(hi, lo + 24)
                    got = [(c.offset, c.timestamp, c.key, c.value, c.headers)
                           for c in r.scan(TOPIC, 0, lo, hi)]
                    if got != expected[lo:hi]:
                        problems.append(f"scan [{lo}, {hi}) differs at {_first_diff(got, expected[lo:hi])}")
                    scans[0] += 1

        def point_reader() -> None:
            rnd = random.Random(5)
            with llog.Reader(conn) as r:
                while not stop.is_set():
                    off = rnd.randrange(len(expected))
                    c = r.read(TOPIC, 0, off)
                    if c is None or (c.offset, c.timestamp, c.key, c.value, c.headers) != expected[off]:
                        problems.append(f"read({off}) returned {c}")
                    scans[1] += 1

        threads = [threading.Thread(target=scanner), threading.Thread(target=point_reader)]
        for t in threads:
            t.start()
        done = 0
        try:
            with Compactor(conn) as c:
                while done < 200:
                    res = c.compact_once(TOPIC, 0)
                    assert res.outcome == COMPACTED, res
                    done += 1
        finally:
            stop.set()
            for t in threads:
                t.join()
        assert problems == []
        assert scans[0] > 0 and scans[1] > 0
        assert _scan(conn) == expected
        _assert_tiles(conn)
        assert sum(1 for *_, e in _index(conn) if e.kind == WAL) == 20
    finally:
        conn.close()


def _first_diff(got: Sequence[object], want: Sequence[object]) -> str:
    for i, (g, w) in enumerate(zip(got, want, strict=False)):
        if g != w:
            return f"index {i}: got {g}, want {w}"
    return f"length {len(got)} vs {len(want)}"
