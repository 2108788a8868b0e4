"""What admin tools ask about (confluent-kafka's ``AdminClient``, kafka-python's
``KafkaAdminClient``, ``kafka-consumer-groups``): DescribeConfigs (a topic's retention
and the fixed policies behind it, and a broker's settings that have a Kafka name, all
read-only but a topic's retention, which AlterConfigs changes), DescribeCluster (the live brokers),
ListGroups and DescribeGroups (the groups this broker coordinates, as Kafka lists
them per coordinator: live ones, and those with only stored state). Client quotas:
``handlers/quotas.py``."""

from __future__ import annotations

import asyncio
from typing import Any

from kafka.protocol.admin import (
    DescribeClusterResponse,
    DescribeConfigsResponse,
    DescribeGroupsResponse,
    ListGroupsResponse,
)

from llog.auth.acls import Operation, ResourceType
from llog.codec.etcd_values.topic import DELETE_RETENTION_MS, TopicMeta
from llog.errors import InvalidInput, LlogError
from llog.group_names import list_groups as stored_groups
from llog.kafka.context import Context
from llog.kafka.errors import ErrorCode, error_code

TOPIC_RESOURCE = 2  # DescribeConfigs resource types
BROKER_RESOURCE = 4
TOPIC_CONFIG = 1  # ConfigSource: set on the topic
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5
STRING, INT, LONG, LIST = 2, 3, 5, 7  # ConfigType (v3+)
#: The retention limits llog keeps per topic, by Kafka name, and the field of llog's
#: topic definition (a positive int, or -1 for none).
RETENTION = {"retention.ms": "retention_ms", "retention.bytes": "retention_bytes"}
#: Key compaction durations (ms >= 0), by Kafka name, and their fields.
DURATIONS = {"min.compaction.lag.ms": "min_compaction_lag_ms", "delete.retention.ms": "delete_retention_ms"}
CLEANUP_POLICY = "cleanup.policy"
#: The topic configs AlterConfigs changes; the rest are read-only.
ALTERABLE = (*RETENTION, CLEANUP_POLICY, *DURATIONS)


def describe_configs(ctx: Context, req: Any) -> DescribeConfigsResponse:
    R = DescribeConfigsResponse
    results = []
    for res in req.resources:
        code: int = ErrorCode.NONE
        message = None
        configs: list[tuple[str, str | None, int, int]] = []
        try:
            if res.resource_type == TOPIC_RESOURCE:
                ctx.check(Operation.DESCRIBE_CONFIGS, ResourceType.TOPIC, res.resource_name)
                configs = _topic_configs(ctx, res.resource_name)
            elif res.resource_type == BROKER_RESOURCE:
                ctx.check(Operation.DESCRIBE_CONFIGS, ResourceType.CLUSTER)
                configs = _broker_configs(ctx)
            else:
                code, message = ErrorCode.INVALID_REQUEST, f"resource type {res.resource_type} has no configs in llog"
        except LlogError as exc:
            code, message = error_code(exc), str(exc)
        wanted = None if res.configuration_keys is None else set(res.configuration_keys)
        results.append(R.DescribeConfigsResult(
            error_code=code, error_message=message, resource_type=res.resource_type, resource_name=res.resource_name,
            configs=[R.DescribeConfigsResult.DescribeConfigsResourceResult(
                name=name, value=value, read_only=res.resource_type != TOPIC_RESOURCE or name not in ALTERABLE,
                config_source=source, is_default=source == DEFAULT_CONFIG,
                is_sensitive=False, synonyms=[], config_type=kind, documentation=None)
                for name, value, source, kind in configs if wanted is None or name in wanted]))
    return R[req.API_VERSION](throttle_time_ms=0, results=results)


def parse_duration(name: str, value: str) -> int:
    """A key compaction duration given as a config value: ms >= 0, else :class:`InvalidInput`."""
    try:
        v = int(value)
    except ValueError:
        raise InvalidInput(f"{name}={value!r} is not an integer") from None
    if v < 0:
        raise InvalidInput(f"{name}={value}: give milliseconds >= 0")
    return v


def _topic_configs(ctx: Context, name: str) -> list[tuple[str, str | None, int, int]]:
    return topic_configs(ctx, ctx.broker.topic(name, create=False, refresh=True))


def topic_configs(ctx: Context, meta: TopicMeta | None) -> list[tuple[str, str | None, int, int]]:
    """A topic's configs under their Kafka names: ``(name, value, source, type)``
    (``meta`` None: every setting at its default)."""
    cfg = ctx.broker.config
    meta = meta if meta is not None else TopicMeta("", 1, 0)

    def setting(value: object, default: object) -> tuple[str, int]:
        return (str(default), DEFAULT_CONFIG) if value is None else (str(value), TOPIC_CONFIG)

    return [
        ("retention.ms", *setting(meta.retention_ms, -1), LONG),
        ("retention.bytes", *setting(meta.retention_bytes, -1), LONG),
        (CLEANUP_POLICY, *setting(meta.cleanup_policy, "delete"), LIST),
        ("min.compaction.lag.ms", *setting(meta.min_compaction_lag_ms, 0), LONG),
        ("delete.retention.ms", *setting(meta.delete_retention_ms, DELETE_RETENTION_MS), LONG),
        ("compression.type", "producer", DEFAULT_CONFIG, STRING),  # batches are stored as produced
        ("message.timestamp.type", "CreateTime", DEFAULT_CONFIG, STRING),
        # Per batch, as in Kafka: LLOG_MAX_RECORD_BYTES, the SDK's per-record limit.
        ("max.message.bytes", str(cfg.max_record_bytes), STATIC_BROKER_CONFIG, INT),
        ("min.insync.replicas", "1", DEFAULT_CONFIG, INT),  # durability is the object store's
    ]


