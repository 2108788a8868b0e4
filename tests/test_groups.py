"""Consumer groups: committed offsets, epochs, membership and the Consumer."""

from __future__ import annotations

import pytest

import llog
from llog.errors import BackwardsCommit, CommitOutOfRange, NotAssigned, StaleEpoch
from llog.group_names import list_groups
from llog.groups import Consumer, GroupOffsets
from llog.groups.epoch import bump_epoch
from llog.groups.membership import range_assign
from llog.groups.offsets import Fence
from llog.topic.time_lookup import offset_for_timestamp


def _fill(conn: llog.Connection, topic: str, partitions: int, per_partition: int) -> None:
    llog.Topics(conn).create(topic, partitions)
    with llog.Writer(conn) as w:
        for p in range(partitions):
            w.append(topic, p, [f"{topic}-{p}-{i}".encode() for i in range(per_partition)])


def test_range_assign_is_deterministic_and_disjoint() -> None:
    parts = [("a", p) for p in range(8)] + [("b", p) for p in range(3)]
    out = range_assign(["m2", "m1", "m3"], parts)
    assert out == range_assign(["m1", "m3", "m2"], list(reversed(parts)))
    flat = [tp for s in out.values() for tp in s]
    assert sorted(flat) == sorted(parts)
    assert out["m1"] >= {("a", 0), ("a", 1), ("a", 2), ("b", 0)}


def test_commits_are_monotonic_unless_reset(conn: llog.Connection) -> None:
    _fill(conn, "t", 1, 10)
    offs = GroupOffsets(conn, "g")
    assert offs.get("t", 0) is None
    offs.commit("t", 0, 5)
    with pytest.raises(BackwardsCommit):
        offs.commit("t", 0, 4)
    committed = offs.get("t", 0)
    assert committed is not None and committed.offset == 5
    offs.commit("t", 0, 2, reset=True)
    committed = offs.get("t", 0)
    assert committed is not None and committed.offset == 2
    with pytest.raises(CommitOutOfRange):
        offs.commit("t", 0, 11)  # past next_offset
    assert list_groups(conn) == ["g"]


def test_zombie_with_stale_epoch_cannot_commit(conn: llog.Connection) -> None:
    _fill(conn, "t", 1, 10)
    offs = GroupOffsets(conn, "g")
    old = bump_epoch(conn, "g", "first")
    offs.commit("t", 0, 3, fence=Fence(epoch=old))
    new = bump_epoch(conn, "g", "second")
    assert new.epoch == old.epoch + 1
    with pytest.raises(StaleEpoch):
        offs.commit("t", 0, 8, fence=Fence(epoch=old))
    committed = offs.get("t", 0)
    assert committed is not None and committed.offset == 3
    offs.commit("t", 0, 8, fence=Fence(epoch=new))


def test_exclusive_consumer_fences_the_previous_one(conn: llog.Connection) -> None:
    _fill(conn, "t", 2, 5)
    zombie = Consumer(conn, "g", ["t"], exclusive=True)
    got = zombie.poll(max_records=100, timeout_s=0)
    assert len(got) == 10
    fresh = Consumer(conn, "g", ["t"], exclusive=True)
    with pytest.raises(StaleEpoch):
        zombie.commit()
    assert GroupOffsets(conn, "g").all() == []
    fresh.poll(max_records=3, timeout_s=0)
    fresh.commit()
    zombie.close()
    fresh.close()


def test_consumer_never_commits_past_delivered(conn: llog.Connection) -> None:
    _fill(conn, "t", 1, 10)
    with Consumer(conn, "g", ["t"], exclusive=True) as c:
        recs = c.poll(max_records=4, timeout_s=0)
        assert [r.offset for r in recs] == [0, 1, 2, 3]
        with pytest.raises(CommitOutOfRange):
            c.commit({("t", 0): 5})
        c.commit()
    committed = GroupOffsets(conn, "g").get("t", 0)
    assert committed is not None and committed.offset == 4
    with Consumer(conn, "g", ["t"], exclusive=True) as c:
        assert [r.offset for r in c.poll(max_records=100, timeout_s=0)] == list(range(4, 10))


def test_members_share_partitions_and_take_over(conn: llog.Connection) -> None:
    _fill(conn, "t", 8, 3)
    a = Consumer(conn, "g", ["t"], member_id="a", rebalance_interval_s=0)
    b = Consumer(conn, "g", ["t"], member_id="b", rebalance_interval_s=0)
    try:
        # a took everything before b joined; sync until the split settles.
        for _ in range(5):
            a.poll(timeout_s=0)
            b.poll(timeout_s=0)
        assert a.assignment().isdisjoint(b.assignment())
        assert a.assignment() | b.assignment() == {("t", p) for p in range(8)}
        assert len(a.assignment()) == 4
        # b's commit is refused for a partition it does not own.
        foreign = sorted(a.assignment())[0]
        with pytest.raises(NotAssigned):
            GroupOffsets(conn, "g").commit(*foreign, 1, fence=b.fence)
    finally:
        b.close(commit=True)
    for _ in range(3):
        a.poll(timeout_s=0)
    assert a.assignment() == {("t", p) for p in range(8)}
    a.close(commit=True)
    # Each partition's 3 records were delivered and committed exactly up to the end.
    assert sorted(c.offset for c in GroupOffsets(conn, "g").all()) == [3] * 8


def test_offset_for_timestamp(conn: llog.Connection) -> None:
    llog.Topics(conn).create("t", 1)
    with llog.Writer(conn) as w:
        w.append("t", 0, [llog.Record(b"a", timestamp=100), llog.Record(b"b", timestamp=200)])
        w.append("t", 0, [llog.Record(b"c", timestamp=300)])
        w.append("t", 0, [llog.Record(b"d", timestamp=250), llog.Record(b"e", timestamp=400)])
    with llog.Reader(conn) as r:
        assert offset_for_timestamp(r, "t", 0, 0) == 0
        assert offset_for_timestamp(r, "t", 0, 150) == 1
        assert offset_for_timestamp(r, "t", 0, 260) == 2
        assert offset_for_timestamp(r, "t", 0, 301) == 4
        assert offset_for_timestamp(r, "t", 0, 401) is None


def test_a_poll_reads_every_assigned_partition_in_one_etcd_round_trip(conn: llog.Connection) -> None:
    _fill(conn, "t", 16, 2)

    def partition_reads() -> float:
        return sum(conn.metrics.value("llog_etcd_ops_total", op=op) for op in ("get_many", "range"))

    with Consumer(conn, "g", ["t"], exclusive=True) as c:
        # The budget ends inside partition 2 of the round-robin order: the rest waits.
        assert len(c.poll(max_records=5, timeout_s=0)) == 5
        got = c.poll(max_records=100, timeout_s=0)
        assert sorted((r.partition, r.offset) for r in got) == sorted(
            [(2, 1)] + [(p, o) for p in range(3, 16) for o in (0, 1)]
        )
        before = partition_reads()
        assert c.poll(max_records=100, timeout_s=0) == []  # every partition at its tail
        assert partition_reads() - before == 1
