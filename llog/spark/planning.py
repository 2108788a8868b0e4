"""Planning a Spark read from etcd alone: which topic-partitions, which offset ranges,
and how to split them into input partitions.

Controls (``next_offset``, ``log_start_offset``, ``pending``) of every partition are
read in a few multi-key read transactions (one consistent snapshot per chunk). Big
ranges are cut at index-entry boundaries — the end offsets in the partition's index
keys — so a task reads whole slices; only an entry larger than the split size is cut
inside. Small ranges are packed together, several to an input partition: a Python task
costs tens of milliseconds however little it reads. No object is read, except for a
timestamp start (one slice per partition).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from llog.codec.etcd_values.partition import Control
from llog.connection import Connection
from llog.errors import ConfigError, OffsetOutOfRange
from llog.etcd.operations import Get
from llog.names import TopicPartition
from llog.reader import Reader
from llog.spark.options import EARLIEST, LATEST, OffsetSpec, SourceOptions, Subscription
from llog.state.control import decode_control
from llog.topic.admin import Topics
from llog.topic.time_lookup import offset_for_timestamp

#: Offsets per topic-partition, e.g. the next offset to read.
Offsets = dict[TopicPartition, int]

#: etcd refuses transactions with more than 128 operations by default.
_TXN_OPS = 128
_KEY_PAGE = 1000


@dataclass(frozen=True, order=True)
class OffsetRange:
    """Records ``[start, end)`` of one topic-partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def count(self) -> int:
        return self.end - self.start


# -- topics and controls ----------------------------------------------------------------
def subscribed_partitions(conn: Connection, subscription: Subscription) -> list[TopicPartition]:
    """Every partition of the subscribed topics, sorted. A listed topic that does not
    exist raises :class:`UnknownTopic`; a pattern may match nothing."""
    if subscription.pattern is not None:
        metas = [m for m in Topics(conn).list() if subscription.matches(m.name)]
    else:
        metas = [conn.topic(t, refresh=True) for t in subscription.topics]
    return sorted((m.name, p) for m in metas for p in range(m.partitions))


def read_controls(conn: Connection, tps: Sequence[TopicPartition]) -> dict[TopicPartition, Control]:
    """The control record of each partition (a never-written one reads as empty)."""
    out: dict[TopicPartition, Control] = {}
    for i in range(0, len(tps), _TXN_OPS):
        chunk = tps[i : i + _TXN_OPS]
        keys = [conn.keys.control(t, p) for t, p in chunk]
        r = conn.etcd.txn([], [Get(k) for k in keys])
        for tp, key, got in zip(chunk, keys, r.responses, strict=True):
            assert isinstance(got, list)
            out[tp] = decode_control(key, got[0] if got else None).control
    return out


def resolve_offsets(
    conn: Connection,
    spec: OffsetSpec,
    controls: Mapping[TopicPartition, Control],
    *,
    what: str,
    fail_on_data_loss: bool,
) -> Offsets:
    """Turn ``spec`` into an offset per partition of ``controls``: EARLIEST is the log
    start, LATEST the next offset, a timestamp the first offset at or after it (the
    next offset when every record is older). An offset outside ``[log start, next
    offset]`` raises (below the log start: :class:`OffsetOutOfRange`, unless
    ``fail_on_data_loss`` is off, which moves it up to the log start)."""
    unknown = {(t, p) for t, p, _ in (*spec.offsets, *spec.timestamps)} - set(controls)
    if unknown:
        raise ConfigError(f"{what} names partitions that do not exist: {sorted(unknown)}")
    out: Offsets = {}
    reader: Reader | None = None
    try:
        for (topic, p), ctl in controls.items():
            kind, value = spec.resolve(topic, p)
            if kind == "timestamp":
                if reader is None:
                    reader = Reader(conn, settle_pending=False)
                found = offset_for_timestamp(reader, topic, p, value)
                off = ctl.next_offset if found is None else found
            elif value == EARLIEST:
                off = ctl.log_start_offset
            elif value == LATEST:
                off = ctl.next_offset
            else:
                off = value
            if off < ctl.log_start_offset:
                if fail_on_data_loss:
                    raise OffsetOutOfRange(topic, p, off, ctl.log_start_offset)
                off = ctl.log_start_offset
            if off > ctl.next_offset:
                raise ConfigError(
                    f"{what} offset {off} of {topic}/{p} is past its next offset {ctl.next_offset}"
                )
            out[(topic, p)] = off
    finally:
        if reader is not None:
            reader.close()
    return out


def batch_offsets(conn: Connection, o: SourceOptions) -> tuple[Offsets, Offsets]:
    """``(start, end)`` per subscribed partition of a batch read: the options'
    startingOffsets and endingOffsets resolved (:func:`resolve_offsets`);
    :class:`ConfigError` where a start is past its end."""
    controls = read_controls(conn, subscribed_partitions(conn, o.subscription))
    start = resolve_offsets(conn, o.starting, controls, what="startingOffsets", fail_on_data_loss=o.fail_on_data_loss)
    end = resolve_offsets(conn, o.ending, controls, what="endingOffsets", fail_on_data_loss=True)
    for tp, s in start.items():
        if s > end[tp]:
            raise ConfigError(f"startingOffsets {s} of {tp[0]}/{tp[1]} is past its endingOffsets {end[tp]}")
    return start, end


