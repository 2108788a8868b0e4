"""DeleteGroups and OffsetDelete (``kafka-consumer-groups.sh --delete`` and
``--delete-offsets``): a group's stored state, or some of its committed offsets,
removed by the group's coordinator, as Kafka does it — only while the group has no
live members (a member could otherwise commit what was just deleted)."""

from __future__ import annotations

import asyncio
from typing import Any

from kafka.protocol.admin import DeleteGroupsResponse
from kafka.protocol.consumer import OffsetDeleteResponse

from llog.auth.acls import Operation, ResourceType
from llog.errors import LlogError
from llog.groups.offsets import GroupOffsets
from llog.kafka.context import Context
from llog.kafka.errors import ErrorCode, error_code
from llog.kafka.group_state import GroupError
from llog.kafka.handlers.groups import coordinated


async def delete_groups(ctx: Context, req: Any) -> DeleteGroupsResponse:
    R = DeleteGroupsResponse
    results = [R.DeletableGroupResult(group_id=g, error_code=await _delete_group(ctx, g)) for g in req.groups_names]
    return R[req.API_VERSION](throttle_time_ms=0, results=results)


async def _delete_group(ctx: Context, group: str) -> int:
    try:
        coordinated(ctx, group, Operation.DELETE)
    except GroupError as exc:
        return exc.code
    if ctx.coordinator.has_members(group):
        return ErrorCode.NON_EMPTY_GROUP
    known = ctx.coordinator.forget(group)
    try:
        deleted = await asyncio.to_thread(GroupOffsets(ctx.broker.conn, group).delete)
    except LlogError as exc:
        return error_code(exc)
    return ErrorCode.NONE if deleted or known else ErrorCode.GROUP_ID_NOT_FOUND


async def offset_delete(ctx: Context, req: Any) -> OffsetDeleteResponse:
    R = OffsetDeleteResponse
    try:
        coordinated(ctx, req.group_id, Operation.DELETE)
    except GroupError as exc:
        return R[req.API_VERSION](error_code=exc.code, throttle_time_ms=0, topics=[])
    wanted = [(t.name, p.partition_index) for t in req.topics for p in t.partitions]
    denied = {t.name for t in req.topics if not ctx.allows(Operation.READ, ResourceType.TOPIC, t.name)}
    # Kafka refuses only the topics a live group is subscribed to; llog's coordinator
    # does not read subscriptions, so a group with members keeps all its offsets.
    if ctx.coordinator.has_members(req.group_id):
        codes = [int(ErrorCode.TOPIC_AUTHORIZATION_FAILED if t in denied else ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC)
                 for t, _ in wanted]
    else:
        codes = await asyncio.to_thread(_delete_offsets, ctx, req.group_id, wanted, denied)
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), code in zip(wanted, codes, strict=True):
        by_topic.setdefault(topic, []).append(
            R.OffsetDeleteResponseTopic.OffsetDeleteResponsePartition(partition_index=partition, error_code=code))
    return R[req.API_VERSION](error_code=0, throttle_time_ms=0, topics=[
        R.OffsetDeleteResponseTopic(name=topic, partitions=parts) for topic, parts in by_topic.items()])


def _delete_offsets(ctx: Context, group: str, wanted: list[tuple[str, int]], denied: set[str]) -> list[int]:
    offsets = GroupOffsets(ctx.broker.conn, group)
    codes: list[int] = []
    for topic, partition in wanted:
        if topic in denied:
            codes.append(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            continue
        try:
            if not 0 <= partition < ctx.broker.topic(topic, create=False).partitions:
                codes.append(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                continue
            offsets.delete_offset(topic, partition)
            codes.append(ErrorCode.NONE)
        except LlogError as exc:
            codes.append(error_code(exc))
    return codes
