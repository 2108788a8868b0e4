"""Checking produced Kafka record batches (pure code, no servers): bombs are refused
having inflated no more than the cap, every record is parsed and held to the limits,
and whatever the check accepts, every reader decodes, with the records kafka-python
reads from the same bytes."""

from __future__ import annotations

import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llog.codec import kafka_body, kafka_records
from llog.codec.kafka_body import (
    BatchInflatedTooLarge,
    BatchLimits,
    InvalidRecordBatch,
    KafkaBatchError,
    RecordTooLargeInBatch,
    TooManyRecords,
    check_batches,
)
from tests.kafka_crafted import GZIP, LZ4, SNAPPY, T0, ZSTD, batch, bomb, plain_batch, record, resigned, varint

kafka = pytest.importorskip("kafka")
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder  # noqa: E402

CAP = 1 << 20
LIMITS = BatchLimits(max_batch_bytes=8 << 20, max_record_bytes=256 << 10, max_inflated_bytes=CAP,
                     max_records=10_000, single_batch=True)
CODECS = [GZIP, SNAPPY, LZ4, ZSTD]


def _built(records: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes]]]], codec: int = 0) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=2**31 - 1)
    for i, (ts, key, value, headers) in enumerate(records):
        b.append(i, ts, key, value, headers)
    return bytes(b.build())


def _readers_view(raw: bytes) -> list[tuple[int, bytes | None, bytes, tuple[tuple[str, bytes], ...]]]:
    """What llog's readers get from a stored body of ``raw``."""
    body = kafka_body.encode_body(check_batches(raw, LIMITS)).tobytes()
    return [(ts, k, v, tuple(h)) for ts, k, v, h in kafka_body.decode(body).rows()]


def _kafka_python_view(raw: bytes) -> list[tuple[int, bytes | None, bytes | None, tuple[tuple[str, bytes], ...]]]:
    return [(r.timestamp, r.key, r.value,  # a null value stays null (a tombstone)
             tuple((k, b"" if v is None else v) for k, v in r.headers)) for r in DefaultRecordBatch(raw)]


@pytest.mark.parametrize("codec", [0, *CODECS])
def test_what_the_check_accepts_every_reader_decodes_as_kafka_python_does(codec: int) -> None:
    records = [(1_700_000_000_000 + i * 1000, None if i % 3 == 0 else b"k%d" % i,
                None if i % 7 == 0 else b"v" * (i % 50), [("h", b"x"), ("é", b"")] if i % 4 == 0 else [])
               for i in range(300)]
    raw = _built(records, codec)
    assert check_batches(raw, LIMITS).count == 300
    assert _readers_view(raw) == _kafka_python_view(raw)


@pytest.mark.parametrize("codec", CODECS)
def test_a_bomb_is_refused_having_inflated_no_more_than_the_cap(codec: int) -> None:
    raw = bomb(codec, 64 << 20)  # 64 MiB of zeros behind a cap of 1 MiB
    tracemalloc.start()
    try:
        with pytest.raises(BatchInflatedTooLarge, match="inflate past the cap"):
            check_batches(raw, LIMITS)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < len(raw) + 4 * CAP


def test_a_record_over_the_limit_once_decompressed_is_refused() -> None:
    big = record(0, bytes(LIMITS.max_record_bytes + 1))  # type: ignore[operator]
    from tests.kafka_crafted import compress_stream

    raw = batch(compress_stream([big], GZIP), 1, codec=GZIP)
    assert len(raw) < 2048  # small on the wire
    with pytest.raises(RecordTooLargeInBatch, match="over the limit"):
        check_batches(raw, LIMITS)
    # Key, value and header bytes count together.
    half = LIMITS.max_record_bytes // 2  # type: ignore[operator]
    with pytest.raises(RecordTooLargeInBatch):
        check_batches(batch(record(0, bytes(half), bytes(half - 1), [("h", b"xx")]), 1), LIMITS)
    check_batches(batch(record(0, bytes(half), bytes(half - 3), [("h", b"x")]), 1), LIMITS)


def test_too_many_records_are_refused_before_anything_is_inflated() -> None:
    raw = batch(b"\x00" * 64, 10_001, codec=GZIP)  # not even gzip: never looked at
    with pytest.raises(TooManyRecords):
        check_batches(raw, LIMITS)


def test_one_batch_per_partition() -> None:
    one = plain_batch([b"a"])
    check_batches(one + one, BatchLimits())
    with pytest.raises(InvalidRecordBatch, match="exactly one record batch"):
        check_batches(one + one, LIMITS)


