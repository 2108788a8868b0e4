"""ApiVersions and Metadata."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kafka.protocol.metadata import ApiVersionsResponse, MetadataResponse

from llog.auth.acls import Operation, ResourceType
from llog.broker.directory import serving
from llog.codec.etcd_values.topic import TopicMeta
from llog.errors import LlogError, NotAuthorized, UnknownTopic
from llog.kafka.api_spec import Api
from llog.kafka.context import ZERO_TOPIC_ID, Context
from llog.kafka.errors import error_code
from llog.kafka.zones import client_zone, leader_of, replicas
from llog.topic.admin import Topics


def versions_response(version: int, apis: Iterable[Api]) -> ApiVersionsResponse:
    return ApiVersionsResponse[version](error_code=0, throttle_time_ms=0, api_keys=[
        ApiVersionsResponse.ApiVersion(api_key=a.request.API_KEY, min_version=a.min_version,
                                       max_version=a.max_version) for a in apis])


async def api_versions(_ctx: Context, req: Any, apis: Iterable[Api]) -> ApiVersionsResponse:
    return versions_response(req.API_VERSION, apis)


def metadata(ctx: Context, req: Any) -> MetadataResponse:
    broker = ctx.broker
    # Fresh: clients ask rarely, and act on the answer. A silent broker stays in the
    # broker list but leads nothing: clients move its partitions to the others, and
    # librdkafka, which retires a broker gone from the list, keeps it to return to.
    live = ctx.registry.live(max_age_s=0)
    nodes = ctx.registry.registered(max_age_s=float("inf"))  # the list just read
    # A client that names its zone is sent to that zone's brokers (docs/zones.md).
    leaders = serving(live, client_zone(ctx, req))
    names = None if req.topics is None else [t.name for t in req.topics]
    if names is None:  # every topic the caller may describe, quietly leaving out the others
        metas: list[tuple[str, TopicMeta | LlogError]] = [
            (m.name, m) for m in Topics(broker.conn).list()
            if ctx.allows(Operation.DESCRIBE, ResourceType.TOPIC, m.name, audit=False)]
    else:
        metas = [(name, _topic(ctx, name, req.allow_auto_topic_creation)) for name in names]
    R = MetadataResponse
    topics = []
    for name, got in metas:
        if isinstance(got, LlogError):
            topics.append(R.MetadataResponseTopic(error_code=error_code(got), name=name,
                                                  topic_id=ZERO_TOPIC_ID, partitions=[]))
            continue
        parts = []
        for p in range(got.partitions):
            leader = leader_of(leaders, name, p)
            serving_it = replicas(live, leader, name, p)  # the leader, and one per other zone
            parts.append(R.MetadataResponseTopic.MetadataResponsePartition(
                error_code=0, partition_index=p, leader_id=leader.node_id, leader_epoch=0,
                replica_nodes=serving_it, isr_nodes=serving_it, offline_replicas=[]))
        topics.append(R.MetadataResponseTopic(error_code=0, name=name, topic_id=ctx.topic_id(got),
                                              is_internal=False, partitions=parts))
    return R[req.API_VERSION](
        throttle_time_ms=0,
        brokers=[R.MetadataResponseBroker(node_id=n.node_id, host=n.host, port=n.port_for(ctx.listener_zone),
                                          rack=n.zone) for n in nodes],
        cluster_id=ctx.cluster_id, controller_id=leaders[0].node_id, topics=topics,
    )


def _topic(ctx: Context, name: str, allow_create: bool) -> TopicMeta | LlogError:
    try:
        # Whether or not it exists: a caller who may not describe it learns neither.
        ctx.check(Operation.DESCRIBE, ResourceType.TOPIC, name)
        return ctx.broker.topic(name, create=allow_create and ctx.may_create(name), refresh=True)
    except UnknownTopic as exc:
        # Would have been created but for the caller's rights: Kafka's answer is a
        # refusal, which a producer gives up on at once instead of waiting for the topic.
        if allow_create and ctx.broker.config.auto_create_topics and not ctx.may_create(name):
            return NotAuthorized(ctx.caller.principal if ctx.caller else "?", "Create", "Topic", name)
        return exc
    except LlogError as exc:
        return exc
