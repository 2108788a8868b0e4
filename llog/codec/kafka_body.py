"""``kafka-batch-v2``: Kafka record batches stored as a producer sent them.

A Kafka client's record batch (message format v2) is checksummed by the client with
CRC-32C from its ``attributes`` field on, which leaves out the base offset, so the
broker can store the batch untouched and patch the base offset when it serves it.
Converting every record to ``bytes-batch-v1`` in Python cost about 4 µs a record, more
than the rest of a produce; keeping the batch costs its check (:func:`check_batches`:
the CRC, and every record parsed after a capped decompression, about 0.5 µs a record).
Layout (little-endian; protocol/README.md, "kafka-batch-v2"):

    0   magic   b"LLK1"
    4   u32     CRC-32 (zlib) of every byte from offset 8 to the end of the body
    8   u32     record count n (the sum of the batches' record counts)
    12  u32     reserved, 0
    16  one or more Kafka v2 record batches, back to back, as the producer sent them
        (their base offsets are whatever the producer wrote; readers number the
        records from the index entry)

A Kafka Fetch serves the stored batches as they are, base offset set
(:class:`KafkaBody`), nulls included; records stored otherwise are built into one
batch per run (:func:`encode_batch`). Other readers (the SDK, the HTTP broker, Spark,
the compactor) decode a body into a :class:`~llog.codec.batch.Batch` with the parser
that checked it (:mod:`llog.codec.kafka_records`), nulls kept (a null value is a
tombstone).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from crc32c import crc32c

from llog.codec import batch, kafka_inflate, kafka_records
from llog.codec.batch import BatchFormatError, EncodedBody
from llog.codec.crc import crc32
from llog.records import ConsumedRecord, Headers, KafkaBatches

ENCODING = "kafka-batch-v2"
MAGIC = b"LLK1"
_HEADER = struct.Struct("<4sIII")
HEADER_SIZE = _HEADER.size  # 16

# A v2 record batch's fixed header (big-endian), from the Kafka protocol guide.
_BATCH = struct.Struct(">qiibIhiqqqhii")
BATCH_HEADER_SIZE = _BATCH.size  # 61
_CRC_FROM = 21  # the batch CRC covers attributes .. end
_COMPRESSION_MASK = 0x07
_LOG_APPEND_TIME = 0x08
_TRANSACTIONAL = 0x10
_CONTROL = 0x20
#: Stored bodies passed the broker's cap when produced; reading them needs no other.
_NO_CAP = 2**31 - 1


class KafkaBatchError(BatchFormatError):
    """Bytes that are not well-formed Kafka v2 record batches (the caller says whose)."""


class UnsupportedMessageFormat(KafkaBatchError):
    """A batch in the old message formats (magic 0 or 1)."""


class UnsupportedCompression(KafkaBatchError):
    """A codec whose library is not installed on this broker."""


class BatchTooLarge(KafkaBatchError):
    """A batch over the broker's limit (Kafka's ``max.message.bytes`` is per batch)."""


@dataclass(frozen=True)
class BatchLimits:
    """What a produce's batches for one partition may hold (the broker's settings;
    ``None``: no limit)."""

    #: A batch as sent, compressed: Kafka's ``max.message.bytes``.
    max_batch_bytes: int | None = None
    #: One record's key, value and headers, after decompression.
    max_record_bytes: int | None = None
    #: A batch's records decompressed; decompression stops there.
    max_inflated_bytes: int | None = None
    #: Records in one batch.
    max_records: int | None = None
    #: Exactly one batch, as Kafka requires of a produce request (v3 on).
    single_batch: bool = False


class TooManyRecords(BatchTooLarge):
    """A batch of more records than the broker takes in one."""


class BatchInflatedTooLarge(BatchTooLarge):
    """A compressed batch whose records inflate past the broker's cap."""


class InvalidRecordBatch(KafkaBatchError):
    """A batch whose CRC holds but whose contents break the format's rules (inner record
    framing, offset deltas, producer fields): resending it cannot help."""