GOOD = [record(0, b"v0", b"k0"), record(1, b"v1", None, [("h", b"1")])]


@pytest.mark.parametrize(("name", "area", "count"), [
    ("offset delta 0 twice", record(0, b"a") + record(1, b"b", offset_delta=0), 2),
    ("offset deltas out of order", record(0, b"a", offset_delta=1) + record(1, b"b", offset_delta=0), 2),
    ("attributes", b"".join(GOOD)[:1] + b"\x01" + b"".join(GOOD)[2:], 2),
    ("a null header key", varint(7) + b"\x00\x00\x00" + varint(-1) + varint(-1) + varint(1) + varint(-1), 1),
    ("fewer records than counted", b"".join(GOOD), 3),
    ("more records than counted", b"".join(GOOD), 1),
    ("bytes after the last record", b"".join(GOOD) + b"\x00", 2),
    ("a key length below -1", varint(5) + b"\x00\x00\x00" + varint(-2) + varint(0), 1),
    ("a record length past the area", varint(100) + b"\x00", 1),
    ("a negative record length", varint(-3) + b"\x00" * 6, 1),
    ("a varint too long", varint(9) + b"\x00" + b"\xff" * 11 + b"\x00", 1),
])
def test_a_batch_whose_crc_holds_over_broken_records_is_refused(name: str, area: bytes, count: int) -> None:
    with pytest.raises(InvalidRecordBatch):
        check_batches(batch(area, count), LIMITS)


def test_header_keys_must_be_utf8_and_timestamps_int64() -> None:
    bad_key = varint(9) + b"\x00\x00\x00" + varint(-1) + varint(-1) + varint(1) + varint(1) + b"\xff" + varint(0)
    with pytest.raises(InvalidRecordBatch, match="UTF-8"):
        check_batches(batch(bad_key, 1), LIMITS)
    with pytest.raises(InvalidRecordBatch, match="int64"):
        check_batches(batch(record(0, b"x", ts_delta=2**62), 1, base_ts=2**62), LIMITS)


def test_control_and_bad_producer_fields_are_refused() -> None:
    with pytest.raises(InvalidRecordBatch, match="control"):
        check_batches(batch(record(0, b"x"), 1, attributes=0x20), LIMITS)
    with pytest.raises(InvalidRecordBatch, match="producer"):
        check_batches(batch(record(0, b"x"), 1, producer=(7, -1, 0)), LIMITS)
    with pytest.raises(InvalidRecordBatch, match="last offset delta"):
        check_batches(batch(record(0, b"x"), 1, last_delta=3), LIMITS)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_any_batch_the_check_accepts_decodes(data: st.DataObject) -> None:
    """Mutate valid batches (then sign them again, so the CRC holds): the check refuses
    them with a KafkaBatchError, or accepts them and then every reader decodes them."""
    codec = data.draw(st.sampled_from([0, GZIP]))
    raw = bytearray(_built([(1_700_000_000_000 + i, b"k%d" % i if i % 2 else None, b"v" * i,
                             [("h", b"x")] if i % 3 == 0 else []) for i in range(4)], codec))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(21, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255))
    mutated = resigned(bytes(raw))
    try:
        checked = check_batches(mutated, LIMITS)
    except KafkaBatchError:
        return
    body = kafka_body.encode_body(checked).tobytes()
    assert len(list(kafka_body.decode(body).rows())) == checked.count


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_the_quick_check_accepts_only_what_the_parser_accepts(data: st.DataObject) -> None:
    """kafka_records.quick_check (one loop over the common shape) may answer "not shown"
    for anything, but its "valid" must be the parser's: mutate the records of a batch of
    the shape it handles and compare."""
    n = data.draw(st.integers(1, 150))
    area = bytearray(b"".join(record(i, b"v" * (i % 40), None if i % 3 else b"k%d" % i,
                                     ts_delta=data.draw(st.integers(-300, 300))) for i in range(n)))
    mutations = data.draw(st.integers(0, 3))
    for _ in range(mutations):
        area[data.draw(st.integers(0, len(area) - 1))] = data.draw(st.integers(0, 255))
    limit = data.draw(st.sampled_from([None, 30, 1000]))
    quick = kafka_records.quick_check(bytes(area), n, base_timestamp=T0, limit=limit)
    try:
        kafka_records.parse(bytes(area), n, base_timestamp=T0, limit=limit)
        parsed = True
    except kafka_records.RecordFormatError:
        parsed = False
    assert parsed or not quick
    if not mutations and limit != 30:
        assert quick  # the shape it is for: not left to the parser
