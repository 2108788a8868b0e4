"""Fetch: each partition's records from the broker's tail caches or the log (the
read path the HTTP API uses), as one record batch per partition; long-polls on the
partitions' tails until ``min_bytes`` arrive or ``max_wait_ms`` passes. Fetch sessions
(KIP-227) are declined (session id 0), so clients send full fetches; both isolation
levels read the same records, as llog has no transactions."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from kafka.protocol.consumer import FetchResponse

from llog.broker.fetch import NeedsIO, PartitionRead, read_partition
from llog.errors import LlogError, OffsetOutOfRange
from llog.kafka.context import Context
from llog.kafka.errors import ErrorCode, error_code
from llog.kafka.record_batches import encode_batch

_Wanted = tuple[str, int, int, int]  # topic, partition, fetch offset, partition max bytes


async def fetch(ctx: Context, req: Any) -> FetchResponse:
    broker = ctx.broker
    assert broker.tails is not None
    wanted: list[_Wanted] = [(t.topic, p.partition, p.fetch_offset, p.partition_max_bytes)
                             for t in req.topics for p in t.partitions]
    tps = [(w[0], w[1]) for w in wanted]
    deadline = time.monotonic() + max(0, req.max_wait_ms) / 1000.0
    while True:
        seen = broker.tails.versions(tps)
        try:
            got, total, failed = _read_all(ctx, wanted, req.max_bytes, io=False)
        except NeedsIO:
            got, total, failed = await asyncio.to_thread(_read_all, ctx, wanted, req.max_bytes, True)
        left = deadline - time.monotonic()
        if total >= req.min_bytes or failed or left <= 0 or broker.tails.stopping:
            break
        await broker.tails.wait(tps, seen, left)
    broker.conn.metrics.consume_records.inc(sum(len(g.records) for g in got if isinstance(g, PartitionRead)))
    broker.conn.metrics.consume_bytes.inc(total)
    return _response(req, wanted, got)


def _read_all(
    ctx: Context, wanted: list[_Wanted], max_bytes: int, io: bool
) -> tuple[list[PartitionRead | LlogError], int, bool]:
    out: list[PartitionRead | LlogError] = []
    budget, total, failed = max_bytes, 0, False
    for topic, partition, offset, limit in wanted:
        try:
            part = read_partition(ctx.broker, topic, partition, offset, min(limit, budget), io)
            if offset > part.high_watermark:
                raise OffsetOutOfRange(topic, partition, offset, part.log_start_offset)
        except NeedsIO:
            raise
        except LlogError as exc:
            out.append(exc)
            failed = True
            continue
        budget = max(0, budget - part.bytes)
        total += part.bytes
        out.append(part)
    return out, total, failed


def _response(req: Any, wanted: list[_Wanted], got: list[PartitionRead | LlogError]) -> FetchResponse:
    R = FetchResponse
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition, _offset, _limit), part in zip(wanted, got, strict=True):
        if isinstance(part, LlogError):
            data = R.FetchableTopicResponse.PartitionData(
                partition_index=partition, error_code=error_code(part), high_watermark=-1, last_stable_offset=-1,
                log_start_offset=-1, aborted_transactions=None, preferred_read_replica=-1, records=None)
        else:
            data = R.FetchableTopicResponse.PartitionData(
                partition_index=partition, error_code=ErrorCode.NONE, high_watermark=part.high_watermark,
                last_stable_offset=part.high_watermark, log_start_offset=part.log_start_offset,
                aborted_transactions=None, preferred_read_replica=-1, records=encode_batch(part.records))
        by_topic.setdefault(topic, []).append(data)
    return R[req.API_VERSION](
        throttle_time_ms=0, error_code=0, session_id=0,
        responses=[R.FetchableTopicResponse(topic=t, partitions=ps) for t, ps in by_topic.items()])
