"""A damaged stored body never stops a partition (spec §10 K3'): the compactor cuts
its run before a WAL body that does not decode, passes that entry (recorded under
``damaged/``, counted, shown by ``topics describe``) and keeps compacting the rest, so
the partition never reaches ``TooManyUncompactedKeys`` because of it; readers of the
damaged offsets still get ``CorruptBlob``. A damaged compacted body is never read by
compaction at all. On both store backends, against the suite's real etcd."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

import llog
from compactor import compact_once
from compactor.compact import COMPACTED, DAMAGED, IDLE
from compactor.retention import apply_retention
from llog.codec import blob
from llog.codec.etcd_values.compaction import DamagedRange
from llog.codec.etcd_values.partition import IndexEntry
from llog.records import KafkaBatches
from llog.state.keys import prefix_range_end
from tests.kafka_crafted import batch, record
from tests.test_corruption import DAMAGE, TOPIC, _write


@pytest.fixture(params=["s3", "file"])
def dconn(request: pytest.FixtureRequest) -> Iterator[llog.Connection]:
    """A connection that compacts at once, with topic TOPIC of 2 partitions; a test
    marked ``retention_bytes(n)`` gets the topic with that retention."""
    cfg: llog.LlogConfig = request.getfixturevalue("config" if request.param == "s3" else "file_config")
    marker = request.node.get_closest_marker("retention_bytes")
    with llog.Connection(replace(cfg, compact_min_age_ms=0, settle_after_ms=0)) as conn:
        llog.Topics(conn).create(TOPIC, 2, retention_bytes=marker.args[0] if marker else None)
        yield conn


def _outcomes(conn: llog.Connection, partition: int = 0) -> list[tuple[str, int, int]]:
    """Compact until idle: each run's outcome and range."""
    out = []
    while (res := compact_once(conn, TOPIC, partition)).outcome != IDLE:
        if res.outcome == DAMAGED:
            assert res.damaged is not None
            end, d = res.damaged
            out.append((res.outcome, d.start_offset, end))
        else:
            assert res.outcome == COMPACTED and res.record is not None, res
            out.append((res.outcome, res.record.start_offset, res.record.end_offset))
    return out


def _read(conn: llog.Connection, offset: int) -> bytes | Exception:
    with llog.Reader(conn) as r:
        try:
            return r.read(TOPIC, 0, offset).value
        except llog.LlogError as exc:
            return exc


def _uncompacted(conn: llog.Connection, partition: int = 0) -> int:
    """What the writers' back-pressure counts: index keys at or above the cursor."""
    keys = conn.keys
    cursor = llog.Topics(conn).describe(TOPIC).partitions[partition].compaction_cursor
    return conn.etcd.count(keys.index(TOPIC, partition, cursor), keys.index_range_end(TOPIC, partition))


def _cut_before(data: bytes, target: blob.BlobPart, header_end: int) -> bytes:
    return data[: target.body_offset]  # the object ends before the body starts


@pytest.mark.parametrize("how", [*DAMAGE, "cut before the body"])
def test_a_damaged_wal_body_is_passed_and_the_rest_compacted(dconn: llog.Connection, how: str) -> None:
    w = _write(dconn)
    data = dconn.store.get(w.data_key)
    dconn.store.put(w.data_key, (DAMAGE.get(how) or _cut_before)(data, w.target, w.header_end))

    assert _outcomes(dconn) == [(COMPACTED, 0, 1), (DAMAGED, 2, 3), (COMPACTED, 4, 5)]
    assert _uncompacted(dconn) == 0
    for offset in (0, 1, 4, 5):
        assert _read(dconn, offset) == w.values[0][offset]
    for offset in (2, 3):
        err = _read(dconn, offset)
        assert isinstance(err, llog.CorruptBlob)
        assert (err.key, err.offset, err.length) == (w.data_key, w.target.body_offset, w.target.body_length)
    [part] = [p for p in llog.Topics(dconn).describe(TOPIC).partitions if p.partition == 0]
    assert part.compaction_cursor == 6 and part.last_compaction_ms is not None
    [(end, damaged)] = part.damaged
    assert (damaged.start_offset, end, damaged.data_key, damaged.byte_offset, damaged.byte_length) == (
        2, 3, w.data_key, w.target.body_offset, w.target.body_length)
    assert damaged.reason
    assert dconn.metrics.value("llog_compactor_damaged_ranges_total") == 1
    assert dconn.metrics.value("llog_compactor_runs_total", outcome="damaged") == 1
    # The partition goes on: more appends compact behind the damage.
    with llog.Writer(dconn) as writer:
        writer.append(TOPIC, 0, [b"after"])
    assert _outcomes(dconn) == [(COMPACTED, 6, 6)]
    assert _read(dconn, 6) == b"after"


