"""FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup (the coordinator's
state machine is :mod:`llog.kafka.coordinator`), and OffsetCommit / OffsetFetch on
llog's committed offsets in etcd, the same ones the SDK and the HTTP broker read.

Commits overwrite, as Kafka's do (a consumer that seeks back and commits moves the
group back); a commit by a group member is fenced by its generation's epoch in etcd.
Offset metadata strings are not kept (OffsetFetch answers an empty one).
"""

from __future__ import annotations

import asyncio
from typing import Any

from kafka.protocol.consumer import (
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    OffsetCommitResponse,
    OffsetFetchResponse,
    SyncGroupResponse,
)
from kafka.protocol.metadata import FindCoordinatorResponse

from llog.auth.acls import Operation, ResourceType
from llog.broker.directory import serving
from llog.codec.etcd_values.groups import GroupEpoch
from llog.errors import InvalidInput, LlogError
from llog.groups.offsets import Fence, GroupOffsets
from llog.kafka.context import Context
from llog.kafka.errors import ErrorCode, error_code
from llog.kafka.group_state import GroupError
from llog.kafka.registry import rendezvous
from llog.kafka.zones import client_zone
from llog.names import check_group

GROUP_KEY = 0  # FindCoordinator key types
TRANSACTION_KEY = 1


