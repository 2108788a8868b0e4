"""Topic administration against the real etcd and S3 servers: create, list,
describe, fence/unfence."""

from __future__ import annotations

import pytest

from llog import Connection, Reader, Topics, Writer
from llog.codec.etcd_values.partition import FENCED, OPEN
from llog.errors import (
    Fenced,
    InvalidInput,
    InvalidPartition,
    InvalidTopicName,
    TopicConflict,
    UnknownPartition,
    UnknownTopic,
)
from llog.records import AppendGroup
from llog.state.keys import prefix_range_end
from llog.writer import AppendFailure, AppendResult


def etcd_keys(conn: Connection) -> list[tuple[str, int]]:
    """Every etcd key under the test's root with its mod_revision."""
    root = conn.keys.all_prefix()
    return [(kv.key, kv.mod_revision) for kv in conn.etcd.scan(root, prefix_range_end(root))]


def test_create_is_idempotent(conn: Connection) -> None:
    topics = Topics(conn)
    first = topics.create("orders", 4, retention_ms=60_000)
    before = etcd_keys(conn)
    again = topics.create("orders", 4)
    assert again == first
    assert etcd_keys(conn) == before
    assert topics.get("orders") == first
    assert (first.name, first.partitions, first.retention_ms) == ("orders", 4, 60_000)


def test_conflicting_partition_count(conn: Connection) -> None:
    topics = Topics(conn)
    topics.create("orders", 4)
    before = etcd_keys(conn)
    with pytest.raises(TopicConflict, match="4 partitions"):
        topics.create("orders", 5)
    with pytest.raises(TopicConflict):
        topics.create("orders", 1)
    assert etcd_keys(conn) == before
    assert topics.get("orders").partitions == 4


@pytest.mark.parametrize(
    "name", ["", "a/b", "has space", "ümlaut", "x" * 250, ".", "..", "wal-shared", "_groups", "a*", None, 7]
)
def test_invalid_names_write_nothing(conn: Connection, name: object) -> None:
    with pytest.raises(InvalidTopicName):
        Topics(conn).create(name, 1)  # type: ignore[arg-type]
    assert etcd_keys(conn) == []


@pytest.mark.parametrize("partitions", [0, -1, 100_001, 1.5, "3", None, True])
def test_invalid_partition_counts_write_nothing(conn: Connection, partitions: object) -> None:
    with pytest.raises(InvalidInput):
        Topics(conn).create("orders", partitions)  # type: ignore[arg-type]
    assert etcd_keys(conn) == []


@pytest.mark.parametrize(("field", "value"), [("retention_ms", 0), ("retention_ms", -5),
                                              ("retention_bytes", "big"), ("retention_bytes", True)])
def test_invalid_retention_writes_nothing(conn: Connection, field: str, value: object) -> None:
    with pytest.raises(InvalidInput):
        Topics(conn).create("orders", 1, **{field: value})  # type: ignore[arg-type]
    assert etcd_keys(conn) == []


def test_longest_valid_name(conn: Connection) -> None:
    name = "a" * 249
    assert Topics(conn).create(name, 1).name == name
    assert [t.name for t in Topics(conn).list()] == [name]


def test_list_returns_every_topic_sorted_by_name(conn: Connection) -> None:
    topics = Topics(conn)
    assert topics.list() == []
    names = ["ab", "a", "a.b", "a-b", "a_b", "A", "b", "a0", "a.b.c"]
    for i, n in enumerate(names):
        topics.create(n, i + 1)
    with Writer(conn) as w:  # index and control keys between the topic keys
        w.append("a", 0, [b"x"])
        w.append("a.b", 2, [b"y"])
    listed = topics.list()
    assert [t.name for t in listed] == sorted(names)
    assert {t.name: t.partitions for t in listed} == {n: i + 1 for i, n in enumerate(names)}


def test_get_unknown_topic(conn: Connection) -> None:
    with pytest.raises(UnknownTopic):
        Topics(conn).get("missing")
    with pytest.raises(UnknownTopic):
        Topics(conn).describe("missing")


def test_describe_a_fresh_topic(conn: Connection) -> None:
    Topics(conn).create("orders", 2)
    d = Topics(conn).describe("orders")
    assert d.meta.name == "orders"
    assert [(p.partition, p.log_state, p.next_offset, p.log_start_offset, p.pending, p.index_keys,
             p.compaction_cursor) for p in d.partitions] == [(0, OPEN, 0, 0, None, 0, 0), (1, OPEN, 0, 0, None, 0, 0)]


