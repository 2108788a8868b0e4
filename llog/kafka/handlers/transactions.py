"""Kafka's transaction APIs over :mod:`llog.txn` (protocol/README.md §15): InitProducerId
with a transactional id, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn,
DescribeTransactions and ListTransactions (``kafka-transactions.sh``). Every broker
coordinates every transactional id: FindCoordinator spreads them, the state is in
etcd. A commit makes the transaction's records visible at once, so there are no
markers, no last stable offset and no aborted-transaction lists to serve."""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from typing import Any

from kafka.protocol.admin import DescribeTransactionsResponse, ListTransactionsResponse
from kafka.protocol.producer import InitProducerIdResponse
from kafka.protocol.producer.transaction import (
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnResponse,
    EndTxnResponse,
    TxnOffsetCommitResponse,
)

from llog.auth.acls import Operation, ResourceType
from llog.codec.etcd_values.transaction import COMPLETE_ABORT, COMPLETE_COMMIT, EMPTY, ONGOING, TxnRecord
from llog.errors import ConcurrentTransactions, LlogError
from llog.kafka.context import Context
from llog.kafka.errors import ErrorCode, error_code
from llog.kafka.group_state import GroupError
from llog.kafka.handlers.groups import coordinated

#: llog's record states by Kafka's names (``kafka-transactions.sh`` shows these).
KAFKA_STATES = {EMPTY: "Empty", ONGOING: "Ongoing", COMPLETE_COMMIT: "CompleteCommit",
                COMPLETE_ABORT: "CompleteAbort"}


#: The first version of each transaction API that knows PRODUCER_FENCED (KIP-588);
#: older ones are told INVALID_PRODUCER_EPOCH, as Kafka does.
_FENCED_FROM = {"InitProducerIdRequest": 4, "AddPartitionsToTxnRequest": 2, "AddOffsetsToTxnRequest": 2,
                "EndTxnRequest": 2, "TxnOffsetCommitRequest": 3}

log = logging.getLogger(__name__)


def _code(req: Any, exc: LlogError) -> int:
    """The code a transaction API answers ``exc`` with: a retriable failure (etcd or the
    store away, a CAS lost too often) as CONCURRENT_TRANSACTIONS, which every client
    retries (the Java client takes anything else from EndTxn as fatal)."""
    code = error_code(exc)
    knows_fenced = _FENCED_FROM.get(type(req).__name__, 0) <= req.API_VERSION
    if code == ErrorCode.PRODUCER_FENCED and not knows_fenced:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if exc.retriable and code == ErrorCode.REQUEST_TIMED_OUT:
        return ErrorCode.CONCURRENT_TRANSACTIONS
    return code


def _check_id(ctx: Context, transactional_id: str, op: Operation = Operation.WRITE) -> None:
    ctx.check(op, ResourceType.TRANSACTIONAL_ID, transactional_id)


def _draining(ctx: Context) -> bool:
    """Whether this broker is stopping: it coordinates no transaction then, and answers
    NOT_COORDINATOR, so the client finds another coordinator while its connection is
    still open (librdkafka looks again on that answer, not on a broker it retired)."""
    return ctx.draining.is_set()


def init_transactional(ctx: Context, req: Any) -> InitProducerIdResponse:
    """InitProducerId with a transactional id: T0 (its id and a new epoch)."""
    R = InitProducerIdResponse[req.API_VERSION]
    try:
        _check_id(ctx, req.transactional_id)
        if _draining(ctx):
            return R(throttle_time_ms=0, error_code=ErrorCode.NOT_COORDINATOR, producer_id=-1, producer_epoch=-1)
        pid, epoch = ctx.broker.transactions.init_producer(
            req.transactional_id, req.transaction_timeout_ms, getattr(req, "producer_id", -1),
            getattr(req, "producer_epoch", -1))
    except LlogError as exc:
        return R(throttle_time_ms=0, error_code=_code(req, exc), producer_id=-1, producer_epoch=-1)
    return R(throttle_time_ms=0, error_code=0, producer_id=pid, producer_epoch=epoch)