def check_batches(data: bytes, limits: BatchLimits = BatchLimits()) -> KafkaBatches:
    """Check the v2 batches of one partition's produce data before they are stored: each
    batch's framing, magic, CRC-32C, attributes and producer fields, and every record
    inside it, decompressed with a cap (:mod:`llog.codec.kafka_records`), against
    ``limits``. Raises a :class:`KafkaBatchError` naming the batch's byte position."""
    view = memoryview(data)
    total = len(view)
    count, max_ts, pos, batches = 0, -1, 0, 0
    first: tuple[int, ...] | None = None
    while pos < total:
        if total - pos < BATCH_HEADER_SIZE:
            raise KafkaBatchError(f"{total - pos} trailing bytes are shorter than a batch header")
        if view[pos + 16] != 2:
            raise UnsupportedMessageFormat(f"message format v{view[pos + 16]}: llog accepts v2 only")
        (_base, length, _epoch, _magic, crc, attrs, last_delta, base_ts, batch_max_ts,
         pid, pepoch, seq, n) = _BATCH.unpack_from(view, pos)
        end = pos + 12 + length
        if end - pos < BATCH_HEADER_SIZE or end > total:
            raise KafkaBatchError(f"batch length {length + 12} at byte {pos} runs past the {total} bytes given")
        batches += 1
        if limits.single_batch and batches > 1:
            raise InvalidRecordBatch("a produce request holds exactly one record batch per partition")
        if limits.max_batch_bytes is not None and end - pos > limits.max_batch_bytes:
            raise BatchTooLarge(f"batch of {end - pos} bytes at byte {pos} exceeds the limit of "
                                f"{limits.max_batch_bytes}")
        if crc32c(view[pos + _CRC_FROM:end]) != crc:
            raise KafkaBatchError(f"batch at byte {pos}: CRC-32C mismatch")
        if attrs & _CONTROL:
            raise InvalidRecordBatch("control batches are written by brokers, not producers")
        if n < 1 or last_delta != n - 1:
            raise InvalidRecordBatch(f"batch at byte {pos}: {n} records with last offset delta {last_delta}")
        if limits.max_records is not None and n > limits.max_records:
            raise TooManyRecords(f"batch at byte {pos} holds {n} records, over the limit of {limits.max_records}")
        if pid >= 0 and (pepoch < 0 or seq < 0):
            raise InvalidRecordBatch(f"batch at byte {pos}: producer {pid} with epoch {pepoch} and sequence {seq}")
        if attrs & _TRANSACTIONAL and pid < 0:
            raise InvalidRecordBatch(f"batch at byte {pos}: transactional without a producer id")
        _check_records(view[pos + BATCH_HEADER_SIZE:end], attrs, n, base_ts, batch_max_ts, pos, limits)
        if first is None:
            first = (pid, pepoch, seq, attrs & _TRANSACTIONAL)
        count += n
        max_ts = max(max_ts, batch_max_ts)
        pos = end
    if first is None:
        raise KafkaBatchError("no record batch")
    return KafkaBatches(bytes(data), count, max_ts, first[0], first[1], first[2], bool(first[3]))


def _check_records(
    area: memoryview, attrs: int, n: int, base_ts: int, max_ts: int, at: int, limits: BatchLimits
) -> None:
    """A batch's records, decompressed within the cap, parse and keep the limits."""
    codec = attrs & _COMPRESSION_MASK
    if codec:
        cap = limits.max_inflated_bytes if limits.max_inflated_bytes is not None else _NO_CAP
        try:
            records = kafka_inflate.inflate(area, codec, cap)
        except kafka_inflate.InflatedTooLarge:
            raise BatchInflatedTooLarge(f"batch at byte {at}: records inflate past the cap of {cap} bytes") from None
        except kafka_inflate.CodecMissing as exc:
            raise UnsupportedCompression(f"batch at byte {at}: {exc}") from None
        except kafka_inflate.InflateError as exc:
            raise InvalidRecordBatch(f"batch at byte {at}: {exc}") from None
    else:
        records = bytes(area)
    if kafka_records.quick_check(records, n, base_timestamp=base_ts, limit=limits.max_record_bytes):
        return
    try:
        kafka_records.parse(records, n, base_timestamp=base_ts,
                            log_append_time=max_ts if attrs & _LOG_APPEND_TIME else None,
                            limit=limits.max_record_bytes)
    except kafka_records.OversizedRecord as exc:
        raise RecordTooLargeInBatch(f"batch at byte {at}: {exc}") from None
    except kafka_records.RecordFormatError as exc:
        raise InvalidRecordBatch(f"batch at byte {at}: {exc}") from None


class RecordTooLargeInBatch(BatchTooLarge):
    """A record whose key, value and headers pass the record limit once decompressed."""


def encode_body(batches: KafkaBatches) -> EncodedBody:
    """``batches`` as a body (its pieces, length and CRC, as the blob packer takes them)."""
    head = bytearray(_HEADER.pack(MAGIC, 0, batches.count, 0))
    crc = crc32(batches.data, crc32(head[8:]))
    struct.pack_into("<I", head, 4, crc)
    return EncodedBody((bytes(head), batches.data), HEADER_SIZE + len(batches.data), crc)


