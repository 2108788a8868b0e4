"""InitProducerId: ids for idempotent producers. A new id is the etcd revision of a
write to one key, so every broker hands out ids no other broker ever gave; a
producer that asks to bump its epoch (KIP-360) keeps its id. Transactional ids are
refused: llog has no transactions."""

from __future__ import annotations

from typing import Any

from kafka.protocol.producer import InitProducerIdResponse

from llog.errors import LlogError
from llog.kafka.context import Context
from llog.kafka.errors import ErrorCode, error_code

MAX_EPOCH = 32767


def init_producer_id(ctx: Context, req: Any) -> InitProducerIdResponse:
    R = InitProducerIdResponse[req.API_VERSION]
    if req.transactional_id is not None:  # non-retriable: a transactional init fails at once
        return R(throttle_time_ms=0, error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, producer_id=-1,
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
