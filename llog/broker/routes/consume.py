"""``POST /consume``: fetch from each partition, long-polling until ``min_bytes``
arrive or ``max_wait_ms`` passes; partitions without ``fetch_offset`` start at the
group's committed offset."""

from __future__ import annotations

import anyio.to_thread
import msgspec
from starlette.requests import Request
from starlette.responses import Response

from llog.auth.acls import Operation, ResourceType
from llog.broker.api_types import ConsumeRequest, ConsumeResponse, ConsumeResult, RecordOut
from llog.broker.fetch import Wanted, long_poll
from llog.broker.http_auth import Access
from llog.broker.request_body import read_body
from llog.broker.responses import results_response
from llog.broker.schemas import encode_bytes, parse_consume
from llog.broker.state import Broker, broker_of
from llog.broker.statuses import partition_error
from llog.errors import LlogError
from llog.groups.offsets import GroupOffsets
from llog.records import ConsumedRecord


async def consume(request: Request) -> Response:
    """Long-poll the partitions (:func:`llog.broker.fetch.long_poll`) until ``min_bytes``."""
    b = broker_of(request)
    req = parse_consume(await read_body(request, b.config.broker_max_request_bytes, b.config.broker_body_timeout_s))
    # A partition the caller may not read fails as one with an unknown start would.
    unresolved: dict[int, LlogError] = {} if b.authorizer is None else _unreadable(Access(request, b), req)
    if any(fp.fetch_offset is None and i not in unresolved for i, fp in enumerate(req.topic_partitions)):
        # Once per request: the long-poll below re-reads from the same start.
        req, failed = await anyio.to_thread.run_sync(resolve, b, req)
        unresolved = {**failed, **unresolved}  # a refusal says no more than that
    wanted: list[Wanted] = []
    for i, fp in enumerate(req.topic_partitions):
        start = unresolved.get(i, fp.fetch_offset)
        assert start is not None  # resolved, or failed
        wanted.append((fp.topic, fp.partition, start, fp.partition_max_bytes))
    got = await long_poll(b, wanted, max_bytes=req.max_bytes, min_bytes=req.min_bytes, max_wait_ms=req.max_wait_ms)
    parts: list[ConsumeResult] = []
    errors: list[LlogError] = []
    for fp, part in zip(req.topic_partitions, got, strict=True):
        if isinstance(part, LlogError):
            errors.append(part)
            parts.append(partition_error(ConsumeResult, fp.topic, fp.partition, part))
            continue
        records = part.records
        assert fp.fetch_offset is not None
        parts.append(ConsumeResult(
            topic=fp.topic, partition=fp.partition, ok=True, high_watermark=part.high_watermark,
            log_start_offset=part.log_start_offset,
            next_offset=records[-1].offset + 1 if records else fp.fetch_offset,
            records=[_record_out(r) for r in records],
        ))
    return results_response(ConsumeResponse(topic_partitions=parts), errors, len(parts))


def _unreadable(access: Access, req: ConsumeRequest) -> dict[int, LlogError]:
    """The partitions (by index) the caller may not Read; all of them when a group's
    offsets are to be read and it may not Read the group."""
    if req.group is not None and any(fp.fetch_offset is None for fp in req.topic_partitions):
        access.check(Operation.READ, ResourceType.GROUP, req.group)
    return {i: access.refusal(Operation.READ, ResourceType.TOPIC, fp.topic) for i, fp in enumerate(req.topic_partitions)
            if not access.allows(Operation.READ, ResourceType.TOPIC, fp.topic)}


def _record_out(r: ConsumedRecord) -> RecordOut:
    return RecordOut(r.offset, r.timestamp, None if r.key is None else encode_bytes(r.key),
                     None if r.value is None else encode_bytes(r.value),
                     [(k, encode_bytes(v)) for k, v in r.headers])


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
