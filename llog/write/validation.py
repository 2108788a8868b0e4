"""Step W0 of the commit protocol (protocol/README.md §8.1): checking the groups of an
append before anything is written. Record checks (:func:`check_records`, also run by the
batching producer at each send) and group checks (:func:`prepare_groups`: names,
partitions, producer ids), which hand the writer each group as a :class:`PreparedGroup`."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import cast

from llog.codec import batch, kafka_body
from llog.connection import Connection
from llog.errors import InvalidInput, InvalidRecord, KeyRequired, RecordTooLarge
from llog.names import NAME_PATTERN, NAME_RE, check_partition, check_topic
from llog.records import AppendGroup, Headers, KafkaBatches, Record

#: What an append takes per group: an :class:`AppendGroup` or ``(topic, partition, records)``.
GroupInput = AppendGroup | tuple[str, int, Sequence[Record | bytes]]


@dataclass(frozen=True)
class ProducerSequence:
    """An idempotent group's producer id, sequence and epoch, and (from step W1 on) the
    digest of its records' content, by which a retry is told from another batch."""

    id: str
    sequence: int
    epoch: int = 0
    digest: int | None = None


@dataclass(frozen=True)
class PreparedGroup:
    """One checked group, ready to encode."""

    topic: str
    partition: int
    records: tuple[Record, ...]
    #: The same records as columns, for the encoder, with their lengths if measured.
    columns: batch.RecordColumns
    lengths: batch.Lengths | None
    max_timestamp: int
    #: Append time, for the records that carry no timestamp of their own.
    stamp: int
    producer: ProducerSequence | None = None
    #: Kafka record batches stored as they came (``records`` is then empty).
    kafka: KafkaBatches | None = None
    #: The topic record's ``create_revision`` it was checked against: its commit's
    #: topic guard (spec §4.5).
    topic_revision: int = 0

    @property
    def count(self) -> int:
        return self.kafka.count if self.kafka is not None else len(self.records)


def prepare_groups(
    conn: Connection, groups: Iterable[GroupInput], *, now: int, records_checked: bool
) -> list[PreparedGroup]:
    """Check every group and raise the first problem found; ``now`` stamps the records
    without a timestamp. See :meth:`llog.writer.Writer.validate`."""
    prepared = [_prepare(conn, g, now, records_checked) for g in groups]
    if not prepared:
        raise InvalidInput("append_shared needs at least one group")
    return prepared


def _prepare(conn: Connection, g: GroupInput, now: int, records_checked: bool) -> PreparedGroup:
    if isinstance(g, tuple) and len(g) == 3:
        g = AppendGroup(*g)
    if not isinstance(g, AppendGroup):
        raise InvalidInput(f"expected AppendGroup, got {type(g).__name__}")
    topic = check_topic(g.topic)
    partition = check_partition(topic, g.partition)
    if isinstance(g.records, KafkaBatches):
        producer = check_producer(topic, partition, g.producer_id, g.sequence, g.producer_epoch)
        meta = conn.check_partition(topic, partition)
        if not records_checked:  # a producer's send_group parsed the keys already
            check_keyed(conn, topic, partition, g.records)
        max_ts = g.records.max_timestamp if g.records.max_timestamp >= 0 else now
        return PreparedGroup(topic, partition, (), ([], [], [], None), None, max_ts, now, producer, g.records,
                             meta.revision)
    if isinstance(g.records, (bytes, str)) or not isinstance(g.records, Sequence):
        raise InvalidInput(f"records for {topic}/{partition} must be a sequence")
    if len(g.records) == 0:
        raise InvalidInput(f"empty group for {topic}/{partition}")
    if records_checked:
        recs, lengths = cast("tuple[Record, ...]", tuple(g.records)), None
        cols = batch.columns_of(recs)
    else:
        recs, cols, lengths = check_records(topic, partition, g.records, conn.config.max_record_bytes)
    producer = check_producer(topic, partition, g.producer_id, g.sequence, g.producer_epoch)
    meta = conn.check_partition(topic, partition)
    check_keyed(conn, topic, partition, cols[1])
    stamps = cols[0]
    max_ts = now if stamps.count(None) == len(stamps) else max([now if t is None else t for t in stamps])
    return PreparedGroup(topic, partition, recs, cols, lengths, max_ts, now, producer, topic_revision=meta.revision)


def check_keyed(conn: Connection, topic: str, partition: int, keys: Sequence[bytes | None] | KafkaBatches) -> None:
    """:class:`KeyRequired` if the topic is compacted and a record has no key (after
    ``conn.check_partition``, which loaded the topic's definition)."""
    if not conn.topic(topic).compacted:
        return
    if kafka_body.has_null_key(keys) if isinstance(keys, KafkaBatches) else None in keys:
        raise KeyRequired(topic, partition)


