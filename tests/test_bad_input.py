"""Acceptance: bad input raises a typed error and writes nothing, to etcd or to the
object store, even when one bad group rides with good ones in one ``append_shared``."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

import llog
from llog import AppendGroup, Record
from llog.state.keys import prefix_range_end

TOPIC = "bad"
PARTITIONS = 2
MAX_RECORD = 1024
MAX_BLOB = 16 * 1024

Snapshot = tuple[dict[str, tuple[bytes, int]], dict[str, int]]


@pytest.fixture(params=["s3", "file"])
def bconn(request: pytest.FixtureRequest) -> Iterator[llog.Connection]:
    base: llog.LlogConfig = request.getfixturevalue("config" if request.param == "s3" else "file_config")
    cfg = replace(base, max_record_bytes=MAX_RECORD, max_blob_bytes=MAX_BLOB)
    with llog.Connection(cfg) as conn:
        llog.Topics(conn).create(TOPIC, PARTITIONS)
        yield conn


def _snapshot(conn: llog.Connection) -> Snapshot:
    """Every etcd key under the test's root (value and mod_revision) and every object."""
    root = conn.keys.all_prefix()
    kvs = {kv.key: (kv.value, kv.mod_revision) for kv in conn.etcd.scan(root, prefix_range_end(root))}
    objects = {o.key: o.size for o in conn.store.list(root)}
    return kvs, objects


GOOD = AppendGroup(TOPIC, 0, [b"fine"])