async def find_coordinator(ctx: Context, req: Any) -> FindCoordinatorResponse:
    R = FindCoordinatorResponse
    version = req.API_VERSION
    keys = list(req.coordinator_keys) if version >= 4 else [req.key]
    answers = []
    for key in keys:
        code: int = ErrorCode.NONE
        node = None
        if req.key_type == GROUP_KEY and not ctx.allows(Operation.DESCRIBE, ResourceType.GROUP, key):
            code = ErrorCode.GROUP_AUTHORIZATION_FAILED
        elif req.key_type == TRANSACTION_KEY and not ctx.allows(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
            code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        elif req.key_type not in (GROUP_KEY, TRANSACTION_KEY):
            code = ErrorCode.INVALID_REQUEST
        elif req.key_type == TRANSACTION_KEY:
            # Any broker coordinates any transactional id (the state is in etcd): the
            # same rendezvous as groups spreads them, among the client's zone's brokers.
            node = rendezvous(serving(ctx.registry.live(max_age_s=float("inf")), client_zone(ctx, req)), key)
        else:  # one coordinator per group, which every broker must agree on: not by zone
            node = ctx.registry.coordinator(key)
        answers.append((key, code, node))
    if version >= 4:
        return R[version](throttle_time_ms=0, coordinators=[
            R.Coordinator(key=key, node_id=-1 if node is None else node.node_id, host="" if node is None else node.host,
                          port=-1 if node is None else node.port_for(ctx.listener_zone), error_code=code,
                          error_message=_why(code))
            for key, code, node in answers])
    key, code, node = answers[0]
    return R[version](throttle_time_ms=0, error_code=code, error_message=_why(code),
                      node_id=-1 if node is None else node.node_id, host="" if node is None else node.host,
                      port=-1 if node is None else node.port_for(ctx.listener_zone))


def _why(code: int) -> str | None:
    if code == ErrorCode.GROUP_AUTHORIZATION_FAILED:
        return "Describe on the group is not allowed"
    if code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
        return "Describe on the transactional id is not allowed"
    return None if code == ErrorCode.NONE else "unknown coordinator key type"


def coordinated(ctx: Context, group_id: str, op: Operation = Operation.READ) -> None:
    """Refuse a group the caller may not ``op`` (members Read it), or that this broker
    does not coordinate: the client finds the right one."""
    if not ctx.allows(op, ResourceType.GROUP, group_id):
        raise GroupError(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    try:
        check_group(group_id)
    except InvalidInput:
        raise GroupError(ErrorCode.INVALID_GROUP_ID) from None
    if ctx.registry.coordinator(group_id).node_id != ctx.registry.node_id:
        raise GroupError(ErrorCode.NOT_COORDINATOR)


async def join_group(ctx: Context, req: Any) -> JoinGroupResponse:
    R = JoinGroupResponse[req.API_VERSION]
    try:
        coordinated(ctx, req.group_id)
        header = req.header
        got = await ctx.coordinator.join(
            req.group_id, req.member_id, getattr(req, "group_instance_id", None), req.protocol_type,
            [(p.name, p.metadata) for p in req.protocols], req.session_timeout_ms,
            getattr(req, "rebalance_timeout_ms", -1), getattr(header, "client_id", "") or "",
            require_known_member_id=req.API_VERSION >= 4,
        )
    except GroupError as exc:
        return R(throttle_time_ms=0, error_code=exc.code, generation_id=-1, protocol_type=None, protocol_name=None,
                 leader="", skip_assignment=False, member_id=exc.member_id or req.member_id, members=[])
    return R(throttle_time_ms=0, error_code=0, generation_id=got.generation, protocol_type=got.protocol_type,
             protocol_name=got.protocol, leader=got.leader, skip_assignment=False, member_id=got.member_id,
             members=[JoinGroupResponse.JoinGroupResponseMember(member_id=mid, group_instance_id=gi, metadata=md)
                      for mid, gi, md in got.members])


async def sync_group(ctx: Context, req: Any) -> SyncGroupResponse:
    R = SyncGroupResponse[req.API_VERSION]
    try:
        coordinated(ctx, req.group_id)
        assignment = await ctx.coordinator.sync(
            req.group_id, req.member_id, req.generation_id, {a.member_id: a.assignment for a in req.assignments})
    except GroupError as exc:
        return R(throttle_time_ms=0, error_code=exc.code, protocol_type=None, protocol_name=None, assignment=b"")
    g = ctx.coordinator.group(req.group_id)
    return R(throttle_time_ms=0, error_code=0, protocol_type=None if g is None else g.protocol_type,
             protocol_name=None if g is None else g.protocol, assignment=assignment)


async def heartbeat(ctx: Context, req: Any) -> HeartbeatResponse:
    try:
        coordinated(ctx, req.group_id)
        await ctx.coordinator.carry_on(req.group_id, req.member_id, req.generation_id)
        ctx.coordinator.heartbeat(req.group_id, req.member_id, req.generation_id)
    except GroupError as exc:
        return HeartbeatResponse[req.API_VERSION](throttle_time_ms=0, error_code=exc.code)
    return HeartbeatResponse[req.API_VERSION](throttle_time_ms=0, error_code=0)


async def leave_group(ctx: Context, req: Any) -> LeaveGroupResponse:
    R = LeaveGroupResponse
    version = req.API_VERSION
    members = [(m.member_id, m.group_instance_id) for m in req.members] if version >= 3 else [(req.member_id, None)]
    top: int = ErrorCode.NONE
    results = []
    try:
        coordinated(ctx, req.group_id)
    except GroupError as exc:
        return R[version](throttle_time_ms=0, error_code=exc.code, members=[])
    for member_id, instance in members:
        code: int = ErrorCode.NONE
        try:
            ctx.coordinator.leave(req.group_id, member_id)
        except GroupError as exc:
            code = exc.code
            top = top or code
        results.append(R.MemberResponse(member_id=member_id, group_instance_id=instance, error_code=code))
    return R[version](throttle_time_ms=0, error_code=top if version < 3 else 0, members=results)


async def offset_commit(ctx: Context, req: Any) -> OffsetCommitResponse:
    R = OffsetCommitResponse
    generation = req.generation_id_or_member_epoch
    epoch: GroupEpoch | None = None
    refused: int = ErrorCode.NONE
    try:
        coordinated(ctx, req.group_id)
        if generation >= 0 or req.member_id:  # a group member's commit
            await ctx.coordinator.carry_on(req.group_id, req.member_id, generation)
            epoch = ctx.coordinator.check_commit(req.group_id, req.member_id, generation)
        elif ctx.coordinator.has_members(req.group_id):
            # A standalone consumer's commit (no generation, no member) is for a group
            # nobody is a member of; into a live group it would overwrite its members'
            # offsets, so Kafka refuses it, and so does llog.
            refused = ErrorCode.UNKNOWN_MEMBER_ID
    except GroupError as exc:
        refused = exc.code
    wanted = [(t.name, p.partition_index, p.committed_offset) for t in req.topics for p in t.partitions]
    denied = {t.name for t in req.topics if not refused and not ctx.allows(Operation.READ, ResourceType.TOPIC, t.name)}
    codes = [refused] * len(wanted) if refused else await asyncio.to_thread(
        _commit, ctx, req.group_id, wanted, epoch, denied)
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition, _offset), code in zip(wanted, codes, strict=True):
        by_topic.setdefault(topic, []).append(
            R.OffsetCommitResponseTopic.OffsetCommitResponsePartition(partition_index=partition, error_code=code))
    return R[req.API_VERSION](throttle_time_ms=0, topics=[
        R.OffsetCommitResponseTopic(name=t, partitions=ps) for t, ps in by_topic.items()])


def _commit(ctx: Context, group: str, wanted: list[tuple[str, int, int]], epoch: GroupEpoch | None,
            denied: set[str]) -> list[int]:
    offsets = GroupOffsets(ctx.broker.conn, group)
    codes: list[int] = []
    for topic, partition, offset in wanted:
        if topic in denied:  # the caller may not Read it
            codes.append(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            continue
        try:
            offsets.commit(topic, partition, offset, fence=Fence(epoch=epoch), member="kafka", reset=True)
            codes.append(ErrorCode.NONE)
        except LlogError as exc:
            codes.append(error_code(exc))
    return codes


def offset_fetch(ctx: Context, req: Any) -> OffsetFetchResponse:
    R = OffsetFetchResponse
    rows: list[tuple[str, int, int]] = []  # topic, partition, committed offset (-1: none)
    unstable: set[tuple[str, int]] = set()
    top: int = ErrorCode.NONE
    try:
        ctx.check(Operation.DESCRIBE, ResourceType.GROUP, req.group_id)
        if getattr(req, "require_stable", False):
            # KIP-447: a read_committed consumer asks for offsets no ongoing transaction
            # will change, and retries on UNSTABLE_OFFSET_COMMIT until it has ended. Read
            # before the offsets: a transaction that commits between the two reads is
            # then seen in the offsets (read after it), never missed by both.
            unstable = ctx.broker.transactions.pending_offsets(req.group_id)
        # One range read of the group's offsets, not a read per partition asked for.
        committed = {(c.topic, c.partition): c.offset for c in GroupOffsets(ctx.broker.conn, req.group_id).all()}
        if req.topics is None:
            rows = [(topic, partition, offset) for (topic, partition), offset in committed.items()
                    if ctx.allows(Operation.DESCRIBE, ResourceType.TOPIC, topic, audit=False)]
        else:
            rows = [(t.name, p, committed.get((t.name, p), -1)) for t in req.topics for p in t.partition_indexes]
    except InvalidInput:
        top = ErrorCode.INVALID_GROUP_ID
    except LlogError as exc:
        top = error_code(exc)
    by_topic: dict[str, list[Any]] = {}
    described: dict[str, bool] = {}
    for topic, partition, offset in rows:
        if topic not in described:
            described[topic] = ctx.allows(Operation.DESCRIBE, ResourceType.TOPIC, topic)
        code = (ErrorCode.TOPIC_AUTHORIZATION_FAILED if not described[topic] else
                ErrorCode.UNSTABLE_OFFSET_COMMIT if (topic, partition) in unstable else ErrorCode.NONE)
        by_topic.setdefault(topic, []).append(R.OffsetFetchResponseTopic.OffsetFetchResponsePartition(
            partition_index=partition, committed_offset=offset if code == ErrorCode.NONE else -1,
            committed_leader_epoch=-1, metadata="", error_code=code))
    return R[req.API_VERSION](throttle_time_ms=0, error_code=top, topics=[
        R.OffsetFetchResponseTopic(name=t, partitions=ps) for t, ps in by_topic.items()])
