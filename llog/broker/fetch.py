"""One consume request's fetch: each partition's records from the in-memory tail
cache, the shared file cache or the log, within the request's byte budget."""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import cast

from llog.broker.api_types import ConsumeRequest, ConsumeResult, FetchPartition, RecordOut
from llog.broker.schemas import encode_bytes
from llog.broker.state import Broker
from llog.broker.statuses import partition_error
from llog.errors import LlogError, OffsetOutOfRange
from llog.records import ConsumedRecord, payload_size


class NeedsIO(Exception):
    """A fetch on the event loop reached a partition it cannot serve from memory."""


def fetch(
    broker: Broker, req: ConsumeRequest, *, io: bool, failed: dict[int, LlogError] | None = None
) -> tuple[list[ConsumeResult], list[LlogError], int]:
    """Every partition's result, the errors among them, and the bytes fetched
    (``failed``: partitions the start-offset resolution could not place). Without
    ``io`` (on the event loop) raise :class:`NeedsIO` as soon as a partition needs etcd or S3."""
    budget = req.max_bytes
    out: list[ConsumeResult] = []
    errors: list[LlogError] = []
    total = 0
    for i, fp in enumerate(req.topic_partitions):
        try:
            if fp.fetch_offset is None:
                raise (failed or {})[i]
            part, used = _fetch_one(broker, fp, fp.fetch_offset, budget, io)
        except LlogError as exc:
            errors.append(exc)
            out.append(partition_error(ConsumeResult, fp.topic, fp.partition, exc))
            continue
        budget = max(0, budget - used)
        total += used
        out.append(part)
    broker.conn.metrics.consume_records.inc(sum(len(p.records) for p in out if isinstance(p.records, list)))
    broker.conn.metrics.consume_bytes.inc(total)
    return out, errors, total


def _fetch_one(
    broker: Broker, fp: FetchPartition, offset: int, budget: int, io: bool
) -> tuple[ConsumeResult, int]:
    part = read_partition(broker, fp.topic, fp.partition, offset, min(fp.partition_max_bytes, budget), io)
    records = part.records
    return ConsumeResult(
        topic=fp.topic, partition=fp.partition, ok=True, high_watermark=part.high_watermark,
        log_start_offset=part.log_start_offset, next_offset=records[-1].offset + 1 if records else offset,
        records=[_record_out(r) for r in records],
    ), part.bytes


@dataclass(frozen=True)
class PartitionRead:
    """What one fetch of a partition found (the HTTP and the Kafka fetch share it)."""

    log_start_offset: int
    high_watermark: int
    records: list[ConsumedRecord]
    bytes: int  # payload bytes of ``records``


def read_partition(broker: Broker, topic: str, partition: int, offset: int, limit: int, io: bool) -> PartitionRead:
    """Records of ``topic/partition`` from ``offset``, about ``limit`` payload bytes
    (at least one record when any is there and ``limit`` > 0), from the tail caches or
    the log. Without ``io`` (on the event loop) raise :class:`NeedsIO` as soon as it
    needs etcd or S3."""
    tp = (topic, partition)
    assert broker.tails is not None
    known = broker.tails.known(tp)
    if known is None:
        if not io:
            raise NeedsIO
        broker.conn.check_partition(topic, partition)  # no watches on names that do not exist
        broker.tails.watch(tp)
        known = broker.reader.high_watermark(topic, partition)
        broker.tails.learn(tp, *known)
    log_start, hwm = known
    if offset < log_start:
        raise OffsetOutOfRange(topic, partition, offset, log_start)
    records: list[ConsumedRecord] = []
    if offset < hwm and limit > 0:
        cached = broker.cache.get(topic, partition, offset, limit)
        if not cached and not io:
            raise NeedsIO
        source = "hit"
        if not cached and broker.files is not None:
            cached = broker.files.get(topic, partition, offset, limit)
            source = "file"
        broker.conn.metrics.tail_cache_lookups.labels(source if cached else "miss").inc()
        records = cached if cached else _read(broker, topic, partition, offset, hwm, limit)
    return PartitionRead(log_start, hwm, records, sum(map(payload_size, records)))


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


def _record_out(r: ConsumedRecord) -> RecordOut:
    return RecordOut(r.offset, r.timestamp, None if r.key is None else encode_bytes(r.key), encode_bytes(r.value),
                     [(k, encode_bytes(v)) for k, v in r.headers])
