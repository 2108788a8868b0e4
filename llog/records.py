"""Record types: what a producer hands in and what a reader hands back."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llog.codec.kafka_body import KafkaBatches

Headers = tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class Record:
    """A record to append. ``timestamp`` is milliseconds since the epoch; ``None``
    means "append time" (the writer stamps it when it builds the blob)."""

    value: bytes
    key: bytes | None = None
    timestamp: int | None = None
    headers: Headers = field(default=())


@dataclass(frozen=True, slots=True)
class ConsumedRecord:
    """A committed record, as a reader returns it."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes
    headers: Headers = ()


@dataclass(frozen=True, slots=True)
class AppendGroup:
    """Records for one topic-partition inside one ``append_shared`` call.

    With ``producer_id`` and ``sequence`` the append is idempotent: a retry of the same
    (producer_id, sequence) on the partition returns the original offsets instead of
    appending again. Sequences of one producer on one partition go up by one per batch.
    ``records`` may be Kafka record batches, stored as they are (``kafka-batch-v2``).
    """

    topic: str
    partition: int
    records: Sequence[Record | bytes] | KafkaBatches
    producer_id: str | None = None
    sequence: int | None = None


def payload_size(r: Record | ConsumedRecord) -> int:
    """A record's value and key bytes: what produce buffers and fetch budgets count."""
    return len(r.value) + (len(r.key) if r.key is not None else 0)


def buffered_size(r: Record) -> int:
    """A record's value, key and header bytes: what a producer's buffer holds for it."""
    size = payload_size(r)
    if r.headers:  # most records have none: skip building a generator per record
        size += sum(len(k) + len(v) for k, v in r.headers)
    return size