def _broker_configs(ctx: Context) -> list[tuple[str, str | None, int, int]]:
    cfg = ctx.broker.config
    return [
        ("broker.id", str(ctx.registry.node_id), STATIC_BROKER_CONFIG, INT),
        ("broker.rack", cfg.zone, STATIC_BROKER_CONFIG, STRING),  # LLOG_ZONE; null without one, as Kafka
        ("auto.create.topics.enable", str(cfg.auto_create_topics).lower(), STATIC_BROKER_CONFIG, 1),
        ("num.partitions", str(cfg.default_partitions), STATIC_BROKER_CONFIG, INT),
        ("message.max.bytes", str(cfg.max_record_bytes), STATIC_BROKER_CONFIG, INT),
        ("log.retention.ms", "-1", DEFAULT_CONFIG, LONG),
        ("default.replication.factor", "1", DEFAULT_CONFIG, INT),
    ]


async def describe_cluster(ctx: Context, req: Any) -> DescribeClusterResponse:
    R = DescribeClusterResponse
    nodes = ctx.registry.live()  # as Kafka: for anyone (Metadata lists the brokers anyway)
    return R[req.API_VERSION](
        throttle_time_ms=0, error_code=0, error_message=None, endpoint_type=1, cluster_id=ctx.cluster_id,
        controller_id=nodes[0].node_id,
        brokers=[R.DescribeClusterBroker(broker_id=n.node_id, host=n.host, port=n.port_for(ctx.listener_zone),
                                         rack=n.zone, is_fenced=False) for n in nodes])


async def list_groups(ctx: Context, req: Any) -> ListGroupsResponse:
    R = ListGroupsResponse
    version = req.API_VERSION
    # Filters match case-insensitively, as Kafka's: the Java admin client asks for the
    # types "Classic" and "Consumer" (kafka-consumer-groups.sh --list).
    states = {s.lower() for s in req.states_filter or []} if version >= 4 else set()
    types = {t.lower() for t in req.types_filter or []} if version >= 5 else set()
    if types and "classic" not in types:
        return R[version](throttle_time_ms=0, error_code=0, groups=[])
    listed = []
    # Describe on the cluster lists every group; else those the caller may describe.
    every = ctx.allows(Operation.DESCRIBE, ResourceType.CLUSTER, audit=False)

    def visible(group: str) -> bool:
        return every or ctx.allows(Operation.DESCRIBE, ResourceType.GROUP, group, audit=False)

    live = [g for g in ctx.coordinator.groups() if visible(g.group_id)]
    for g in live:
        if not states or g.state.value.lower() in states:
            listed.append(R.ListedGroup(group_id=g.group_id, protocol_type=g.protocol_type or "",
                                        group_state=g.state.value, group_type="Classic"))
    # Groups with only stored state (offsets committed through the SDK, or by members
    # gone before this broker started), each listed by the broker that coordinates it,
    # as Kafka lists a group with offsets and no members: Empty, no protocol type.
    if not states or "empty" in states:
        names = {g.group_id for g in live}
        me = ctx.registry.node_id
        for name in await asyncio.to_thread(stored_groups, ctx.broker.conn):
            node = ctx.registry.coordinator(name)
            if name not in names and node is not None and node.node_id == me and visible(name):
                listed.append(R.ListedGroup(group_id=name, protocol_type="", group_state="Empty",
                                            group_type="Classic"))
    return R[version](throttle_time_ms=0, error_code=0, groups=listed)


async def describe_groups(ctx: Context, req: Any) -> DescribeGroupsResponse:
    R = DescribeGroupsResponse
    out = []
    for group_id in req.groups:
        if not ctx.allows(Operation.DESCRIBE, ResourceType.GROUP, group_id):
            out.append(R.DescribedGroup(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, error_message=None,
                                        group_id=group_id, group_state="", protocol_type="", protocol_data="",
                                        members=[]))
            continue
        g = ctx.coordinator.group(group_id)
        if g is None:
            owner = ctx.registry.coordinator(group_id)
            code = ErrorCode.NONE if owner.node_id == ctx.registry.node_id else ErrorCode.NOT_COORDINATOR
            out.append(R.DescribedGroup(error_code=code, error_message=None, group_id=group_id, group_state="Dead",
                                        protocol_type="", protocol_data="", members=[]))
            continue
        members = [R.DescribedGroup.DescribedGroupMember(
            member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
            client_host="", member_metadata=dict(m.protocols).get(g.protocol or "", b""),
            member_assignment=m.assignment) for m in g.members.values()]
        out.append(R.DescribedGroup(error_code=0, error_message=None, group_id=group_id, group_state=g.state.value,
                                    protocol_type=g.protocol_type or "", protocol_data=g.protocol or "",
                                    members=members))
    return R[req.API_VERSION](throttle_time_ms=0, groups=out)
