"""ListOffsets: the earliest (-2) or latest (-1) offset of a partition, or the first
record whose timestamp is at or after a given one, with that record's timestamp
(offset -1 when every record is older); -3 (max timestamp) answers the latest."""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import ListOffsetsResponse

from llog.auth.acls import Operation, ResourceType
from llog.errors import LlogError
from llog.kafka.context import Context
from llog.kafka.errors import ErrorCode, error_code
from llog.topic.time_lookup import offset_for_timestamp

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3


def list_offsets(ctx: Context, req: Any) -> ListOffsetsResponse:
    R = ListOffsetsResponse
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            code, timestamp, offset = ErrorCode.NONE, -1, -1
            try:
                ctx.check(Operation.DESCRIBE, ResourceType.TOPIC, t.name)
                low, high = ctx.broker.reader.high_watermark(t.name, p.partition_index)
                if p.timestamp == EARLIEST:
                    offset = low
                elif p.timestamp in (LATEST, MAX_TIMESTAMP):
                    offset = high
                elif p.timestamp >= 0:  # the first record at or after it, with its own timestamp; else -1
                    reader = ctx.broker.reader
                    found = offset_for_timestamp(reader, t.name, p.partition_index, p.timestamp)
                    if found is not None:
                        offset = found
                        timestamp = next(iter(reader.scan(t.name, p.partition_index, found, found + 1))).timestamp
                else:
                    code = ErrorCode.INVALID_REQUEST
            except LlogError as exc:
                code = error_code(exc)
            parts.append(R.ListOffsetsTopicResponse.ListOffsetsPartitionResponse(
                partition_index=p.partition_index, error_code=code, timestamp=timestamp, offset=offset,
                leader_epoch=0))
        topics.append(R.ListOffsetsTopicResponse(name=t.name, partitions=parts))
    return R[req.API_VERSION](throttle_time_ms=0, topics=topics)
