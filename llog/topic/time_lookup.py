"""Offset lookup by timestamp, from the max timestamp each index entry records.

The answer is the earliest offset whose record timestamp is >= the target (Kafka's
``offsetsForTimes``). The first index entry (in offset order) whose ``max_timestamp``
reaches the target holds that record, so only that one slice is read.
"""

from __future__ import annotations

from llog.reader import Reader
from llog.state.control import decode_index, read_control


def offset_for_timestamp(reader: Reader, topic: str, partition: int, timestamp_ms: int) -> int | None:
    """The earliest offset with a timestamp >= ``timestamp_ms``, or ``None`` if every
    record is older."""
    conn = reader.conn
    conn.check_partition(topic, partition)
    keys = conn.keys
    ctl = read_control(conn, topic, partition).control
    start = ctl.log_start_offset
    candidate: tuple[int, int] | None = None
    for kv in conn.etcd.scan(keys.index(topic, partition, start), keys.index_range_end(topic, partition)):
        e = decode_index(kv.key, kv.value)
        if e.max_timestamp >= timestamp_ms:
            end = keys.end_offset_of(kv.key)
            candidate = (max(start, end - e.msg_count + 1), end + 1)
            break
    if candidate is None:
        p = ctl.pending
        if p is None or p.max_timestamp < timestamp_ms:
            return None
        candidate = (p.start_offset, p.end_offset + 1)
    for rec in reader.scan(topic, partition, *candidate):
        if rec.timestamp >= timestamp_ms:
            return rec.offset
    return None