def test_a_damaged_compacted_body_does_not_stop_compaction(dconn: llog.Connection) -> None:
    w = _write(dconn)
    assert [o for o, _, _ in _outcomes(dconn)] == [COMPACTED]
    keys = dconn.keys
    [kv] = dconn.etcd.range(keys.index_prefix(TOPIC, 0), keys.index_range_end(TOPIC, 0))
    compacted_key = IndexEntry.decode(kv.value).data_key
    data = bytearray(dconn.store.get(compacted_key))
    data[len(data) // 2] ^= 0x01
    dconn.store.put(compacted_key, bytes(data))
    with llog.Writer(dconn) as writer:
        for i in range(3):
            writer.append(TOPIC, 0, [b"more-%d" % i])
    assert _outcomes(dconn) == [(COMPACTED, 6, 8)]
    assert _uncompacted(dconn) == 0
    assert isinstance(_read(dconn, 3), llog.CorruptBlob)
    assert [_read(dconn, o) for o in (6, 7, 8)] == [b"more-0", b"more-1", b"more-2"]
    assert _read(dconn, 0) != w.values[0][0]  # the damaged compacted range: CorruptBlob, never its bytes


def test_a_stored_kafka_batch_that_does_not_decode_is_passed(dconn: llog.Connection) -> None:
    """A body stored before produced batches were parsed in full: its CRCs hold, its
    records do not (offset deltas 0, 0), so every reader and the compactor refuse it."""
    bad = batch(record(0, b"a") + record(1, b"b", offset_delta=0), 2)
    with llog.Writer(dconn) as writer:
        writer.append(TOPIC, 0, [b"before"])
        [res] = writer.append_shared([llog.AppendGroup(TOPIC, 0, KafkaBatches(bad, 2, 0))])
        assert isinstance(res, llog.AppendResult)
        writer.append(TOPIC, 0, [b"after"])
    assert _outcomes(dconn) == [(COMPACTED, 0, 0), (DAMAGED, 1, 2), (COMPACTED, 3, 3)]
    assert isinstance(_read(dconn, 1), llog.CorruptBlob)
    assert _read(dconn, 3) == b"after"


@pytest.mark.retention_bytes(1)  # keep only the newest entry
def test_retention_drops_the_record_of_a_damaged_range_with_it(dconn: llog.Connection) -> None:
    w = _write(dconn)
    dconn.store.put(w.data_key, DAMAGE["body crc"](dconn.store.get(w.data_key), w.target, w.header_end))
    assert [o for o, _, _ in _outcomes(dconn)] == [COMPACTED, DAMAGED, COMPACTED]
    keys = dconn.keys
    prefix = keys.damaged_prefix(TOPIC, 0)
    [kv] = dconn.etcd.range(prefix, prefix_range_end(prefix))
    assert DamagedRange.decode(kv.value).start_offset == 2
    apply_retention(dconn, TOPIC, 0)
    assert llog.Topics(dconn).describe(TOPIC).partitions[0].log_start_offset > 3
    assert dconn.etcd.range(prefix, prefix_range_end(prefix)) == []
