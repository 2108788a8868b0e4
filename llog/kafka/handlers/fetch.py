"""Fetch: each partition's records from the broker's tail caches or the log (the
read path the HTTP API uses) as v2 record batches: batches produced through Kafka as
they were stored, base offset set, never decoded; other records built into a batch; long-polls on the
partitions' tails until ``min_bytes`` arrive or ``max_wait_ms`` passes (the HTTP
consume's :func:`~llog.broker.fetch.long_poll`; a fetch offset past the end is out of
range, as in Kafka). Fetch sessions
(KIP-227) are declined (session id 0), so clients send full fetches. Both isolation
levels read the same records: a transaction's records enter the log only when it
commits, all at once (protocol/README.md §15.3), so the last stable offset is the high
watermark and no transaction is ever aborted in a log. A consumer that names its zone
(``client.rack``, v11+) and fetches from a broker of another zone is sent to one of its
own (KIP-392's ``preferred_read_replica``; docs/zones.md)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kafka.protocol.consumer import FetchResponse

from llog.auth.acls import Operation, ResourceType
from llog.broker.fetch import PartitionRead, Wanted, long_poll
from llog.errors import LlogError
from llog.kafka.context import Context
from llog.kafka.errors import ErrorCode, error_code
from llog.kafka.zones import preferred_replica


@dataclass(frozen=True)
class _ReadElsewhere:
    """KIP-392: the consumer's zone (``rack_id``) has a broker of its own for this
    partition; the answer names it (``preferred_read_replica``) and carries no records."""

    node_id: int


_Answer = PartitionRead | LlogError | ErrorCode | _ReadElsewhere


async def fetch(ctx: Context, req: Any) -> FetchResponse:
    wanted: list[Wanted] = [(t.topic, p.partition, p.fetch_offset, p.partition_max_bytes)
                            for t in req.topics for p in t.partitions]
    if ctx.draining.is_set():  # stopping: the client asks for Metadata and goes elsewhere at once
        return _response(req, wanted, [ErrorCode.NOT_LEADER_OR_FOLLOWER for _ in wanted])
    readable = {t.topic for t in req.topics if ctx.allows(Operation.READ, ResourceType.TOPIC, t.topic)}
    zone = getattr(req, "rack_id", "") or None  # v11+
    live = ctx.registry.live(max_age_s=float("inf")) if zone else []  # the keep-alive's list: no I/O here
    me = ctx.registry.me
    answers: list[_Answer | None] = []
    for topic, partition, _offset, _limit in wanted:
        if topic not in readable:
            answers.append(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            continue
        near = preferred_replica(live, me, zone, topic, partition) if zone else -1
        answers.append(_ReadElsewhere(near) if near >= 0 else None)
    read = [w for w, a in zip(wanted, answers, strict=True) if a is None]
    polled = iter(await _poll(ctx, req, read) if read else [])
    return _response(req, wanted, [next(polled) if a is None else a for a in answers])


async def _poll(ctx: Context, req: Any, wanted: list[Wanted]) -> list[PartitionRead | LlogError]:
    return await long_poll(ctx.broker, wanted, max_bytes=req.max_bytes, min_bytes=req.min_bytes,
                           max_wait_ms=max(0, req.max_wait_ms), past_end_is_error=True, kafka=True)


def _response(req: Any, wanted: list[Wanted], got: Sequence[_Answer]) -> FetchResponse:
    R = FetchResponse
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition, _offset, _limit), part in zip(wanted, got, strict=True):
        if isinstance(part, _ReadElsewhere):
            data = R.FetchableTopicResponse.PartitionData(
                partition_index=partition, error_code=ErrorCode.NONE, high_watermark=-1, last_stable_offset=-1,
                log_start_offset=-1, aborted_transactions=None, preferred_read_replica=part.node_id, records=b"")
        elif isinstance(part, (LlogError, ErrorCode)):
            code = part if isinstance(part, ErrorCode) else error_code(part)
            # Empty records, not null: Kafka answers MemoryRecords.EMPTY, and librdkafka
            # takes a null record set for a malformed response and drops the error code
            # (it retried a draining broker's NOT_LEADER_OR_FOLLOWER ~100 times a second).
            data = R.FetchableTopicResponse.PartitionData(
                partition_index=partition, error_code=code, high_watermark=-1, last_stable_offset=-1,
                log_start_offset=-1, aborted_transactions=None, preferred_read_replica=-1, records=b"")
        else:
            data = R.FetchableTopicResponse.PartitionData(
                partition_index=partition, error_code=ErrorCode.NONE, high_watermark=part.high_watermark,
                last_stable_offset=part.high_watermark, log_start_offset=part.log_start_offset,
                aborted_transactions=None, preferred_read_replica=-1,
                records=part.kafka.records_set() if part.kafka is not None else b"")
        by_topic.setdefault(topic, []).append(data)
    return R[req.API_VERSION](
        throttle_time_ms=0, error_code=0, session_id=0,
        responses=[R.FetchableTopicResponse(topic=t, partitions=ps) for t, ps in by_topic.items()])
