"""Produce: each partition's record batch checked (framing, CRC-32C, every record,
decompressed within a cap, off the event loop: :mod:`llog.kafka.batch_checks`) and handed to the
broker's batching producer (shared with the HTTP API) to be stored as they came,
before the connection's next request is read; the answer waits for the commits. Every
``acks`` value but 0 means what llog's acknowledgement always means: durable in the
object store and committed in etcd. A transactional producer's batches are staged in
its transaction instead (protocol/README.md §15.2 T2): durable, and committed with the
transaction, so their answer carries no offset (``base_offset`` -1).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, cast

from kafka.protocol.producer import ProduceResponse

from llog.auth.acls import Operation, ResourceType
from llog.codec.kafka_body import KafkaBatchError
from llog.errors import BackPressure, LlogError
from llog.kafka.context import Context
from llog.kafka.errors import ErrorCode, error_code
from llog.records import AppendGroup, KafkaBatches
from llog.txn.pipeline import StageOutcome
from llog.txn.staging import Staged
from llog.write.commit_plan import RECORD_COUNTED_PREFIX
from llog.writer import AppendResult

if TYPE_CHECKING:
    from llog.broker.state import Broker

_Outcome = Future[AppendResult] | Future[StageOutcome] | LlogError | KafkaBatchError | ErrorCode


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
    staging: list[tuple[list[tuple[int, _Outcome]], int, str, KafkaBatches]] = []  # transactional batches
    for topic in req.topic_data:
        parts: list[tuple[int, _Outcome]] = []
        allowed = ctx.allows(Operation.WRITE, ResourceType.TOPIC, topic.name)
        for pd in topic.partition_data:
            outcome: _Outcome = ErrorCode.CORRUPT_MESSAGE  # no records at all
            if pd.records:
                batches = next(checked)
                if not allowed:
                    outcome = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                elif isinstance(batches, KafkaBatches) and batches.transactional:
                    staging.append((parts, len(parts), topic.name, batches))
                else:
                    outcome = await _submit(ctx, topic.name, pd.index, batches)
            parts.append((pd.index, outcome))
        submitted.append((topic.name, parts))
    if staging:  # one blob and one CAS on the transaction for all of them
        staged = _stage(ctx, getattr(req, "transactional_id", None),
                        [(t, parts[i][0], b) for parts, i, t, b in staging])
        for (parts, i, _t, _b), got in zip(staging, staged, strict=True):
            parts[i] = (parts[i][0], got)
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


def _stage(ctx: Context, transactional_id: str | None, items: list[tuple[str, int, KafkaBatches]]) -> list[_Outcome]:
    """T2: a transactional request's batches handed to the broker's staging pipeline
    (one blob PUT at once, staged in the producer's transaction in the order the
    requests came); one outcome per batch, answered when staged."""
    broker = ctx.broker
    refused = broker.conn.metrics.transaction_staged.labels("refused")
    if transactional_id is None or not ctx.allows(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
        refused.inc(len(items))
        return [ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED] * len(items)
    first = items[0][2]
    mine = [(t, p, b) for t, p, b in items if (b.producer_id, b.producer_epoch) == (first.producer_id,
                                                                                    first.producer_epoch)]

    def groups() -> list[AppendGroup]:  # on a pipeline thread: screening may read etcd
        return [AppendGroup(topic, partition, broker.screening.screen(topic, partition, batches, refuse_only=True),
                            producer_id=f"{RECORD_COUNTED_PREFIX}{batches.producer_id}",
                            sequence=batches.base_sequence, producer_epoch=batches.producer_epoch)
                for topic, partition, batches in mine]

    futures = iter(broker.txn_staging.submit(transactional_id, first.producer_id, first.producer_epoch, groups,
                                             len(mine), sum(len(b.data) for _t, _p, b in mine)))
    out: list[_Outcome] = []
    for _t, _p, b in items:
        if (b.producer_id, b.producer_epoch) == (first.producer_id, first.producer_epoch):
            out.append(next(futures))
        else:
            refused.inc()
            out.append(ErrorCode.INVALID_PRODUCER_ID_MAPPING)  # one producer per request
    return out


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
                    waited = cast("Future[AppendResult | StageOutcome]", outcome)
                    res = await broker.inbox.wrap(waited)
                    if isinstance(res, LlogError):  # a transactional batch refused
                        broker.conn.metrics.transaction_staged.labels("refused").inc()
                        raise res
                    if isinstance(res, Staged):  # offsets come with the transaction's commit
                        broker.conn.metrics.transaction_staged.labels(
                            "duplicate" if res.duplicate else "staged").inc()
                    else:
                        base = res.start_offset
                    broker.conn.metrics.produce_records.inc(res.count)
            except (LlogError, KafkaBatchError) as exc:
                code, message = error_code(exc), str(exc)
                if code == ErrorCode.PRODUCER_FENCED:  # what Kafka's Produce answers a stale epoch with
                    code = ErrorCode.INVALID_PRODUCER_EPOCH
            answers.append(R.TopicProduceResponse.PartitionProduceResponse(
                index=index, error_code=code, base_offset=base, log_append_time_ms=-1,
                log_start_offset=-1, record_errors=[], error_message=message))
        topics.append(R.TopicProduceResponse(name=name, partition_responses=answers))
    return R[version](responses=topics, throttle_time_ms=0)
