"""Consumer groups: ``POST /commit`` (each offset on its own, fenced by member and
epoch) and ``GET /offsets`` (a group's members, committed offsets and lag)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import Response

from llog.auth.acls import Operation, ResourceType
from llog.broker.api_types import (
    CommitRequest,
    CommitResponse,
    CommitResult,
    OffsetsQuery,
    OffsetsResponse,
    PartitionLag,
)
from llog.broker.http_auth import Access
from llog.broker.request_body import read_body
from llog.broker.responses import error_response, json_response, results_response
from llog.broker.schemas import parse_commit, parse_offsets_query
from llog.broker.state import Broker, broker_of
from llog.broker.statuses import partition_error
from llog.errors import InvalidRequest, LlogError, StaleEpoch, UnknownTopic
from llog.groups.admin import describe_group
from llog.groups.epoch import current_epoch
from llog.groups.offsets import Fence, GroupOffsets
from llog.groups.owner import Owner


async def commit(request: Request) -> Response:
    """``POST /commit``: one result per offset."""
    b = broker_of(request)
    req = parse_commit(await read_body(request, b.config.broker_max_request_bytes, b.config.broker_body_timeout_s))
    access = Access(request, b)
    access.check(Operation.READ, ResourceType.GROUP, req.group)
    results, errors = await anyio.to_thread.run_sync(commit_offsets, b, req, access)
    return results_response(CommitResponse(group=req.group, results=results), errors, len(results))


async def offsets(request: Request) -> Response:
    """``GET /offsets?group=…[&topic=…]``: 404 for an unknown topic."""
    query = parse_offsets_query(request.query_params.multi_items())
    b = broker_of(request)
    access = Access(request, b)
    access.check(Operation.DESCRIBE, ResourceType.GROUP, query.group)
    if query.topic is not None:
        access.check(Operation.DESCRIBE, ResourceType.TOPIC, query.topic)
    try:
        return json_response(await anyio.to_thread.run_sync(describe, b, query, access))
    except UnknownTopic as exc:
        return error_response(404, "UnknownTopic", str(exc))


def commit_offsets(broker: Broker, req: CommitRequest, access: Access) -> tuple[list[CommitResult], list[LlogError]]:
    """Commit each offset on its own (of the topics the caller may Read, each partition
    named once); a refused one leaves that partition unchanged. Returns every
    partition's result and the errors among them."""
    offsets = GroupOffsets(broker.conn, req.group)
    fence = Fence(owner=None if req.member is None else Owner(req.member, req.member_lease))
    stale = None
    if req.epoch is not None:
        current = current_epoch(broker.conn, req.group)
        if current is None or current.epoch != req.epoch:
            stale = f"epoch {req.epoch} is not the current epoch {0 if current is None else current.epoch}"
        else:
            # The guard compares the epoch key's exact bytes: a bump after this read still fences.
            fence = replace(fence, epoch=current)
    # Which of two offsets for one partition wins would be a guess: neither is committed.
    named = Counter((c.topic, c.partition) for c in req.offsets)
    out: list[CommitResult] = []
    errors: list[LlogError] = []
    for i, c in enumerate(req.offsets):
        try:
            access.check(Operation.READ, ResourceType.TOPIC, c.topic)
            if named[c.topic, c.partition] > 1:
                raise InvalidRequest(f"offsets[{i}]", f"{c.topic}/{c.partition} appears more than once")
            if stale is not None:
                raise StaleEpoch(req.group, c.topic, c.partition, c.offset, stale)
            done = offsets.commit(
                c.topic, c.partition, c.offset, fence=fence, member=req.member or "", reset=req.reset
            )
        except LlogError as exc:
            errors.append(exc)
            out.append(partition_error(CommitResult, c.topic, c.partition, exc))
            continue
        out.append(CommitResult(topic=c.topic, partition=c.partition, ok=True, offset=done.offset,
                                epoch=done.epoch, member=done.member, updated_at_ms=done.updated_at_ms))
    return out, errors


def describe(broker: Broker, query: OffsetsQuery, access: Access) -> OffsetsResponse:
    """The ``GET /offsets`` body: the group's members and epoch, and each partition's
    committed offset, lag and owner (of ``query.topic`` only, when given; of the topics
    the caller may describe)."""
    topics = None if query.topic is None else [query.topic]
    d = describe_group(broker.conn, query.group, topics)
    rows = [p for p in d.partitions if (query.topic is None or p.topic == query.topic)
            and access.allows(Operation.DESCRIBE, ResourceType.TOPIC, p.topic, audit=False)]
    return OffsetsResponse(
        group=d.group, members=list(d.members), epoch=d.epoch, epoch_owner=d.epoch_owner,
        partitions=[PartitionLag(topic=p.topic, partition=p.partition, committed=p.committed,
                                 log_start_offset=p.log_start_offset, next_offset=p.next_offset, lag=p.lag,
                                 owner=p.owner) for p in rows],
        total_lag=sum(p.lag for p in rows),
    )