def add_partitions_to_txn(ctx: Context, req: Any) -> AddPartitionsToTxnResponse:
    R = AddPartitionsToTxnResponse
    T = R.AddPartitionsToTxnTopicResult
    P = T.AddPartitionsToTxnPartitionResult
    topics = [(t.name, list(t.partitions)) for t in req.v3_and_below_topics]
    codes: dict[tuple[str, int], int] = {}
    try:
        _check_id(ctx, req.v3_and_below_transactional_id)
        denied = {name for name, _ in topics if not ctx.allows(Operation.WRITE, ResourceType.TOPIC, name)}
        for name, parts in topics:
            for p in parts:
                if name in denied:
                    codes[(name, p)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                else:
                    try:
                        ctx.broker.conn.check_partition(name, p)
                    except LlogError as exc:
                        codes[(name, p)] = error_code(exc)
        if not codes and _draining(ctx):
            codes = {(n, p): ErrorCode.NOT_COORDINATOR for n, ps in topics for p in ps}
        elif codes:  # Kafka adds none when one fails: the others are not attempted
            codes = {(n, p): codes.get((n, p), ErrorCode.OPERATION_NOT_ATTEMPTED) for n, ps in topics for p in ps}
        else:
            ctx.broker.transactions.add_partitions(
                req.v3_and_below_transactional_id, req.v3_and_below_producer_id, req.v3_and_below_producer_epoch,
                [(n, p) for n, ps in topics for p in ps])
    except LlogError as exc:
        code = _code(req, exc)
        codes = {(n, p): code for n, ps in topics for p in ps}
    return R[req.API_VERSION](throttle_time_ms=0, results_by_topic_v3_and_below=[
        T(name=n, results_by_partition=[P(partition_index=p, partition_error_code=codes.get((n, p), 0)) for p in ps])
        for n, ps in topics])


def add_offsets_to_txn(ctx: Context, req: Any) -> AddOffsetsToTxnResponse:
    code: int = ErrorCode.NONE
    try:
        _check_id(ctx, req.transactional_id)
        if not ctx.allows(Operation.READ, ResourceType.GROUP, req.group_id):
            code = ErrorCode.GROUP_AUTHORIZATION_FAILED
        elif _draining(ctx):
            code = ErrorCode.NOT_COORDINATOR
        else:
            ctx.broker.transactions.add_group(req.transactional_id, req.producer_id, req.producer_epoch,
                                              req.group_id)
    except LlogError as exc:
        code = _code(req, exc)
    return AddOffsetsToTxnResponse[req.API_VERSION](throttle_time_ms=0, error_code=code)


async def txn_offset_commit(ctx: Context, req: Any) -> TxnOffsetCommitResponse:
    """T2' at the group's coordinator: a member's commit is checked against the
    group's generation (KIP-447) before the offsets are staged."""
    R = TxnOffsetCommitResponse
    wanted = [(t.name, p.partition_index, p.committed_offset) for t in req.topics for p in t.partitions]
    code: int = ErrorCode.NONE
    try:
        _check_id(ctx, req.transactional_id)
        coordinated(ctx, req.group_id)
        generation, guard = getattr(req, "generation_id", -1), None
        if generation >= 0 or getattr(req, "member_id", ""):
            # The generation's epoch in etcd, compared by the commit (T3), as every
            # OffsetCommit of the generation compares it: a coordinator that missed a
            # rebalance (paused, cut off) cannot commit a stale member's offsets.
            await ctx.coordinator.carry_on(req.group_id, req.member_id, generation)  # as OffsetCommit
            epoch = ctx.coordinator.check_commit(req.group_id, req.member_id, generation)
            guard = base64.b64encode(epoch.encode()).decode()
        denied = [t for t, _, _ in wanted if not ctx.allows(Operation.READ, ResourceType.TOPIC, t)]
        if denied:
            code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        else:
            await asyncio.to_thread(ctx.broker.transactions.stage_offsets, req.transactional_id, req.producer_id,
                                    req.producer_epoch, req.group_id, wanted, guard)
    except GroupError as exc:
        code = exc.code
    except LlogError as exc:
        code = _code(req, exc)
    by_topic: dict[str, list[Any]] = {}
    for topic, partition, _ in wanted:
        by_topic.setdefault(topic, []).append(
            R.TxnOffsetCommitResponseTopic.TxnOffsetCommitResponsePartition(partition_index=partition,
                                                                            error_code=code))
    return R[req.API_VERSION](throttle_time_ms=0, topics=[
        R.TxnOffsetCommitResponseTopic(name=t, partitions=ps) for t, ps in by_topic.items()])


async def end_txn(ctx: Context, req: Any) -> EndTxnResponse:
    """T3 or T4. A commit that came on a connection its client has since closed is not
    applied: the client gave up on it (a timeout) and sent it again elsewhere, and
    this copy, held back by a pause or a partition, could otherwise commit the
    producer's next transaction half-sent (spec §15.2, "Late ends")."""
    code: int = ErrorCode.NONE
    try:
        _check_id(ctx, req.transactional_id)
        try:
            abandoned = req.committed and await ctx.abandoned()
        except asyncio.CancelledError:  # the connection closed while this waited: its requests end with it
            _late_end(ctx, req.transactional_id)
            raise
        if abandoned:
            raise _late_end(ctx, req.transactional_id)
        if _draining(ctx):
            return EndTxnResponse[req.API_VERSION](throttle_time_ms=0, error_code=ErrorCode.NOT_COORDINATOR)
        await asyncio.to_thread(ctx.broker.transactions.end, req.transactional_id, req.producer_id,
                                req.producer_epoch, req.committed)
    except LlogError as exc:
        code = _code(req, exc)
    return EndTxnResponse[req.API_VERSION](throttle_time_ms=0, error_code=code)


def _late_end(ctx: Context, transactional_id: str) -> ConcurrentTransactions:
    """Count and log a commit not applied because its client closed the connection."""
    ctx.broker.conn.metrics.transactions.labels("late_end").inc()
    late = ConcurrentTransactions(transactional_id, "the connection this commit came on was closed by its client: "
                                  "not applied")
    log.warning("%s", late)
    return late


def describe_transactions(ctx: Context, req: Any) -> DescribeTransactionsResponse:
    R = DescribeTransactionsResponse
    S = R.TransactionState
    out = []
    for txid in req.transactional_ids:
        try:
            _check_id(ctx, txid, Operation.DESCRIBE)
            r = ctx.broker.transactions.describe(txid)
            out.append(_described(S, txid, r))
        except LlogError as exc:
            out.append(S(error_code=error_code(exc), transactional_id=txid, transaction_state="",
                         transaction_timeout_ms=0, transaction_start_time_ms=-1, producer_id=-1, producer_epoch=-1,
                         topics=[]))
    return R[req.API_VERSION](throttle_time_ms=0, transaction_states=out)


def _described(S: Any, txid: str, r: TxnRecord) -> Any:
    by_topic: dict[str, list[int]] = {}
    for t, p in r.partitions:
        by_topic.setdefault(t, []).append(p)
    return S(error_code=0, transactional_id=txid, transaction_state=KAFKA_STATES[r.state],
             transaction_timeout_ms=r.timeout_ms,
             transaction_start_time_ms=r.started_at_ms if r.state == ONGOING else -1,
             producer_id=r.producer_id, producer_epoch=r.epoch,
             topics=[S.TopicData(topic=t, partitions=ps) for t, ps in by_topic.items()])


def list_transactions(ctx: Context, req: Any) -> ListTransactionsResponse:
    R = ListTransactionsResponse
    states = set(req.state_filters or ())
    known = set(KAFKA_STATES.values()) | {"PrepareCommit", "PrepareAbort", "Dead", "PrepareEpochFence"}
    pids = set(req.producer_id_filters or ())
    min_age_ms = getattr(req, "duration_filter", -1)
    code: int = ErrorCode.NONE
    rows = []
    try:
        now = int(time.time() * 1000)
        for txid, r, _rev in ctx.broker.transactions.list():
            state = KAFKA_STATES[r.state]
            if (states and state not in states) or (pids and r.producer_id not in pids):
                continue
            if min_age_ms >= 0 and (r.state != ONGOING or now - r.started_at_ms < min_age_ms):
                continue
            if ctx.allows(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, txid, audit=False):
                rows.append(R.TransactionState(transactional_id=txid, producer_id=r.producer_id,
                                               transaction_state=state))
    except LlogError as exc:
        code = error_code(exc)
    return R[req.API_VERSION](throttle_time_ms=0, error_code=code, unknown_state_filters=sorted(states - known),
                              transaction_states=rows)