def content_digest(body: bytes | memoryview) -> int:
    """What identifies a body's batches for an idempotent retry (spec §8.7): CRC-32 of
    each batch's length and CRC-32C field. The CRC-32C covers the batch from its
    attributes on (producer id, epoch, sequence, records); a producer's retry resends
    those bytes, while the base offset and leader epoch before them may differ."""
    _, data = batches_of(body, verify=False)
    digest = 0
    for _n, raw in iter_batches(data):
        digest = crc32(raw[8:12], digest)
        digest = crc32(raw[17:21], digest)
    return digest


#: Bytes of a body's head that name its first batch's producer (:func:`first_producer`).
HEAD_SIZE = HEADER_SIZE + BATCH_HEADER_SIZE


def first_producer(head: bytes) -> tuple[int, int, int] | None:
    """``(producer id, epoch, base sequence)`` of the first batch of a body whose first
    :data:`HEAD_SIZE` bytes are ``head``; ``None`` for another encoding (spec §8.7,
    "Older batches")."""
    if len(head) < HEAD_SIZE or head[:4] != MAGIC:
        return None
    *_, pid, pepoch, seq, _n = _BATCH.unpack_from(head, HEADER_SIZE)
    return pid, pepoch, seq


def batches_of(body: bytes | memoryview, *, verify: bool = True) -> tuple[int, memoryview]:
    """``(record count, the batches' bytes)`` of a body, its header checked."""
    mv = memoryview(body)
    if len(mv) < HEADER_SIZE + BATCH_HEADER_SIZE:
        raise BatchFormatError(f"body of {len(mv)} bytes is shorter than its header and one batch")
    magic, crc, n, _ = _HEADER.unpack_from(mv, 0)
    if magic != MAGIC:
        raise BatchFormatError(f"bad magic {bytes(magic)!r}")
    if verify and crc32(mv[8:]) != crc:
        raise BatchFormatError("checksum mismatch")
    if n == 0:
        raise BatchFormatError("empty batch")
    return n, mv[HEADER_SIZE:]


def iter_batches(data: memoryview) -> Iterator[tuple[int, memoryview]]:
    """``(record count, batch bytes)`` of each batch in ``data`` (framing as stored)."""
    pos, total = 0, len(data)
    while pos < total:
        if total - pos < BATCH_HEADER_SIZE:
            raise BatchFormatError(f"{total - pos} trailing bytes are shorter than a batch header")
        length = int.from_bytes(data[pos + 8:pos + 12], "big", signed=True) + 12
        if length < BATCH_HEADER_SIZE or pos + length > total:
            raise BatchFormatError(f"batch length {length} at byte {pos} runs past the body")
        yield int.from_bytes(data[pos + 57:pos + 61], "big", signed=True), data[pos:pos + length]
        pos += length


def _parse(framing: Iterable[tuple[int, memoryview]]) -> kafka_records.KafkaRecords:
    """The records of batches already checked, as columns."""
    cols = kafka_records.KafkaRecords([], [], [], [])
    for count, raw in framing:
        attrs = int.from_bytes(raw[21:23], "big")
        codec = attrs & _COMPRESSION_MASK
        area = raw[BATCH_HEADER_SIZE:]
        base_ts, max_ts = struct.unpack_from(">qq", raw, 27)
        try:
            records = kafka_inflate.inflate(area, codec, _NO_CAP) if codec else bytes(area)
            kafka_records.parse(records, count, base_timestamp=base_ts, out=cols,
                                log_append_time=max_ts if attrs & _LOG_APPEND_TIME else None)
        except BatchFormatError as exc:
            raise BatchFormatError(f"Kafka batch does not decode: {exc}") from None
    return cols


def records_of(batches: KafkaBatches) -> kafka_records.KafkaRecords:
    """The records of ``batches`` (checked by :func:`check_batches`), as columns."""
    return _parse(iter_batches(memoryview(batches.data)))


def has_null_key(batches: KafkaBatches) -> bool:
    """Whether a record of ``batches`` (checked by :func:`check_batches`) has no key."""
    return None in records_of(batches).keys


def decode(body: bytes | memoryview, *, verify: bool = True) -> batch.Batch:
    """The body's records as a :class:`~llog.codec.batch.Batch` (decoded with
    kafka-python and laid out as ``bytes-batch-v1`` columns, so every reader works on
    either encoding); :class:`BatchFormatError` on anything that does not decode."""
    return KafkaBody(body, verify=verify).decoded()