#: name -> (a bad group, the error it must raise).
BAD_GROUPS: dict[str, tuple[object, type[llog.LlogError]]] = {
    "empty group": (AppendGroup(TOPIC, 0, []), llog.InvalidInput),
    "records not a sequence": (AppendGroup(TOPIC, 0, b"abc"), llog.InvalidInput),  # type: ignore[arg-type]
    "empty topic": (AppendGroup("", 0, [b"x"]), llog.InvalidTopicName),
    "slash topic": (AppendGroup("a/b", 0, [b"x"]), llog.InvalidTopicName),
    "dotdot topic": (AppendGroup("..", 0, [b"x"]), llog.InvalidTopicName),
    "long topic": (AppendGroup("t" * 250, 0, [b"x"]), llog.InvalidTopicName),
    "newline topic": (AppendGroup("a\nb", 0, [b"x"]), llog.InvalidTopicName),
    "nul topic": (AppendGroup("a\x00b", 0, [b"x"]), llog.InvalidTopicName),
    "non-str topic": (AppendGroup(7, 0, [b"x"]), llog.InvalidTopicName),  # type: ignore[arg-type]
    "negative partition": (AppendGroup(TOPIC, -1, [b"x"]), llog.InvalidPartition),
    "bool partition": (AppendGroup(TOPIC, True, [b"x"]), llog.InvalidPartition),
    "str partition": (AppendGroup(TOPIC, "0", [b"x"]), llog.InvalidPartition),  # type: ignore[arg-type]
    "partition >= count": (AppendGroup(TOPIC, PARTITIONS, [b"x"]), llog.UnknownPartition),
    "unknown topic": (AppendGroup("nope", 0, [b"x"]), llog.UnknownTopic),
    "str value": (AppendGroup(TOPIC, 0, [b"ok", "text"]), llog.InvalidRecord),  # type: ignore[list-item]
    "int value": (AppendGroup(TOPIC, 0, [5]), llog.InvalidRecord),  # type: ignore[list-item]
    "None value": (AppendGroup(TOPIC, 0, [None]), llog.InvalidRecord),  # type: ignore[list-item]
    "str Record value": (AppendGroup(TOPIC, 0, [Record("text")]), llog.InvalidRecord),  # type: ignore[arg-type]
    "int Record key": (AppendGroup(TOPIC, 0, [Record(b"v", key=3)]), llog.InvalidRecord),  # type: ignore[arg-type]
    "negative timestamp": (AppendGroup(TOPIC, 0, [Record(b"v", timestamp=-1)]), llog.InvalidRecord),
    "bad header": (AppendGroup(TOPIC, 0, [Record(b"v", headers=(("h", "s"),))]), llog.InvalidRecord),  # type: ignore[arg-type]
    "oversized value": (AppendGroup(TOPIC, 0, [b"v" * (MAX_RECORD + 1)]), llog.RecordTooLarge),
    "oversized key+value": (
        AppendGroup(TOPIC, 0, [Record(b"v" * (MAX_RECORD // 2), key=b"k" * (MAX_RECORD // 2 + 1))]),
        llog.RecordTooLarge,
    ),
    "oversized headers": (
        AppendGroup(TOPIC, 0, [Record(b"v", headers=(("h", b"x" * MAX_RECORD),))]), llog.RecordTooLarge,
    ),
    "not a group": ("orders", llog.InvalidInput),
}


@pytest.mark.parametrize("position", ["alone", "among good groups"])
def test_bad_group_writes_nothing(bconn: llog.Connection, position: str) -> None:
    with llog.Writer(bconn) as w:
        # The partitions already have data and the writer a warm cache: a bad call
        # must not slip a commit (or a materialization of the pending) through.
        w.append_shared([AppendGroup(TOPIC, 0, [b"a"]), AppendGroup(TOPIC, 1, [b"b"])])
        before = _snapshot(bconn)
        for name, (bad, error) in BAD_GROUPS.items():
            groups = [bad] if position == "alone" else [GOOD, AppendGroup(TOPIC, 1, [b"x"]), bad, GOOD]
            with pytest.raises(error) as info:
                w.append_shared(groups)  # type: ignore[arg-type]
            assert type(info.value) is error, f"{name}: {info.value!r}"
            assert _snapshot(bconn) == before, f"{name} ({position}) wrote something"
        # The single-partition entry point validates the same way.
        with pytest.raises(llog.InvalidRecord):
            w.append(TOPIC, 0, [b"ok", "text"])  # type: ignore[list-item]
        assert _snapshot(bconn) == before
        # The writer is still healthy: the next good append lands right after the first.
        assert w.append(TOPIC, 0, [b"c"]).start_offset == 1


def test_empty_and_oversized_calls_write_nothing(bconn: llog.Connection) -> None:
    before = _snapshot(bconn)
    with llog.Writer(bconn) as w:
        with pytest.raises(llog.InvalidInput, match="at least one group"):
            w.append_shared([])
        with pytest.raises(llog.InvalidInput, match="at least one group"):
            w.append_shared(iter(()))
        # Every record is under max_record_bytes; together they exceed max_blob_bytes.
        rec = b"r" * (MAX_RECORD - 8)
        n = MAX_BLOB // MAX_RECORD + 2
        with pytest.raises(llog.InvalidInput, match="max_blob_bytes") as info:
            w.append_shared([AppendGroup(TOPIC, p, [rec] * n) for p in range(PARTITIONS)])
        assert type(info.value) is llog.InvalidInput
        assert _snapshot(bconn) == before
    assert _snapshot(bconn) == before, "closing the writer wrote something"
    with llog.Reader(bconn) as r:
        assert [r.high_watermark(TOPIC, p) for p in range(PARTITIONS)] == [(0, 0)] * PARTITIONS


@pytest.mark.parametrize(
    ("topic", "partition", "error"),
    [
        ("", 0, llog.InvalidTopicName),
        ("a/b", 0, llog.InvalidTopicName),
        ("t" * 250, 0, llog.InvalidTopicName),
        ("a\tb", 0, llog.InvalidTopicName),
        (TOPIC, -1, llog.InvalidPartition),
        (TOPIC, PARTITIONS, llog.UnknownPartition),
        ("nope", 0, llog.UnknownTopic),
    ],
)
def test_bad_reads_raise_typed_errors(
    bconn: llog.Connection, topic: str, partition: int, error: type[llog.LlogError]
) -> None:
    before = _snapshot(bconn)
    with llog.Reader(bconn) as r:
        with pytest.raises(error):
            list(r.scan(topic, partition, 0))
        with pytest.raises(error):
            r.read(topic, partition, 0)
        with pytest.raises(llog.InvalidInput):
            list(r.scan(TOPIC, 0, -1))
    assert _snapshot(bconn) == before


def test_bad_topic_creation_writes_nothing(bconn: llog.Connection) -> None:
    before = _snapshot(bconn)
    topics = llog.Topics(bconn)
    for name in ["", "a/b", "..", "t" * 250, "a\x01b", "wal-shared"]:
        with pytest.raises(llog.InvalidTopicName):
            topics.create(name, 1)
    for count in [0, -1, True, "2"]:
        with pytest.raises(llog.InvalidInput):
            topics.create("fresh", count)  # type: ignore[arg-type]
    with pytest.raises(llog.TopicConflict):
        topics.create(TOPIC, PARTITIONS + 1)
    assert _snapshot(bconn) == before
