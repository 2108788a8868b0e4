"""Retention by size and age against the real servers: the log start moves to an
entry boundary, index keys below it go, reads below it get OffsetOutOfRange, blobs
are left to vacuum, and retention never races a compaction."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

import llog
from compactor import Compactor, StageEvent, compact_once
from compactor.compact import CONFLICT, read_cursor
from compactor.retention import apply_retention, retention_cut
from compactor.vacuum import vacuum
from llog import Record
from llog.codec import batch
from llog.state.control import now_ms, read_control

TOPIC = "r"
VALUE = b"x" * 1000


@pytest.fixture
def rconn(config: llog.LlogConfig) -> Iterator[llog.Connection]:
    with llog.Connection(replace(config, compact_min_age_ms=0, settle_after_ms=0)) as c:
        yield c


def _index_ends(conn: llog.Connection, topic: str = TOPIC) -> list[int]:
    k = conn.keys
    return [k.end_offset_of(x) for x in conn.etcd.keys(k.index_prefix(topic, 0), k.index_range_end(topic, 0))]


def _slice_bytes(records: int) -> int:
    """Bytes of the slice of an append of ``records`` VALUE records."""
    return len(batch.encode([Record(VALUE, timestamp=1)] * records))


def test_retention_cut_counts_whole_entries() -> None:
    entries = [(1, 100, 10, 5), (3, 100, 20, 6), (4, 100, 30, 7), (9, 100, 40, 8)]

    def cut(pending: int = 0, ms: int | None = None, size: int | None = None, rev: int = 0) -> int:
        return retention_cut(
            entries, pending, retention_ms=ms, retention_bytes=size, now_ms=100, expired_revision=rev
        )

    assert cut() == 0
    # Kafka's rule: an entry goes only while what remains is still at least the limit.
    assert cut(size=250) == 1  # 300 remain after one, 200 (< 250) after two
    assert cut(size=200) == 2
    assert cut(pending=60, size=250) == 2  # the pending counts toward the size
    assert cut(size=50) == 3  # the newest entry stays whatever the limit
    assert cut(pending=60, size=50) == 4  # ... unless the pending alone meets it
    assert cut(ms=75) == 2  # entries whose newest record is older than 100 - 75
    assert cut(ms=1) == 4
    assert cut(ms=75, size=150) == 2  # whichever drops more
    assert cut(ms=1, size=150) == 4
    # Committed at or before the expired revision: gone whatever the record time says.
    assert cut(ms=1000, rev=6) == 2
    assert cut(ms=75, rev=7) == 3
    assert cut(rev=8) == 0  # no retention_ms: no expiry by time at all


def test_size_retention_moves_log_start_and_leaves_blobs_to_vacuum(rconn: llog.Connection) -> None:
    conn = rconn
    # Room for three and a half single-record slices.
    llog.Topics(conn).create(TOPIC, 1, retention_bytes=_slice_bytes(1) * 7 // 2)
    with llog.Writer(conn) as w:
        for i in range(10):
            w.append(TOPIC, 0, [VALUE, VALUE] if i == 5 else [VALUE])
    objects = {o.key for o in conn.store.list(conn.keys.wal_prefix())}
    # Offsets 0..10: entries end at 0,1,2,3,4,6,7,8,9,10 (the 6th append holds two records).
    assert _index_ends(conn) == [0, 1, 2, 3, 4, 6, 7, 8, 9, 10]
    res = apply_retention(conn, TOPIC, 0)
    # Kafka's rule: entries go while what remains is still at least 3.5 slices' bytes.
    # Four single-record slices remain (three would be less); the log starts at 7.
    assert (res.old_start, res.new_start, res.index_keys) == (0, 7, 6)
    assert _index_ends(conn) == [7, 8, 9, 10]
    assert read_control(conn, TOPIC, 0).control.log_start_offset == 7
    assert read_cursor(conn, TOPIC, 0)[0] == 7
    with llog.Reader(conn) as r:
        with pytest.raises(llog.OffsetOutOfRange):
            r.read(TOPIC, 0, 6)
        with pytest.raises(llog.OffsetOutOfRange):
            list(r.scan(TOPIC, 0, 0))
        assert [c.offset for c in r.scan(TOPIC, 0, 7)] == [7, 8, 9, 10]
        assert r.high_watermark(TOPIC, 0) == (7, 11)
    assert {o.key for o in conn.store.list(conn.keys.wal_prefix())} == objects  # blobs stay
    assert apply_retention(conn, TOPIC, 0).new_start == 7  # nothing more to drop
    report = vacuum(conn, grace_s=0)
    assert len(report.deleted) == 6
    with llog.Reader(conn) as r:
        assert [c.offset for c in r.scan(TOPIC, 0, 7)] == [7, 8, 9, 10]
    # Compaction starts at the new log start.
    res2 = compact_once(conn, TOPIC, 0)
    assert res2.record is not None and (res2.record.start_offset, res2.record.end_offset) == (7, 10)


def test_time_retention_drops_entries_whose_records_are_all_old(rconn: llog.Connection) -> None:
    conn = rconn
    llog.Topics(conn).create(TOPIC, 1, retention_ms=3_600_000)
    old = now_ms() - 7_200_000
    with llog.Writer(conn) as w:
        w.append(TOPIC, 0, [Record(b"o1", timestamp=old), Record(b"o2", timestamp=old)])
        w.append(TOPIC, 0, [Record(b"o3", timestamp=old)])
        w.append(TOPIC, 0, [Record(b"o4", timestamp=old), Record(b"new")])  # one recent record: kept
        w.append(TOPIC, 0, [Record(b"o5", timestamp=old)])
    res = apply_retention(conn, TOPIC, 0)
    assert (res.new_start, res.index_keys) == (3, 2)
    with llog.Reader(conn) as r:
        assert [c.value for c in r.scan(TOPIC, 0, 3)] == [b"o4", b"new", b"o5"]


def test_retention_drops_compacted_entries_whole(rconn: llog.Connection) -> None:
    conn = llog.Connection(replace(rconn.config, compact_max_records=4))
    try:
        llog.Topics(conn).create(TOPIC, 1, retention_bytes=1)
        with llog.Writer(conn) as w:
            for _ in range(6):
                w.append(TOPIC, 0, [VALUE, VALUE])
        assert compact_once(conn, TOPIC, 0).outcome == "compacted"  # [0, 3] in one entry
        assert _index_ends(conn) == [3, 5, 7, 9, 11]
        # A bound smaller than any entry drops all but the newest, compacted or not
        # (Kafka's rule: what remains is at least the bound): the log starts at 10.
        res = apply_retention(conn, TOPIC, 0)
        assert (res.new_start, res.index_keys) == (10, 4)
        assert _index_ends(conn) == [11]
        with llog.Reader(conn) as r:
            assert r.high_watermark(TOPIC, 0) == (10, 12)
            assert [c.offset for c in r.scan(TOPIC, 0, 10)] == [10, 11]
        with llog.Writer(conn) as w:
            assert w.append(TOPIC, 0, [b"after"]).start_offset == 12
        # Now the newest entry is the one just written: the one before goes too.
        assert apply_retention(conn, TOPIC, 0).new_start == 12
        with llog.Reader(conn) as r:
            assert [c.value for c in r.scan(TOPIC, 0, 12)] == [b"after"]
    finally:
        conn.close()


def test_retention_waits_for_an_inflight_compaction_and_beats_a_late_one(rconn: llog.Connection) -> None:
    conn = rconn
    llog.Topics(conn).create(TOPIC, 1, retention_bytes=1)
    with llog.Writer(conn) as w:
        for i in range(4):
            w.append(TOPIC, 0, [b"%d" % i])

    class Stop(Exception):
        pass

    def stop_after_record(ev: StageEvent) -> None:
        if ev.point == "after_record":
            raise Stop

    with pytest.raises(Stop), Compactor(conn, hook=stop_after_record) as c:
        c.compact_once(TOPIC, 0)
    # A compaction is in flight: retention leaves the partition alone.
    res = apply_retention(conn, TOPIC, 0)
    assert res.new_start == res.old_start == 0
    assert compact_once(conn, TOPIC, 0).recovered is not None
    with llog.Writer(conn) as w:
        for i in range(4, 8):
            w.append(TOPIC, 0, [b"%d" % i])

    # A compaction that selected its run before retention moved the cursor creates no record.
    def retention_meanwhile(ev: StageEvent) -> None:
        if ev.point == "after_put":
            assert apply_retention(conn, TOPIC, 0).new_start == 7  # all but the newest entry

    with Compactor(conn, hook=retention_meanwhile) as c:
        assert c.compact_once(TOPIC, 0).outcome == CONFLICT
    assert conn.etcd.get(conn.keys.compaction(TOPIC, 0)) is None
    assert _index_ends(conn) == [7]
    with llog.Reader(conn) as r:
        assert r.high_watermark(TOPIC, 0) == (7, 8)


def test_no_retention_is_a_no_op(rconn: llog.Connection) -> None:
    llog.Topics(rconn).create(TOPIC, 1)
    with llog.Writer(rconn) as w:
        w.append(TOPIC, 0, [b"a"])
    res = apply_retention(rconn, TOPIC, 0)
    assert (res.old_start, res.new_start, res.index_keys) == (0, 0, 0)
    with pytest.raises(llog.UnknownPartition):
        apply_retention(rconn, TOPIC, 3)
