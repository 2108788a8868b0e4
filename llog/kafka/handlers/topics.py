"""CreateTopics: llog topics with the partition count asked for (the replication
factor is the object store's business: any value is accepted), its configs by
:mod:`llog.kafka.topic_settings`' rule, as AlterConfigs takes them (llog's per-topic
settings onto its topic definition, Kafka's local-log tuning without effect, a fixed
policy at its own value). CreatePartitions: a topic grows. DeleteTopics: a topic goes.
DeleteRecords: the log start moves."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import (
    CreatePartitionsResponse,
    CreateTopicsResponse,
    DeleteRecordsResponse,
    DeleteTopicsResponse,
)

from llog.auth.acls import Operation, ResourceType
from llog.codec.etcd_values.topic import TopicMeta
from llog.connection import Connection
from llog.errors import InvalidInput, InvalidPartition, InvalidTopicName, LlogError, UnknownTopic
from llog.kafka.context import ZERO_TOPIC_ID, Context
from llog.kafka.errors import ErrorCode, error_code
from llog.kafka.handlers.admin import ALTERABLE, topic_configs
from llog.kafka.topic_settings import topic_settings
from llog.names import MAX_PARTITIONS
from llog.table import delete_topic
from llog.topic.admin import Topics


def create_topics(ctx: Context, req: Any) -> CreateTopicsResponse:
    R = CreateTopicsResponse
    out = []
    for t in req.topics:
        settings: dict[str, Any] = {}
        code, message, partitions = _create(ctx, t, req.validate_only, settings)
        # The created topic's configs (v5+): the Java admin client reads them from every
        # successful result (a null list there is a NullPointerException in the client).
        configs = [] if code != ErrorCode.NONE else [
            R.CreatableTopicResult.CreatableTopicConfigs(name=name, value=value, read_only=name not in ALTERABLE,
                                                         config_source=source, is_sensitive=False)
            for name, value, source, _ in topic_configs(ctx, TopicMeta(t.name, max(partitions, 1), 0, **settings))]
        out.append(R.CreatableTopicResult(name=t.name, error_code=code, error_message=message,
                                          num_partitions=partitions, replication_factor=1, configs=configs))
    return R[req.API_VERSION](throttle_time_ms=0, topics=out)


def _create(ctx: Context, t: Any, validate_only: bool, settings: dict[str, Any]) -> tuple[int, str | None, int]:
    """Create (or only check) topic ``t``; the topic settings it asks for go into
    ``settings`` (the fields of llog's topic definition)."""
    conn = ctx.broker.conn
    if not ctx.may_create(t.name, audit=True):
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"Create of topic {t.name!r} is not allowed", -1
    partitions = ctx.broker.config.default_partitions if t.num_partitions == -1 else t.num_partitions
    try:
        settings.update(topic_settings(ctx, ((c.name, c.value) for c in t.configs)))
    except InvalidInput as exc:
        return ErrorCode.INVALID_CONFIG, str(exc), -1
    if t.assignments:
        return ErrorCode.INVALID_REQUEST, "replica assignments do not apply: every broker serves every partition", -1
    try:
        conn.topic(t.name, refresh=True)
        return ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {t.name!r} already exists", -1
    except UnknownTopic:
        pass
    except LlogError as exc:
        return error_code(exc), str(exc), -1
    if partitions <= 0:
        return ErrorCode.INVALID_PARTITIONS, f"num_partitions must be > 0, got {t.num_partitions}", -1
    if validate_only:
        return ErrorCode.NONE, None, partitions
    try:
        Topics(conn).create(t.name, partitions, **settings)
    except LlogError as exc:
        return error_code(exc), str(exc), -1
    return ErrorCode.NONE, None, partitions


def create_partitions(ctx: Context, req: Any) -> CreatePartitionsResponse:
    """CreatePartitions (``kafka-topics.sh --alter --partitions N``): a topic grows to
    the count asked for (:meth:`llog.topic.admin.Topics.add_partitions`)."""
    R = CreatePartitionsResponse
    results = []
    for t in req.topics:
        code, message = _grow(ctx, t, req.validate_only)
        results.append(R.CreatePartitionsTopicResult(name=t.name, error_code=code, error_message=message))
    return R[req.API_VERSION](throttle_time_ms=0, results=results)


def _grow(ctx: Context, t: Any, validate_only: bool) -> tuple[int, str | None]:
    if t.assignments:
        return ErrorCode.INVALID_REQUEST, "replica assignments do not apply: every broker serves every partition"
    try:
        ctx.check(Operation.ALTER, ResourceType.TOPIC, t.name)
        now = ctx.broker.topic(t.name, create=False, refresh=True).partitions
    except LlogError as exc:
        return error_code(exc), str(exc)
    if not now < t.count <= MAX_PARTITIONS:
        return ErrorCode.INVALID_PARTITIONS, (
            f"topic {t.name!r} has {now} partitions: it can grow to at most {MAX_PARTITIONS}, never shrink"
            if t.count > now else f"topic {t.name!r} has {now} partitions, not fewer than {t.count}")
    if validate_only:
        return ErrorCode.NONE, None
    try:
        Topics(ctx.broker.conn).add_partitions(t.name, t.count)
    except InvalidInput as exc:  # another client grew it meanwhile
        return ErrorCode.INVALID_PARTITIONS, str(exc)
    except LlogError as exc:
        return error_code(exc), str(exc)
    return ErrorCode.NONE, None


def delete_topics(ctx: Context, req: Any) -> DeleteTopicsResponse:
    """DeleteTopics (``kafka-topics.sh --delete``, admin clients): each topic goes
    through :meth:`llog.topic.admin.Topics.delete`, complete when it returns (the data
    objects follow with vacuum). v6 names a topic by name or by the id Metadata gave
    it."""
    R = DeleteTopicsResponse
    version = req.API_VERSION
    asked = [(n, ZERO_TOPIC_ID) for n in req.topic_names] if version < 6 else [(t.name, t.topic_id) for t in req.topics]
    conn = ctx.broker.conn
    # One listing per request, however many ids it names.
    by_id = {ctx.topic_id(m): m.name for m in Topics(conn).list()} if any(n is None for n, _ in asked) else {}
    out = []
    for name, topic_id in asked:
        if name is None:
            name = by_id.get(topic_id)
            # Named by id, a topic the caller may not describe is one it cannot name.
            if name is not None and not ctx.allows(Operation.DESCRIBE, ResourceType.TOPIC, name):
                name = None
        code: int
        message: str | None
        if name is None:
            code, message = ErrorCode.UNKNOWN_TOPIC_ID, f"no topic has the id {topic_id}"
        elif not ctx.allows(Operation.DELETE, ResourceType.TOPIC, name):
            code, message = ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"Delete of topic {name!r} is not allowed"
        else:
            code, message = _delete_topic(conn, name)
        result = R.DeletableTopicResult(name=name, error_code=code)
        if version >= 5:
            result.error_message = message
        if version >= 6:
            result.topic_id = topic_id
        out.append(result)
    return R[version](throttle_time_ms=0, responses=out)


def _delete_topic(conn: Connection, name: str) -> tuple[int, str | None]:
    try:
        delete_topic(conn, name)
    except LlogError as exc:
        return error_code(exc), str(exc)
    return ErrorCode.NONE, None


def delete_records(ctx: Context, req: Any) -> DeleteRecordsResponse:
    """DeleteRecords (``kafka-delete-records.sh``, admin clients, Kafka Streams purging
    its repartition topics): each partition's log start moves up to the offset asked
    for (-1: the high watermark) through :meth:`llog.topic.admin.Topics.delete_records`; the
    low watermark after is returned. Past the high watermark: ``OFFSET_OUT_OF_RANGE``."""
    R = DeleteRecordsResponse
    topics = Topics(ctx.broker.conn)
    out = []
    for t in req.topics:
        parts = []
        allowed = ctx.allows(Operation.DELETE, ResourceType.TOPIC, t.name)
        for p in t.partitions:
            code, low = (_delete_before(topics, t.name, p.partition_index, p.offset) if allowed
                         else (ErrorCode.TOPIC_AUTHORIZATION_FAILED, -1))
            parts.append(R.DeleteRecordsTopicResult.DeleteRecordsPartitionResult(
                partition_index=p.partition_index, low_watermark=low, error_code=code))
        out.append(R.DeleteRecordsTopicResult(name=t.name, partitions=parts))
    return R[req.API_VERSION](throttle_time_ms=0, topics=out)


def _delete_before(topics: Topics, topic: str, partition: int, offset: int) -> tuple[int, int]:
    if offset < -1:
        return ErrorCode.OFFSET_OUT_OF_RANGE, -1
    try:
        return ErrorCode.NONE, topics.delete_records(topic, partition, None if offset == -1 else offset)
    except (InvalidTopicName, InvalidPartition) as exc:
        return error_code(exc), -1
    except InvalidInput:  # past the high watermark
        return ErrorCode.OFFSET_OUT_OF_RANGE, -1
    except LlogError as exc:
        return error_code(exc), -1