def check_producer(
    topic: str, partition: int, producer_id: object, sequence: object, epoch: object = None
) -> ProducerSequence | None:
    """The group's producer id, sequence and epoch (``None``: 0), checked; ``None`` for
    a group without."""
    if producer_id is None and sequence is None and epoch is None:
        return None
    # The id becomes an etcd key segment, so it follows the topic naming rule.
    if not isinstance(producer_id, str) or NAME_RE.fullmatch(producer_id) is None:
        raise InvalidInput(
            f"producer_id for {topic}/{partition} must match {NAME_PATTERN}, got {producer_id!r}"
        )
    if isinstance(sequence, bool) or not isinstance(sequence, int) or not 0 <= sequence < 2**63:
        raise InvalidInput(f"sequence for {topic}/{partition} must be an int >= 0 with a producer_id, got {sequence!r}")
    if epoch is None:
        epoch = 0
    if isinstance(epoch, bool) or not isinstance(epoch, int) or not 0 <= epoch < 2**31:
        raise InvalidInput(f"producer_epoch for {topic}/{partition} must be an int in [0, 2^31), got {epoch!r}")
    return ProducerSequence(producer_id, sequence, epoch)


def normalize_record(topic: str, partition: int, r: object, limit: int) -> Record:
    """Check one record's types and size. A missing timestamp stays unset: the writer
    stamps append time for the whole body at encode time."""
    # Fast paths for the common cases (exact types, no headers); same results as below.
    if type(r) is bytes and len(r) <= limit:
        return Record(r)
    if type(r) is Record and r.headers == ():
        value, key, ts = r.value, r.key, r.timestamp
        if (
            type(value) is bytes
            and (key is None or type(key) is bytes)
            and len(value) + (len(key) if key is not None else 0) <= limit
            and (ts is None or (type(ts) is int and 0 <= ts < 2**63))
        ):
            return r
    if isinstance(r, (bytes, bytearray, memoryview)):
        r = Record(bytes(r))
    if not isinstance(r, Record):
        raise InvalidRecord(
            f"record for {topic}/{partition} must be bytes or llog.Record, got {type(r).__name__}"
        )
    value, key, ts, headers = r.value, r.key, r.timestamp, r.headers
    if isinstance(value, (bytearray, memoryview)):
        value = bytes(value)
    if value is not None and not isinstance(value, bytes):
        raise InvalidRecord(
            f"record value for {topic}/{partition} must be bytes or None (a tombstone), got {type(value).__name__}"
        )
    if key is not None:
        if isinstance(key, (bytearray, memoryview)):
            key = bytes(key)
        if not isinstance(key, bytes):
            raise InvalidRecord(f"record key for {topic}/{partition} must be bytes or None, got {type(key).__name__}")
    if ts is not None and (isinstance(ts, bool) or not isinstance(ts, int) or ts < 0 or ts >= 2**63):
        raise InvalidRecord(f"record timestamp for {topic}/{partition} must be an int >= 0 (ms), got {ts!r}")
    size = (len(value) if value is not None else 0) + (len(key) if key is not None else 0)
    norm_headers: Headers = ()
    if headers:
        try:
            items = tuple(headers)
        except TypeError:
            raise InvalidRecord(f"record headers for {topic}/{partition} must be a sequence of (str, bytes)") from None
        checked = []
        for h in items:
            if (
                not isinstance(h, tuple) or len(h) != 2 or not isinstance(h[0], str)
                or not isinstance(h[1], (bytes, bytearray))
            ):
                raise InvalidRecord(
                    f"record header for {topic}/{partition} must be a (str, bytes) pair, got {h!r}"
                )
            hk = h[0].encode()
            size += len(hk) + len(h[1])
            checked.append((h[0], bytes(h[1])))
        norm_headers = tuple(checked)
    if size > limit:
        raise RecordTooLarge(topic, partition, size, limit)
    if (value, key, ts, norm_headers) == (r.value, r.key, r.timestamp, r.headers):
        return r
    return Record(value, key, ts, norm_headers)


_NONE = type(None)


def check_records(
    topic: str, partition: int, records: Sequence[object], limit: int
) -> tuple[tuple[Record, ...], batch.RecordColumns, batch.Lengths | None]:
    """:func:`normalize_record` over one group (timestamps left unset), the records as
    columns for :func:`batch.encode_columns`, and (on the fast path) the byte lengths
    the size check measured, which the encoder reuses. When every record is an exact
    :class:`Record` of bytes without headers the checks run column by column: one
    C-level pass per field instead of a Python call per record (which cost a third of a
    2 MiB append's CPU), and the encoder reuses the same columns."""
    given = tuple(records)
    n = len(given)
    if n and set(map(type, given)) == {Record}:
        recs = cast("tuple[Record, ...]", given)
        values = [r.value for r in recs]
        keys = [r.key for r in recs]
        stamps = [r.timestamp for r in recs]
        key_types = set(map(type, keys))
        if (
            set(map(type, values)) == {bytes}
            and key_types <= {bytes, _NONE}
            and [r.headers for r in recs].count(()) == n
            and (stamps.count(None) == n or _stamps_ok(stamps))
        ):
            value_lengths = list(map(len, cast("list[bytes]", values)))
            if _NONE in key_types:
                key_lengths = [0 if k is None else len(k) for k in keys]
            else:
                key_lengths = list(map(len, cast("list[bytes]", keys)))
            if max(value_lengths) + max(key_lengths) <= limit:
                return recs, (stamps, keys, values, None), (value_lengths, key_lengths)
    checked = tuple([normalize_record(topic, partition, r, limit) for r in given])
    return checked, batch.columns_of(checked), None


def _stamps_ok(stamps: list[int | None]) -> bool:
    if not set(map(type, stamps)) <= {int, _NONE}:
        return False
    given = [t for t in stamps if t is not None]
    return min(given) >= 0 and max(given) < 2**63
