"""``POST /consume``: fetch from each partition, long-polling until ``min_bytes``
arrive or ``max_wait_ms`` passes; partitions without ``fetch_offset`` start at the
group's committed offset."""

from __future__ import annotations

import time

import anyio.to_thread
import msgspec
from starlette.requests import Request
from starlette.responses import Response

from llog.broker.api_types import ConsumeRequest, ConsumeResponse
from llog.broker.fetch import NeedsIO, fetch
from llog.broker.request_body import read_body
from llog.broker.responses import results_response
from llog.broker.schemas import parse_consume
from llog.broker.state import Broker, broker_of
from llog.errors import LlogError
from llog.groups.offsets import GroupOffsets


async def consume(request: Request) -> Response:
    """Fetch on the event loop while memory serves, else on a worker thread; wait for
    the tails to move while the answer is short of ``min_bytes``."""
    b = broker_of(request)
    req = parse_consume(await read_body(request, b.config.broker_max_request_bytes))
    assert b.tails is not None
    unresolved: dict[int, LlogError] = {}
    if any(fp.fetch_offset is None for fp in req.topic_partitions):
        # Once per request: the long-poll below re-fetches from the same start.
        req, unresolved = await anyio.to_thread.run_sync(resolve, b, req)
    tps = [(fp.topic, fp.partition) for fp in req.topic_partitions]
    deadline = time.monotonic() + req.max_wait_ms / 1000.0
    while True:
        # Versions first: a change landing during the fetch then ends the wait at once.
        seen = b.tails.versions(tps)
        try:
            parts, errors, total = fetch(b, req, io=False, failed=unresolved)
        except NeedsIO:
            parts, errors, total = await anyio.to_thread.run_sync(
                lambda: fetch(b, req, io=True, failed=unresolved))
        left = deadline - time.monotonic()
        if total >= req.min_bytes or errors or left <= 0 or b.tails.stopping:
            break
        with b.conn.metrics.consume_waiting.track_inprogress():
            await b.tails.wait(tps, seen, left)
    return results_response(ConsumeResponse(topic_partitions=parts), errors, len(parts))


def resolve(broker: Broker, req: ConsumeRequest) -> tuple[ConsumeRequest, dict[int, LlogError]]:
    """Start offsets for the partitions given without ``fetch_offset``: the group's
    committed offset, else ``auto_offset_reset``. Returns the request with them
    filled in, and the errors of partitions that could not be resolved (by index)."""
    assert req.group is not None
    offsets = GroupOffsets(broker.conn, req.group)
    parts = list(req.topic_partitions)
    failed: dict[int, LlogError] = {}
    for i, fp in enumerate(parts):
        if fp.fetch_offset is not None:
            continue
        try:
            broker.conn.check_partition(fp.topic, fp.partition)
            committed = offsets.get(fp.topic, fp.partition)
            if committed is not None:
                start = committed.offset
            else:
                low, high = broker.reader.high_watermark(fp.topic, fp.partition)
                start = low if req.reset_to == "earliest" else high
        except LlogError as exc:
            failed[i] = exc
            continue
        parts[i] = msgspec.structs.replace(fp, fetch_offset=start)
    return msgspec.structs.replace(req, topic_partitions=parts), failed
