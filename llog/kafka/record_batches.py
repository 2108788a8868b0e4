"""Kafka record batches (message format v2) to and from llog records.

Produce: each batch of a partition's ``records`` is checked (magic 2, CRC-32C),
decompressed (gzip, snappy, lz4, zstd, through kafka-python's codecs) and turned into
llog :class:`~llog.records.Record` objects with the client's timestamps, keys and
headers. Fetch: a partition's records are built into one uncompressed batch whose base
offset is the first record's offset.

A null value is stored as an empty value: llog's record format has no null value yet
(docs/kafka.md, "What differs").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kafka.errors import CorruptRecordError, UnsupportedCodecError
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from llog.errors import InvalidInput
from llog.records import ConsumedRecord, Record

_HEADER_BYTES = 61  # a v2 batch's fixed header
_MAGIC_AT = 16


class UnsupportedMessageFormat(InvalidInput):
    """A batch in the old message formats (magic 0 or 1), which llog does not accept."""


class CorruptBatch(InvalidInput):
    """A batch whose CRC, length or records do not check."""


class UnsupportedCompression(InvalidInput):
    """A codec whose library is not installed on this broker."""


@dataclass(frozen=True)
class ProducedBatches:
    """One partition's part of a produce request, decoded."""

    records: tuple[Record, ...]
    producer_id: int
    producer_epoch: int
    base_sequence: int
    transactional: bool


def decode_batches(data: bytes | memoryview) -> ProducedBatches:
    """Every record of the v2 batches in ``data``; producer fields of the first batch."""
    view = memoryview(data)
    records: list[Record] = []
    first: DefaultRecordBatch | None = None
    pos = 0
    while pos < len(view):
        if len(view) - pos < _HEADER_BYTES:
            raise CorruptBatch(f"{len(view) - pos} trailing bytes are shorter than a batch header")
        if view[pos + _MAGIC_AT] != 2:
            raise UnsupportedMessageFormat(f"message format v{view[pos + _MAGIC_AT]}: llog accepts v2 only")
        length = int.from_bytes(view[pos + 8:pos + 12], "big", signed=True) + 12
        if length < _HEADER_BYTES or pos + length > len(view):
            raise CorruptBatch(f"batch length {length} at byte {pos} runs past the {len(view)} bytes given")
        batch = DefaultRecordBatch(bytes(view[pos:pos + length]))
        if not batch.validate_crc():
            raise CorruptBatch(f"batch at byte {pos}: CRC-32C mismatch")
        if batch.is_control_batch:
            raise CorruptBatch("control batches are written by brokers, not producers")
        try:
            for r in batch:
                value = r.value
                records.append(Record(
                    b"" if value is None else bytes(value),
                    None if r.key is None else bytes(r.key),
                    r.timestamp,
                    tuple((k, b"" if v is None else bytes(v)) for k, v in r.headers),
                ))
        except UnsupportedCodecError as exc:
            raise UnsupportedCompression(str(exc)) from None
        except (CorruptRecordError, ValueError, IndexError) as exc:
            raise CorruptBatch(f"batch at byte {pos}: {exc}") from None
        first = first or batch
        pos += length
    if first is None:
        raise CorruptBatch("no record batch")
    return ProducedBatches(tuple(records), first.producer_id, first.producer_epoch, first.base_sequence,
                           first.is_transactional)


def encode_batch(records: Sequence[ConsumedRecord]) -> bytes:
    """``records`` (consecutive offsets of one partition) as one uncompressed v2 batch."""
    if not records:
        return b""
    base = records[0].offset
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=2**31 - 1)
    for r in records:
        builder.append(r.offset - base, r.timestamp, r.key, r.value, list(r.headers))
    out = bytearray(builder.build())
    out[0:8] = base.to_bytes(8, "big", signed=True)  # the CRC starts after the base offset
    return bytes(out)