class KafkaBody:
    """A body whose header, CRC and batch framing are checked, its records not decoded:
    a Kafka Fetch serves its batches as they are (:meth:`batches`), any other reader
    gets the decoded records (:meth:`columns`, :meth:`rows`, :meth:`to_arrow`, each a
    decode, not kept: the one caller that reads records twice, the tail cache, keeps
    its own; :class:`BatchFormatError` for a batch that does not decode)."""

    __slots__ = ("_framing", "count")

    def __init__(self, body: bytes | memoryview, *, verify: bool = True) -> None:
        self.count, data = batches_of(body, verify=verify)
        self._framing = list(iter_batches(data))
        framed = sum(n for n, _ in self._framing)
        if framed != self.count:
            raise BatchFormatError(f"header says {self.count} records, the batch headers {framed}")

    def __len__(self) -> int:
        return self.count

    @property
    def nbytes(self) -> int:
        """The stored batches' bytes."""
        return sum(len(raw) for _, raw in self._framing)

    def decoded(self) -> batch.Batch:
        """The records, decoded from the framing read at creation by the same parser
        that checked them when they were produced (:mod:`llog.codec.kafka_records`)."""
        cols = _parse(self._framing)
        if len(cols.values) != self.count:
            raise BatchFormatError(f"header says {self.count} records, the batches hold {len(cols.values)}")
        has_headers = cols.headers.count(()) != len(cols.headers)
        columns = (cols.timestamps, cols.keys, cols.values, cols.headers if has_headers else None)
        return batch.decode(batch.encode_columns(columns).tobytes(), verify=False)

    #: Kafka batches hold every offset of their entry (never key-compacted).
    deltas = None

    @property
    def extent(self) -> int:
        return self.count

    def span(self, lo: int, hi: int) -> tuple[int, int]:
        start = min(max(lo, 0), self.count)
        return start, max(start, min(hi, self.count))

    def offsets(self, first: int, start: int, stop: int) -> Iterable[int]:
        return range(first + start, first + stop)

    @property
    def timestamps(self) -> memoryview:
        return self.decoded().timestamps

    def columns(self, start: int = 0, stop: int | None = None) -> batch.Columns:
        return self.decoded().columns(start, stop)

    def rows(
        self, start: int = 0, stop: int | None = None
    ) -> Iterator[tuple[int, bytes | None, bytes | None, Headers]]:
        return self.decoded().rows(start, stop)

    def to_arrow(self) -> dict[str, Any]:
        return self.decoded().to_arrow()

    def batches(self, first_offset: int, lo: int, hi: int) -> Iterator[bytes]:
        """The stored batches holding records ``[lo, hi)``, where the body's first
        record has offset ``first_offset``, each with its base offset set (a Kafka
        client skips a batch's records below the offset it fetched from)."""
        at = first_offset
        for n, raw in self._framing:
            if at >= hi:
                return
            if at + n > lo:
                yield patched(raw, at)
            at += n


def encode_batch(records: Sequence[ConsumedRecord]) -> bytes:
    """``records`` (consecutive offsets of one partition) as one uncompressed v2 batch."""
    if not records:
        return b""
    base = records[0].offset
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=2**31 - 1)
    for r in records:
        builder.append(r.offset - base, r.timestamp, r.key, r.value, list(r.headers))
    out = bytearray(builder.build())
    out[0:8] = base.to_bytes(8, "big", signed=True)  # the CRC starts after the base offset
    return bytes(out)


class KafkaRun:
    """A Kafka Fetch's answer for one partition, built in offset order: stored batches
    as they are and runs of records as built batches; ``bytes`` and ``count`` (records
    at or past the fetch offset) so far."""

    __slots__ = ("batches", "bytes", "count")

    def __init__(self) -> None:
        self.batches: list[bytes] = []
        self.bytes = 0
        self.count = 0

    def add_body(self, first_offset: int, body: KafkaBody, lo: int, hi: int) -> None:
        """Records ``[lo, hi)`` of ``body``, whose first record has ``first_offset``."""
        for raw in body.batches(first_offset, lo, hi):
            self.batches.append(raw)
            self.bytes += len(raw)
        self.count += hi - lo

    def add_records(self, records: Sequence[ConsumedRecord]) -> None:
        if records:
            raw = encode_batch(records)
            self.batches.append(raw)
            self.bytes += len(raw)
            self.count += len(records)

    def records_set(self) -> bytes:
        """The batches back to back: a Fetch response's ``records`` field."""
        return b"".join(self.batches)


def patched(raw: memoryview, base_offset: int) -> bytes:
    """One stored batch with its base offset set to ``base_offset`` (outside its CRC)."""
    out = bytearray(raw)
    out[0:8] = base_offset.to_bytes(8, "big", signed=True)
    return bytes(out)
