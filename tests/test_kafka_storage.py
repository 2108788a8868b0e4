"""Kafka record batches stored as they came (``kafka-batch-v2``, spec §7.5), on the
suite's real etcd and S3: the stored bytes are the produced batch, a Kafka Fetch
serves them back with only the base offset changed, every other reader decodes them,
bad framing is refused before anything is written, and a partition that mixes Kafka
batches with records from the SDK reads back in order through both, before and after
compaction."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from concurrent.futures import Future

import pytest
from crc32c import crc32c

from compactor import compact_once
from llog.codec.kafka_body import check_batches
from llog.config import LlogConfig
from llog.connection import Connection
from llog.errors import CorruptBlob
from llog.producer import BatchingProducer
from llog.producer.accumulator import QueuedGroup
from llog.producer.sender import _merge
from llog.reader import Reader
from llog.records import KafkaBatches, Record
from llog.state.control import read_control
from llog.topic.admin import Topics
from tests.test_kafka import KafkaBroker, _exchange, kafka_broker

kafka = pytest.importorskip("kafka")

from kafka.protocol.consumer import FetchRequest, FetchResponse  # noqa: E402
from kafka.protocol.producer import ProduceRequest, ProduceResponse  # noqa: E402
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder  # noqa: E402

T0 = 1_714_564_800_000
RECORDS: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes]]]] = [
    (T0, b"k0", b"v0", [("trace", b"x1")]),
    (T0 + 1, None, None, []),  # a tombstone: null key, null value
    (T0 + 2, b"", b"", [("e", b"")]),
]


@pytest.fixture(name="kb")
def kb_fixture(config: LlogConfig, conn: Connection) -> Iterator[KafkaBroker]:
    Topics(conn).create("ks", 2)
    with kafka_broker(config) as b:
        yield b


def _batch(records: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes]]]], base: int = 0,
           compression: int = 0) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=compression, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1, batch_size=2**31 - 1)
    for i, (ts, key, value, headers) in enumerate(records):
        builder.append(i, ts, key, value, headers)
    raw = bytearray(builder.build())
    raw[0:8] = base.to_bytes(8, "big", signed=True)
    return bytes(raw)


def _produce(kb: KafkaBroker, partition: int, records_set: bytes) -> tuple[int, int]:
    """(error code, base offset) of one raw Produce v9 of ``records_set`` to ks."""
    req = ProduceRequest[9](transactional_id=None, acks=-1, timeout_ms=30000, topic_data=[
        ProduceRequest[9].TopicProduceData(name="ks", partition_data=[
            ProduceRequest[9].TopicProduceData.PartitionProduceData(index=partition, records=records_set)])])
    resp = _exchange(kb.bootstrap, req, ProduceResponse)
    [topic] = resp.responses
    [part] = topic.partition_responses
    return part.error_code, part.base_offset


def _fetch(kb: KafkaBroker, partition: int, offset: int, max_bytes: int = 1 << 20) -> tuple[int, bytes]:
    """(error code, records field) of one raw Fetch v11 of ks/partition from ``offset``."""
    R = FetchRequest[11]
    req = R(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0,
            session_epoch=-1, topics=[R.FetchTopic(topic="ks", partitions=[R.FetchTopic.FetchPartition(
                partition=partition, current_leader_epoch=-1, fetch_offset=offset, log_start_offset=-1,
                partition_max_bytes=max_bytes)])], forgotten_topics_data=[], rack_id="")
    resp = _exchange(kb.bootstrap, req, FetchResponse)
    [topic] = resp.responses
    [part] = topic.partitions
    return part.error_code, part.records or b""


def _kafka_rows(records_set: bytes) -> list[tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes]]]]:
    out = []
    pos = 0
    while pos < len(records_set):
        length = struct.unpack_from(">i", records_set, pos + 8)[0] + 12
        for r in DefaultRecordBatch(records_set[pos:pos + length]):
            out.append((r.offset, r.timestamp, r.key, r.value, list(r.headers)))
        pos += length
    return out


def test_a_batch_is_stored_as_produced_and_fetched_back_with_only_its_base_offset_set(
    kb: KafkaBroker, conn: Connection
) -> None:
    assert _produce(kb, 0, _batch([(T0 - 1, b"first", b"x", [])])) == (0, 0)
    produced = _batch(RECORDS, base=12345)  # a base offset the broker must not trust
    assert _produce(kb, 0, produced) == (0, 1)
    # Stored: the body is the header and then the produced bytes, untouched.
    pending = read_control(conn, "ks", 0).control.pending
    assert pending is not None and pending.msg_count == 3 and pending.max_timestamp == T0 + 2
    body = conn.store.get_range(pending.data_key, pending.byte_offset, pending.byte_length)
    assert body[:4] == b"LLK1" and body[16:] == produced
    # Fetched: the same bytes but the base offset (outside the batch's CRC-32C).
    code, got = _fetch(kb, 0, 1)
    assert code == 0
    assert got[8:] == produced[8:] and struct.unpack_from(">q", got)[0] == 1
    assert [r[2:] for r in _kafka_rows(got)] == [(k, v, h) for _, k, v, h in RECORDS]  # the null value kept
    # Fetching from the middle of a batch serves the whole batch (clients skip what is below).
    assert _fetch(kb, 0, 2)[1] == got
    # Every other reader decodes it, the null value (a tombstone) kept.
    got_sdk = list(Reader(conn).scan("ks", 0, 1, 4))
    assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in got_sdk] == [
        (1 + i, ts, k, v, h) for i, (ts, k, v, h) in enumerate(RECORDS)]
    status, resp = kb.http.request("POST", "/consume", {"topic_partitions": [
        {"topic": "ks", "partition": 0, "fetch_offset": 1}], "max_wait_ms": 0})
    assert status == 200
    assert [r["offset"] for r in resp["topic_partitions"][0]["records"]] == [1, 2, 3]


def test_a_batch_with_a_valid_crc_but_broken_record_framing_is_refused(kb: KafkaBroker, conn: Connection) -> None:
    good = bytearray(_batch(RECORDS))
    # Claim one record more than the batch holds, and sign it again: the CRC passes.
    struct.pack_into(">i", good, 57, len(RECORDS) + 1)
    struct.pack_into(">i", good, 23, len(RECORDS))
    struct.pack_into(">I", good, 17, crc32c(bytes(good[21:])))
    code, _ = _produce(kb, 1, bytes(good))
    assert code == 87  # INVALID_RECORD: signed as sent, so a resend cannot help
    flipped = bytearray(_batch(RECORDS))
    flipped[-1] ^= 0x01  # the CRC-32C does not pass
    assert _produce(kb, 1, bytes(flipped))[0] == 2
    assert _produce(kb, 1, _batch(RECORDS)[:40])[0] == 2  # cut short
    assert Reader(conn).high_watermark("ks", 1) == (0, 0)  # nothing written


def test_a_batch_over_the_record_limit_is_message_too_large(config: LlogConfig, conn: Connection) -> None:
    Topics(conn).create("ks", 2)
    with kafka_broker(config, LLOG_MAX_RECORD_BYTES="2000") as kb:
        big = _batch([(T0, None, b"x" * 3000, [])])
        assert _produce(kb, 0, big)[0] == 10  # MESSAGE_TOO_LARGE
        assert _produce(kb, 0, _batch([(T0, None, b"x" * 100, [])])) == (0, 0)
    assert Reader(conn).high_watermark("ks", 0) == (0, 1)  # only the small one


@pytest.mark.parametrize("compression", [1, 2, 3, 4], ids=["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_are_checked_after_decompression(compression: int) -> None:
    raw = _batch(RECORDS, compression=compression)
    checked = check_batches(raw)
    assert (checked.count, checked.max_timestamp) == (3, T0 + 2)


def test_kafka_batches_and_sdk_records_interleave_in_order_through_compaction(
    config: LlogConfig, kb: KafkaBroker
) -> None:
    from dataclasses import replace

    want: list[tuple[bytes | None, bytes | None]] = []
    with Connection(replace(config, compact_min_age_ms=0)) as conn, BatchingProducer(conn) as prod:
        for i in range(6):
            if i % 2:
                # The last record of each batch is a tombstone (a null value): it stays null.
                recs = [(T0 + i, f"k{i}.{j}".encode(), f"kafka-{i}.{j}".encode() if j < 2 else None, [])
                        for j in range(3)]
                assert _produce(kb, 0, _batch(recs))[0] == 0
                want += [(k, v) for _, k, v, _ in recs]
            else:
                prod.send_group("ks", 0, [Record(f"sdk-{i}.{j}".encode(), None, T0 + i) for j in range(2)]).result()
                want += [(None, f"sdk-{i}.{j}".encode()) for j in range(2)]

        def both() -> tuple[list[tuple[bytes | None, bytes | None]], list[tuple[int, bytes | None, bytes | None]]]:
            sdk = [(r.key, r.value) for r in Reader(conn).scan("ks", 0, 0, len(want))]
            code, got = _fetch(kb, 0, 0)
            assert code == 0
            return sdk, [(o, k, v) for o, _, k, v, _ in _kafka_rows(got)]

        sdk, fetched = both()
        assert sdk == want
        assert fetched == [(o, k, v) for o, (k, v) in enumerate(want)]
        assert compact_once(conn, "ks", 0).outcome == "compacted"
        sdk, fetched = both()  # compacted into one bytes-batch-v1 body
        assert sdk == want
        assert fetched == [(o, k, v) for o, (k, v) in enumerate(want)]
        # A small partition_max_bytes takes a few records of the compacted body, not all.
        # (Offset 0 was written through the SDK, so the broker reads storage for it.)
        code, got = _fetch(kb, 0, 0, max_bytes=20)
        assert code == 0 and [o for o, *_ in _kafka_rows(got)] == [0, 1]


def test_a_damaged_stored_batch_is_corrupt_blob_for_every_reader(kb: KafkaBroker, conn: Connection) -> None:
    assert _produce(kb, 1, _batch(RECORDS)) == (0, 0)
    pending = read_control(conn, "ks", 1).control.pending
    assert pending is not None
    data = bytearray(conn.store.get(pending.data_key))
    data[pending.byte_offset + pending.byte_length - 2] ^= 0x40  # inside a record value
    conn.store.put(pending.data_key, bytes(data))
    with Connection(conn.config) as fresh, pytest.raises(CorruptBlob) as err:
        list(Reader(fresh).scan("ks", 1, 0, 3))
    assert err.value.key == pending.data_key
    # The broker that wrote it serves its tail cache (and, to peers, its copy of the
    # blob); another one that reads storage gets the damaged bytes.
    with kafka_broker(conn.config, LLOG_READ_PEERS="0") as other:
        assert _fetch(other, 1, 0)[0] == 56  # KAFKA_STORAGE_ERROR


def test_the_producer_never_merges_records_and_kafka_batches_across_each_other() -> None:
    batches = KafkaBatches(_batch(RECORDS), 3, T0 + 2)

    def group(kind: str) -> QueuedGroup:
        fut: Future[object] = Future()
        if kind == "k":
            return QueuedGroup("t", 0, [], [(fut, None)], 10, kafka=batches)
        return QueuedGroup("t", 0, [Record(b"r")], [(fut, None)], 1)

    units = _merge([group(k) for k in "rrkkr"])
    assert [[("k" if g.kafka else "r") for g in u] for u in units] == [["r", "r"], ["k", "k"], ["r"]]
