"""What one partition-append of a shared blob came to: :class:`AppendResult` (committed,
with its offsets) or :class:`AppendFailure` (nothing of it readable), and how a
committed append's result is made and counted (protocol/README.md §8.1, step W3)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from llog.codec.etcd_values.partition import Pending
from llog.codec.etcd_values.producers import ProducerState, SequencedBatch
from llog.connection import Connection
from llog.errors import LlogError
from llog.state.control import ControlState, decode_index, read_control
from llog.write.caches import WriterCaches


@dataclass(frozen=True)
class AppendResult:
    """A committed partition-append: records ``[start_offset, end_offset]``."""

    topic: str
    partition: int
    start_offset: int
    end_offset: int
    count: int
    index_key: str
    data_key: str
    append_id: str
    ok: bool = True
    #: A retried idempotent batch: these are its first commit's offsets, and nothing
    #: was written now (``data_key``/``append_id`` are the first commit's too).
    duplicate: bool = False


@dataclass(frozen=True)
class AppendFailure:
    """A partition-append that did not commit (nothing of it is readable)."""

    topic: str
    partition: int
    error: LlogError
    ok: bool = False


Outcome = AppendResult | AppendFailure

#: A committed append to acknowledge: its partition, its pending and the control state
#: its commit left.
Ack = tuple[str, int, Pending, ControlState]


def acknowledge(conn: Connection, caches: WriterCaches, acks: list[Ack]) -> list[AppendResult]:
    """Record committed appends: each partition's new state in the cache (one lock
    round for all), the metrics once, and each append's result."""
    caches.remember_all([((topic, partition), st) for topic, partition, _, st in acks])
    conn.metrics.appends.labels("ok").inc(len(acks))
    conn.metrics.append_records.inc(sum(p.msg_count for _, _, p, _ in acks))
    return [result_of(conn, topic, partition, p) for topic, partition, p, _ in acks]


def duplicate(
    conn: Connection, topic: str, partition: int, ps: ProducerState, batch: SequencedBatch
) -> AppendResult:
    """A retry of ``batch``, one of the batches producer state ``ps`` remembers, which
    committed already: its original result, nothing written."""
    conn.metrics.appends.labels("duplicate").inc()
    if batch == ps.last:
        return replace(result_of(conn, topic, partition, ps), duplicate=True)
    # An earlier batch of the window: the state keeps its offsets, not its slice, which
    # its index entry (or the control's pending) names.
    data_key, append_id = _slice_of(conn, topic, partition, batch.end_offset)
    return AppendResult(
        topic=topic, partition=partition, start_offset=batch.start_offset, end_offset=batch.end_offset,
        count=batch.msg_count, index_key=conn.keys.index(topic, partition, batch.end_offset),
        data_key=data_key, append_id=append_id, duplicate=True,
    )


def _slice_of(conn: Connection, topic: str, partition: int, end_offset: int) -> tuple[str, str]:
    """The data key and append id of the append ending at ``end_offset``: ``""`` for
    what retention removed, and for an append id that compaction replaced."""
    key = conn.keys.index(topic, partition, end_offset)
    kv = conn.etcd.get(key)
    if kv is not None:
        entry = decode_index(key, kv.value)
        return entry.data_key, entry.append_id or ""
    pending = read_control(conn, topic, partition).control.pending
    if pending is not None and pending.end_offset == end_offset:
        return pending.data_key, pending.append_id
    return "", ""


def result_of(conn: Connection, topic: str, partition: int, p: Pending | ProducerState) -> AppendResult:
    """The result of the append that ``p`` (its pending, or the producer state that
    recorded it) describes."""
    return AppendResult(
        topic=topic,
        partition=partition,
        start_offset=p.start_offset,
        end_offset=p.end_offset,
        count=p.msg_count,
        index_key=conn.keys.index(topic, partition, p.end_offset),
        data_key=p.data_key,
        append_id=p.append_id,
    )