# -- splitting -------------------------------------------------------------------------
def index_boundaries(conn: Connection, r: OffsetRange) -> list[int]:
    """Offsets in ``(r.start, r.end)`` where an index entry ends and the next begins."""
    keys = conn.keys
    start = keys.index(r.topic, r.partition, r.start)
    stop = keys.index(r.topic, r.partition, r.end - 1)
    out: list[int] = []
    while True:
        page = conn.etcd.keys(start, stop, limit=_KEY_PAGE)
        out.extend(keys.end_offset_of(k) + 1 for k in page)
        if len(page) < _KEY_PAGE:
            return out
        start = page[-1] + "\0"


def split_size(
    ranges: Iterable[OffsetRange], *, min_partitions: int | None, max_records: int | None
) -> int | None:
    """Largest number of records per input partition (``None``: no splitting)."""
    nonempty = [r for r in ranges if r.count > 0]
    size = max_records
    if min_partitions is not None and len(nonempty) < min_partitions:
        total = sum(r.count for r in nonempty)
        if total > 0:
            share = max(1, math.ceil(total / min_partitions))
            size = share if size is None else min(size, share)
    return size


def cut(r: OffsetRange, size: int, boundaries: Sequence[int]) -> list[OffsetRange]:
    """Split ``r`` into pieces of at most ``size`` records, each ending at the last
    boundary that fits (inside an entry only when no boundary does)."""
    out: list[OffsetRange] = []
    pos = r.start
    while r.end - pos > size:
        limit = pos + size
        i = bisect_right(boundaries, limit) - 1
        stop = boundaries[i] if i >= 0 and boundaries[i] > pos else limit
        out.append(OffsetRange(r.topic, r.partition, pos, stop))
        pos = stop
    out.append(OffsetRange(r.topic, r.partition, pos, r.end))
    return out


def split(
    ranges: Sequence[OffsetRange],
    boundaries: Callable[[OffsetRange], Sequence[int]],
    *,
    min_partitions: int | None,
    max_records: int | None,
) -> list[OffsetRange]:
    """The input partitions for ``ranges`` (empty ranges dropped), in order."""
    size = split_size(ranges, min_partitions=min_partitions, max_records=max_records)
    out: list[OffsetRange] = []
    for r in ranges:
        if r.count <= 0:
            continue
        if size is None or r.count <= size:
            out.append(r)
        else:
            out.extend(cut(r, size, boundaries(r)))
    return out


def pack_size(
    ranges: Sequence[OffsetRange], *, min_records: int, min_partitions: int | None, max_records: int | None
) -> int:
    """Most records an input partition of several ranges may hold: ``min_records``,
    less where ``minPartitions`` or ``maxRecordsPerPartition`` ask for smaller ones."""
    size = min_records if max_records is None else min(min_records, max_records)
    if min_partitions is not None:
        size = min(size, sum(r.count for r in ranges) // min_partitions)
    return size


def pack(ranges: Sequence[OffsetRange], size: int) -> list[tuple[OffsetRange, ...]]:
    """``ranges`` in order, consecutive ones grouped while together they hold at most
    ``size`` records; a range of more stays alone."""
    out: list[tuple[OffsetRange, ...]] = []
    group: list[OffsetRange] = []
    held = 0
    for r in ranges:
        if group and held + r.count > size:
            out.append(tuple(group))
            group, held = [], 0
        group.append(r)
        held += r.count
    if group:
        out.append(tuple(group))
    return out


def plan(
    conn: Connection,
    start: Offsets,
    end: Offsets,
    *,
    min_partitions: int | None,
    max_records: int | None,
    min_records: int,
) -> list[tuple[OffsetRange, ...]]:
    """Input partitions covering ``[start, end)`` of every partition in ``end`` (a
    partition missing from ``start`` contributes nothing): each the ranges one task
    reads, in order. The same offsets always give the same plan (a stream's replayed
    micro-batch reads what the first attempt read)."""
    ranges = [OffsetRange(t, p, start[(t, p)], e) for (t, p), e in sorted(end.items()) if (t, p) in start]
    pieces = split(
        ranges,
        lambda r: index_boundaries(conn, r),
        min_partitions=min_partitions,
        max_records=max_records,
    )
    size = pack_size(pieces, min_records=min_records, min_partitions=min_partitions, max_records=max_records)
    return pack(pieces, size)


# -- streaming offsets -------------------------------------------------------------------
def rate_limit(start: Offsets, latest: Offsets, budget: int) -> Offsets:
    """End offsets that advance at most ``budget`` records in total past ``start``,
    shared in proportion to what each partition has waiting (Kafka's
    ``maxOffsetsPerTrigger``). Deterministic: the same inputs give the same ends."""
    avail = {tp: max(0, latest[tp] - start.get(tp, latest[tp])) for tp in latest}
    total = sum(avail.values())
    if total <= budget:
        return dict(latest)
    take = {tp: budget * n // total for tp, n in avail.items()}
    left = budget - sum(take.values())
    for tp in sorted(avail):
        if left == 0:
            break
        if take[tp] < avail[tp]:
            take[tp] += 1
            left -= 1
    return {tp: (start[tp] + take[tp] if tp in start else latest[tp]) for tp in latest}


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """``{"topic": {"0": offset, ...}}``, sorted, as Spark checkpoints it."""
    out: dict[str, dict[str, int]] = {}
    for (t, p), off in sorted(offsets.items()):
        out.setdefault(t, {})[str(p)] = off
    return out


def offsets_from_json(doc: Mapping[str, Mapping[str, int]]) -> Offsets:
    """The inverse of :func:`offsets_to_json`."""
    try:
        return {(t, int(p)): int(off) for t, parts in doc.items() for p, off in parts.items()}
    except (AttributeError, TypeError, ValueError) as exc:
        raise ConfigError(f"malformed llog stream offset {doc!r}: {exc}") from None