def test_describe_after_appends(conn: Connection) -> None:
    Topics(conn).create("orders", 3)
    w = Writer(conn)
    try:
        for n in (3, 1, 4):
            w.append("orders", 0, [b"v"] * n)
        last = w.append("orders", 1, [b"a", b"b"])
        d = Topics(conn).describe("orders")
        p0, p1, p2 = d.partitions
        assert (p0.next_offset, p0.log_start_offset, p0.compaction_cursor) == (8, 0, 0)
        # The newest append of each partition is still pending; the earlier ones were
        # materialized by the next commit.
        assert p0.pending is not None
        assert (p0.pending.start_offset, p0.pending.end_offset, p0.pending.msg_count) == (4, 7, 4)
        assert p0.index_keys == 2
        assert p0.compaction_lag == 8
        assert p1.pending is not None and p1.pending.append_id == last.append_id
        assert (p1.next_offset, p1.index_keys) == (2, 0)
        assert (p2.next_offset, p2.pending, p2.index_keys) == (0, None, 0)
    finally:
        w.close()
    # Closing the writer settles what it left pending.
    p0, p1, _ = Topics(conn).describe("orders").partitions
    assert (p0.pending, p0.index_keys, p0.next_offset) == (None, 3, 8)
    assert (p1.pending, p1.index_keys, p1.next_offset) == (None, 1, 2)


def test_fence_rejects_appends_and_unfence_allows_them(conn: Connection) -> None:
    topics = Topics(conn)
    topics.create("orders", 2)
    with Writer(conn) as w, Reader(conn) as r:
        w.append("orders", 0, [b"before"])
        st = topics.fence("orders", 0)
        assert st.control.log_state == FENCED
        assert topics.describe("orders").partitions[0].log_state == FENCED

        # This writer cached the partition's control before the fence: it must notice.
        out = w.append_shared([AppendGroup("orders", 0, [b"nope"]), AppendGroup("orders", 1, [b"ok"])])
        assert isinstance(out[0], AppendFailure) and isinstance(out[0].error, Fenced)
        assert (out[0].error.topic, out[0].error.partition) == ("orders", 0)
        assert isinstance(out[1], AppendResult) and out[1].start_offset == 0
        with pytest.raises(Fenced):
            w.append("orders", 0, [b"nope"])
        with Writer(conn) as fresh, pytest.raises(Fenced):
            fresh.append("orders", 0, [b"nope"])

        # Reads keep working while fenced, and nothing of the rejected appends exists.
        assert [x.value for x in r.scan("orders", 0)] == [b"before"]
        assert r.high_watermark("orders", 0) == (0, 1)

        assert topics.fence("orders", 0).control.log_state == FENCED  # idempotent
        assert topics.unfence("orders", 0).control.log_state == OPEN
        res = w.append("orders", 0, [b"after"])
        assert (res.start_offset, res.end_offset) == (1, 1)
        assert [x.value for x in r.scan("orders", 0)] == [b"before", b"after"]
        assert topics.unfence("orders", 0).control.log_state == OPEN


def test_fence_validates_its_arguments(conn: Connection) -> None:
    topics = Topics(conn)
    topics.create("orders", 2)
    before = etcd_keys(conn)
    with pytest.raises(UnknownPartition):
        topics.fence("orders", 2)
    with pytest.raises(InvalidPartition):
        topics.fence("orders", -1)
    with pytest.raises(UnknownTopic):
        topics.fence("missing", 0)
    with pytest.raises(InvalidTopicName):
        topics.fence("bad name", 0)
    assert etcd_keys(conn) == before


def test_fence_an_empty_partition(conn: Connection) -> None:
    topics = Topics(conn)
    topics.create("orders", 1)
    topics.fence("orders", 0)
    with Writer(conn) as w, pytest.raises(Fenced):
        w.append("orders", 0, [b"x"])
    with Reader(conn) as r:
        assert list(r.scan("orders", 0)) == []
        assert r.read("orders", 0, 0) is None
    topics.unfence("orders", 0)
    with Writer(conn) as w:
        assert w.append("orders", 0, [b"x"]).start_offset == 0
