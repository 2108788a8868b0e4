"""One consume request's fetch: each partition's records from the in-memory tail
cache, the shared file cache or the log, within the request's byte budget."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, cast

from llog.broker.schemas import ConsumeRequest, FetchPartition, encode_bytes
from llog.broker.state import Broker
from llog.broker.statuses import partition_error
from llog.errors import LlogError, OffsetOutOfRange
from llog.records import ConsumedRecord, payload_size


class NeedsIO(Exception):
    """A fetch on the event loop reached a partition it cannot serve from memory."""


def fetch(
    broker: Broker, req: ConsumeRequest, *, io: bool, failed: dict[int, LlogError] | None = None
) -> tuple[list[dict[str, Any]], list[LlogError], int]:
    """Every partition's result, the errors among them, and the bytes fetched
    (``failed``: partitions the start-offset resolution could not place). Without
    ``io`` (on the event loop) raise :class:`NeedsIO` as soon as a partition needs etcd or S3."""
    budget = req.max_bytes
    out: list[dict[str, Any]] = []
    errors: list[LlogError] = []
    total = 0
    for i, fp in enumerate(req.topic_partitions):
        try:
            if fp.fetch_offset is None:
                raise (failed or {})[i]
            part, used = _fetch_one(broker, fp, fp.fetch_offset, budget, io)
        except LlogError as exc:
            errors.append(exc)
            out.append(partition_error(fp.topic, fp.partition, exc))
            continue
        budget = max(0, budget - used)
        total += used
        out.append(part)
    broker.conn.metrics.consume_records.inc(sum(len(p["records"]) for p in out if p["ok"]))
    broker.conn.metrics.consume_bytes.inc(total)
    return out, errors, total


def _fetch_one(
    broker: Broker, fp: FetchPartition, offset: int, budget: int, io: bool
) -> tuple[dict[str, Any], int]:
    tp = (fp.topic, fp.partition)
    assert broker.tails is not None
    known = broker.tails.known(tp)
    if known is None:
        if not io:
            raise NeedsIO
        broker.conn.check_partition(fp.topic, fp.partition)  # no watches on names that do not exist
        broker.tails.watch(tp)
        known = broker.reader.high_watermark(fp.topic, fp.partition)
        broker.tails.learn(tp, *known)
    log_start, hwm = known
    if offset < log_start:
        raise OffsetOutOfRange(fp.topic, fp.partition, offset, log_start)
    limit = min(fp.partition_max_bytes, budget)
    records: list[ConsumedRecord] = []
    if offset < hwm and budget > 0:
        cached = broker.cache.get(fp.topic, fp.partition, offset, limit)
        if not cached and not io:
            raise NeedsIO
        source = "hit"
        if not cached and broker.files is not None:
            cached = broker.files.get(fp.topic, fp.partition, offset, limit)
            source = "file"
        broker.conn.metrics.tail_cache_lookups.labels(source if cached else "miss").inc()
        records = cached if cached else _read(broker, fp, offset, hwm, limit)
    used = sum(map(payload_size, records))
    return {
        "topic": fp.topic, "partition": fp.partition, "ok": True,
        "high_watermark": hwm, "log_start_offset": log_start,
        "next_offset": records[-1].offset + 1 if records else offset,
        "records": [_record_json(r) for r in records],
    }, used


def _read(broker: Broker, fp: FetchPartition, offset: int, hwm: int, limit: int) -> list[ConsumedRecord]:
    out: list[ConsumedRecord] = []
    used = 0
    scan = cast(Generator[ConsumedRecord, None, None],
                broker.reader.scan(fp.topic, fp.partition, offset, hwm))
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


def _record_json(r: ConsumedRecord) -> dict[str, Any]:
    return {
        "offset": r.offset, "timestamp": r.timestamp,
        "key": None if r.key is None else encode_bytes(r.key),
        "value": encode_bytes(r.value),
        "headers": [[k, encode_bytes(v)] for k, v in r.headers],
    }
