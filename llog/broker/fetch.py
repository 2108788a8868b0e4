"""A fetch of several partitions, the HTTP consume's and the Kafka Fetch's: each
partition's records from the in-memory tail cache, the shared file cache or the log,
within a byte budget, long-polling on the partitions' tails until enough arrived. A
Kafka Fetch takes them as v2 record batches (``kafka=True``): batches produced through
Kafka as they were stored, never decoded, the other records built into batches."""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import islice
from typing import TypeVar, cast

import anyio.to_thread

from llog.broker.state import Broker
from llog.codec.kafka_body import KafkaBody, KafkaRun
from llog.errors import LlogError, OffsetOutOfRange
from llog.records import ConsumedRecord, payload_size
from llog.scan.iteration import records_of

_T = TypeVar("_T")


class NeedsIO(Exception):
    """A fetch on the event loop reached a partition it cannot serve from memory."""


@dataclass(frozen=True)
class PartitionRead:
    """What one fetch of a partition found."""

    log_start_offset: int
    high_watermark: int
    records: list[ConsumedRecord]
    bytes: int  # payload bytes of ``records`` (or the batches' bytes, for Kafka)
    #: A Kafka fetch's answer, instead of ``records``.
    kafka: KafkaRun | None = None

    @property
    def count(self) -> int:
        return self.kafka.count if self.kafka is not None else len(self.records)


#: A partition to fetch: topic, partition, the offset to start at (or the error that
#: left it without one), and the most payload bytes to return for it.
Wanted = tuple[str, int, "int | LlogError", int]


async def long_poll(
    broker: Broker, wanted: Sequence[Wanted], *, max_bytes: int, min_bytes: int, max_wait_ms: int,
    past_end_is_error: bool = False, kafka: bool = False,
) -> list[PartitionRead | LlogError]:
    """Each partition's records (or error), in ``wanted``'s order, once ``min_bytes``
    arrived, a partition failed, ``max_wait_ms`` passed or the broker is stopping. Reads
    on the event loop while memory serves, else on a worker thread, and waits on the
    partitions' tails in between. ``past_end_is_error``: a start offset past the high
    watermark is :class:`OffsetOutOfRange` (Kafka's rule) instead of a wait for records.
    ``kafka``: each partition's read is v2 record batches (:attr:`PartitionRead.kafka`)."""
    assert broker.tails is not None
    tps = [(topic, partition) for topic, partition, _start, _limit in wanted]
    read = partial(read_partitions, broker, wanted, max_bytes, past_end_is_error=past_end_is_error, kafka=kafka)
    deadline = time.monotonic() + max_wait_ms / 1000.0
    while True:
        # Versions first: a change landing during the read then ends the wait at once.
        seen = broker.tails.versions(tps)
        try:
            got, total = read(io=False)
        except NeedsIO:
            got, total = await anyio.to_thread.run_sync(partial(read, io=True))
        left = deadline - time.monotonic()
        failed = any(isinstance(g, LlogError) for g in got)
        if total >= min_bytes or failed or left <= 0 or broker.tails.stopping:
            break
        with broker.conn.metrics.consume_waiting.track_inprogress():
            await broker.tails.wait(tps, seen, left)
    broker.conn.metrics.consume_records.inc(sum(g.count for g in got if isinstance(g, PartitionRead)))
    broker.conn.metrics.consume_bytes.inc(total)
    return got


def read_partitions(
    broker: Broker, wanted: Sequence[Wanted], max_bytes: int, *, io: bool, past_end_is_error: bool = False,
    kafka: bool = False,
) -> tuple[list[PartitionRead | LlogError], int]:
    """One pass over ``wanted`` within ``max_bytes`` in all: each partition's read or
    error, and the bytes read. Without ``io`` (on the event loop) raise
    :class:`NeedsIO` as soon as a partition needs etcd or S3."""
    out: list[PartitionRead | LlogError] = []
    budget = max_bytes
    total = 0
    for topic, partition, start, limit in wanted:
        if isinstance(start, LlogError):
            out.append(start)
            continue
        try:
            part = read_partition(broker, topic, partition, start, min(limit, budget), io, kafka=kafka,
                                  confirm_past_end=past_end_is_error)
            if past_end_is_error and start > part.high_watermark:
                raise OffsetOutOfRange(topic, partition, start, part.log_start_offset)
        except LlogError as exc:
            out.append(exc)
            continue
        budget = max(0, budget - part.bytes)
        total += part.bytes
        out.append(part)
    return out, total


