"""Produce: each partition's record batch checked (framing, CRC-32C, every record,
decompressed within a cap, off the event loop: :mod:`llog.kafka.batch_checks`) and handed to the
broker's batching producer (shared with the HTTP API) to be stored as they came,
before the connection's next request is read; the answer waits for the commits. Every
``acks`` value but 0 means what llog's acknowledgement always means: durable in the
object store and committed in etcd.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from kafka.protocol.producer import ProduceResponse

from llog.auth.acls import Operation, ResourceType
from llog.codec.kafka_body import KafkaBatchError
from llog.errors import BackPressure, LlogError
from llog.kafka.context import Context
from llog.kafka.errors import ErrorCode, error_code
from llog.records import KafkaBatches
from llog.write.commit_plan import RECORD_COUNTED_PREFIX
from llog.writer import AppendResult

if TYPE_CHECKING:
    from llog.broker.state import Broker

_Outcome = Future[AppendResult] | LlogError | KafkaBatchError | ErrorCode


async def produce(ctx: Context, req: Any) -> Awaitable[ProduceResponse | None]:
    """Submit every partition in request order; return the wait for their answer."""
    broker = ctx.broker
    if ctx.draining.is_set():  # stopping: the client asks for Metadata and goes elsewhere at once
        moved: _Outcome = ErrorCode.NOT_LEADER_OR_FOLLOWER
        return _none() if req.acks == 0 else _answer(req.API_VERSION, broker, [
            (t.name, [(pd.index, moved) for pd in t.partition_data]) for t in req.topic_data])
    checked = iter(await ctx.checks.check_all([pd.records for t in req.topic_data for pd in t.partition_data
                                               if pd.records]))
    submitted: list[tuple[str, list[tuple[int, _Outcome]]]] = []
    for topic in req.topic_data:
        parts: list[tuple[int, _Outcome]] = []
        allowed = ctx.allows(Operation.WRITE, ResourceType.TOPIC, topic.name)
        for pd in topic.partition_data:
            outcome: _Outcome = ErrorCode.CORRUPT_MESSAGE  # no records at all
            if pd.records:
                batches = next(checked)
                outcome = (await _submit(ctx, topic.name, pd.index, batches) if allowed
                           else ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            parts.append((pd.index, outcome))
        submitted.append((topic.name, parts))
    if req.acks == 0:
        return _none()
    return _answer(req.API_VERSION, broker, submitted)


async def _none() -> None:
    return None


async def _submit(ctx: Context, topic: str, partition: int, batches: KafkaBatches | KafkaBatchError) -> _Outcome:
    broker = ctx.broker
    if isinstance(batches, KafkaBatchError):
        broker.conn.metrics.kafka_batches_refused.labels(type(batches).__name__).inc()
        return batches
    if batches.transactional:
        return ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT  # llog has no transactions (docs/kafka.md)
    # An idempotent producer's batch carries its id, epoch and first sequence; llog's
    # producer state then counts records, as Kafka does (spec §8.7).
    producer_id, sequence, epoch = None, None, None
    if batches.producer_id >= 0:
        producer_id = f"{RECORD_COUNTED_PREFIX}{batches.producer_id}"
        sequence, epoch = batches.base_sequence, batches.producer_epoch
    meta = broker.conn.cached_topic(topic)
    try:
        # A compacted topic's records are parsed for keys (KeyRequired): off the loop.
        if ((topic, partition) in broker.validated and meta is not None and not meta.compacted
                and broker.screening.fast(topic)):
            try:  # on the event loop while nothing blocks, like the HTTP route
                return broker.producer.send_group(topic, partition, batches, producer_id=producer_id,
                                                  sequence=sequence, producer_epoch=epoch, timeout=0)
            except BackPressure:
                pass
        return await asyncio.to_thread(_send_blocking, ctx, topic, partition, batches, producer_id, sequence, epoch)
    except LlogError as exc:
        return exc


def _send_blocking(
    ctx: Context, topic: str, partition: int, records: KafkaBatches, producer_id: str | None, sequence: int | None,
    epoch: int | None,
) -> Future[AppendResult]:
    broker = ctx.broker
    broker.topic(topic, create=ctx.may_create(topic))  # created here when auto-creation is on
    checked = broker.screening.screen(topic, partition, records)
    fut = broker.producer.send_group(topic, partition, checked, producer_id=producer_id, sequence=sequence,
                                     producer_epoch=epoch)
    broker.validated.add((topic, partition))
    return fut


async def _answer(
    version: int, broker: Broker, submitted: list[tuple[str, list[tuple[int, _Outcome]]]]
) -> ProduceResponse:
    R = ProduceResponse
    topics = []
    for name, parts in submitted:
        answers = []
        for index, outcome in parts:
            code: int = ErrorCode.NONE
            base = -1
            message = None
            try:
                if isinstance(outcome, ErrorCode):
                    code = outcome
                elif isinstance(outcome, (LlogError, KafkaBatchError)):
                    raise outcome
                else:
                    res = await broker.inbox.wrap(outcome)
                    base = res.start_offset
                    broker.conn.metrics.produce_records.inc(res.count)
            except (LlogError, KafkaBatchError) as exc:
                code, message = error_code(exc), str(exc)
            answers.append(R.TopicProduceResponse.PartitionProduceResponse(
                index=index, error_code=code, base_offset=base, log_append_time_ms=-1,
                log_start_offset=-1, record_errors=[], error_message=message))
        topics.append(R.TopicProduceResponse(name=name, partition_responses=answers))
    return R[version](responses=topics, throttle_time_ms=0)
