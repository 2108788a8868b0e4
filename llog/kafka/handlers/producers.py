"""InitProducerId: ids for idempotent producers. A new id is the etcd revision of a
write to one key, so every broker hands out ids no other broker ever gave; a
producer that asks to bump its epoch (KIP-360) keeps its id. Transactional ids are
served by :mod:`llog.kafka.handlers.transactions`.

DescribeProducers (``kafka-transactions.sh describe-producers``): the idempotent Kafka
producers a partition remembers (spec §8.7), each with its epoch and last sequence; the
last timestamp is when its last batch was committed. Producers of the SDK and the HTTP
API have string ids, which Kafka's int64 ids cannot name: they are not listed."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import DescribeProducersResponse
from kafka.protocol.producer import InitProducerIdResponse

from llog.auth.acls import Operation, ResourceType
from llog.codec.etcd_values.maps import MetaFormatError
from llog.codec.etcd_values.producers import ProducerState
from llog.errors import CorruptMetadata, LlogError
from llog.kafka.context import Context
from llog.kafka.errors import ErrorCode, error_code
from llog.kafka.handlers.transactions import init_transactional
from llog.state.keys import prefix_range_end
from llog.txn.records import MAX_EPOCH
from llog.write.commit_plan import RECORD_COUNTED_PREFIX, next_sequence


def init_producer_id(ctx: Context, req: Any) -> InitProducerIdResponse:
    R = InitProducerIdResponse[req.API_VERSION]
    if req.transactional_id is not None:
        return init_transactional(ctx, req)
    # KIP-679: IdempotentWrite on the cluster, or Write on some topic.
    if not (ctx.allows_any(Operation.WRITE, ResourceType.TOPIC)
            or ctx.allows(Operation.IDEMPOTENT_WRITE, ResourceType.CLUSTER)):
        return R(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, producer_id=-1,
                 producer_epoch=-1)
    pid, epoch = getattr(req, "producer_id", -1), getattr(req, "producer_epoch", -1)
    if pid >= 0 and 0 <= epoch < MAX_EPOCH:
        return R(throttle_time_ms=0, error_code=0, producer_id=pid, producer_epoch=epoch + 1)
    conn = ctx.broker.conn
    try:
        revision = conn.etcd.put(conn.keys.kafka_producer_ids(), b"")
    except LlogError as exc:
        return R(throttle_time_ms=0, error_code=error_code(exc), producer_id=-1, producer_epoch=-1)
    return R(throttle_time_ms=0, error_code=0, producer_id=revision, producer_epoch=0)


def describe_producers(ctx: Context, req: Any) -> DescribeProducersResponse:
    R = DescribeProducersResponse
    T = R.TopicResponse
    P = T.PartitionResponse
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partition_indexes:
            try:
                ctx.check(Operation.READ, ResourceType.TOPIC, t.name)
                active = _producers(ctx, t.name, p)
                parts.append(P(partition_index=p, error_code=0, error_message=None, active_producers=[
                    P.ProducerState(producer_id=pid, producer_epoch=st.epoch,
                                    last_sequence=(next_sequence(f"{RECORD_COUNTED_PREFIX}{pid}", st) - 1) % 2**31,
                                    last_timestamp=st.updated_at_ms, coordinator_epoch=-1,
                                    current_txn_start_offset=-1)
                    for pid, st in active]))
            except LlogError as exc:
                parts.append(P(partition_index=p, error_code=error_code(exc), error_message=str(exc),
                               active_producers=[]))
        topics.append(T(name=t.name, partitions=parts))
    return R[req.API_VERSION](throttle_time_ms=0, topics=topics)


def _producers(ctx: Context, topic: str, partition: int) -> list[tuple[int, ProducerState]]:
    """The Kafka producers ``topic/partition`` keeps state for: ``(id, state)``."""
    conn = ctx.broker.conn
    conn.check_partition(topic, partition)
    prefix = conn.keys.producer(topic, partition, RECORD_COUNTED_PREFIX)
    out = []
    for kv in conn.etcd.scan(prefix, prefix_range_end(prefix)):
        name = kv.key[len(prefix):]
        if name.isdigit():
            try:
                out.append((int(name), ProducerState.decode(kv.value)))
            except MetaFormatError as exc:
                raise CorruptMetadata(kv.key, str(exc)) from exc
    return out