def read_partition(
    broker: Broker, topic: str, partition: int, offset: int, limit: int, io: bool, *, kafka: bool = False,
    confirm_past_end: bool = False,
) -> PartitionRead:
    """Records of ``topic/partition`` from ``offset``, about ``limit`` payload bytes
    (at least one record when any is there and ``limit`` > 0), from the tail caches or
    the log. Without ``io`` (on the event loop) raise :class:`NeedsIO` as soon as it
    needs etcd or S3. ``kafka``: as v2 record batches. ``confirm_past_end``: an
    ``offset`` past the end this broker knows is checked against etcd (the caller
    makes it an error)."""
    tp = (topic, partition)
    assert broker.tails is not None
    known = broker.tails.known(tp)
    if known is None:
        if not io:
            raise NeedsIO
        broker.conn.check_partition(topic, partition)  # no watches on names that do not exist
        broker.tails.watch(tp)
        known = broker.tails.read(tp)
    if confirm_past_end and offset > known.next_offset:
        # The end this broker knows trails etcd while a watch event is on its way or
        # another broker's append is being read (remote_commits.py): a client that
        # read up to the true end elsewhere must not be told it is out of range.
        if not io:
            raise NeedsIO
        known = broker.tails.read(tp)
    log_start, hwm = known.log_start_offset, known.next_offset
    if offset < log_start:
        raise OffsetOutOfRange(topic, partition, offset, log_start)
    # Below the compaction cursor key compaction may have removed records the caches
    # still hold (protocol/README.md §9, "Cached appends"): only storage answers there.
    cached = offset >= known.compaction_cursor
    args = (topic, partition, offset, limit)
    if kafka:
        run = KafkaRun()
        if offset < hwm and limit > 0:
            run = _first_source(broker, io, partial(broker.cache.get_batches, *args) if cached else None,
                                partial(_file_batches, broker, *args) if cached and broker.files is not None else None,
                                partial(_read_batches, broker, topic, partition, offset, hwm, limit))
        return PartitionRead(log_start, hwm, [], run.bytes, run)
    records: list[ConsumedRecord] = []
    if offset < hwm and limit > 0:
        records = _first_source(broker, io, partial(broker.cache.get, *args) if cached else None,
                                partial(broker.files.get, *args) if cached and broker.files is not None else None,
                                partial(_read, broker, topic, partition, offset, hwm, limit))
    return PartitionRead(log_start, hwm, records, sum(map(payload_size, records)))


def _first_source(broker: Broker, io: bool, memory: Callable[[], _T | None] | None,
                  files: Callable[[], _T | None] | None, storage: Callable[[], _T]) -> _T:
    """What the first source that has it serves: the in-memory tail cache, the shared
    file cache (each when given), then storage (counted in the tail-cache metric);
    :class:`NeedsIO` on the event loop once memory has nothing."""
    got = memory() if memory is not None else None
    if not got and not io:
        raise NeedsIO
    source = "hit"
    if not got and files is not None:
        got, source = files(), "file"
    broker.conn.metrics.tail_cache_lookups.labels(source if got else "miss").inc()
    return got if got else storage()


def _file_batches(broker: Broker, topic: str, partition: int, offset: int, limit: int) -> KafkaRun | None:
    assert broker.files is not None
    records = broker.files.get(topic, partition, offset, limit)
    if not records:
        return None
    run = KafkaRun()
    run.add_records(records)
    return run


def _read_batches(broker: Broker, topic: str, partition: int, offset: int, hwm: int, limit: int) -> KafkaRun:
    """:func:`_read`'s Kafka form: stored Kafka batches as they are, other records
    built into batches, up to ``limit`` bytes (at least one record)."""
    run = KafkaRun()
    pending: list[ConsumedRecord] = []  # records of bytes-batch-v1 bodies, built into one batch
    pending_bytes = 0
    scan = broker.reader.scan_bodies(topic, partition, offset, hwm)
    try:
        for first, body, lo, hi in scan:
            if isinstance(body, KafkaBody):
                run.add_records(pending)
                pending, pending_bytes = [], 0
                run.add_body(first, body, lo, hi)
            else:
                start, stop = body.span(lo - first, hi - first)
                cols = body.columns(start, stop)
                keys, values = cols[1], cols[2]
                # Up to the budget (at least one record in all): a compacted body can
                # hold far more than one fetch returns.
                left, take = limit - run.bytes - pending_bytes, 0
                for i, v in enumerate(values):
                    size = len(v or b"") + (len(keys[i] or b"") if keys is not None else 0)
                    if left < size and (take or run.count or pending):
                        break
                    left -= size
                    take += 1
                pending.extend(islice(records_of(topic, partition, body.offsets(first, start, stop), cols), take))
                pending_bytes = limit - run.bytes - left
                if take < len(values):
                    break
            if run.bytes + pending_bytes >= limit:
                break
    finally:
        scan.close()
    run.add_records(pending)
    return run


def _read(broker: Broker, topic: str, partition: int, offset: int, hwm: int, limit: int) -> list[ConsumedRecord]:
    out: list[ConsumedRecord] = []
    used = 0
    scan = cast(Generator[ConsumedRecord, None, None], broker.reader.scan(topic, partition, offset, hwm))
    try:
        for r in scan:
            size = payload_size(r)
            if out and used + size > limit:
                break
            out.append(r)
            used += size
    finally:
        scan.close()
    return out
