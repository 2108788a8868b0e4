"""A bounded in-process cache of records this broker committed, by partition and
offset, so consumers at the tail are served without an etcd or S3 round trip.

Entries are exact (committed offsets from ``AppendResult``), but a partition's entries
may have gaps where other brokers wrote; a lookup returns only the contiguous run that
starts at the requested offset, and the caller reads the rest from storage.
"""

from __future__ import annotations

import bisect
import threading
from collections import deque
from collections.abc import Sequence

from llog.codec import batch
from llog.codec.kafka_body import KafkaBody, KafkaRun
from llog.names import TopicPartition
from llog.records import ConsumedRecord, Record, payload_size
from llog.writer import AppendResult


class _Segment:
    """One committed append: its records as handed in and their stored timestamps (or,
    for Kafka record batches, the stored body), and the :class:`ConsumedRecord`
    objects built from them on the first read (a broker whose consumers are not at the
    tail never pays for them)."""

    __slots__ = ("_consumed", "count", "kafka", "nbytes", "partition", "records", "start", "timestamps", "topic")

    def __init__(self, topic: str, partition: int, start: int, records: Sequence[Record], body: memoryview) -> None:
        self.topic, self.partition, self.start = topic, partition, start
        self.records = records
        # The body is the one just PUT and committed: no need to check its CRC again.
        self.kafka: KafkaBody | None = None
        if records:
            self.timestamps: list[int] = batch.decode(body, verify=False).timestamps.tolist()
            self.nbytes = sum(map(payload_size, records))
            self.count = len(records)
        else:  # Kafka batches: framed once here, decoded on the first read that needs records
            self.kafka, self.timestamps = KafkaBody(bytes(body), verify=False), []
            self.nbytes, self.count = len(body), len(self.kafka)
        self._consumed: tuple[ConsumedRecord, ...] | None = None

    @property
    def end(self) -> int:  # exclusive
        return self.start + self.count

    def consumed(self) -> tuple[ConsumedRecord, ...]:
        if self._consumed is None:
            t, p, start = self.topic, self.partition, self.start
            if self.kafka is not None:
                self._consumed = tuple(
                    ConsumedRecord(t, p, start + i, ts, key, value, headers)
                    for i, (ts, key, value, headers) in enumerate(self.kafka.rows())
                )
            else:
                self._consumed = tuple(
                    ConsumedRecord(t, p, start + i, ts, r.key, r.value, r.headers)
                    for i, (r, ts) in enumerate(zip(self.records, self.timestamps, strict=True))
                )
        return self._consumed


class TailCache:
    """Thread-safe; evicts the oldest appends first once over ``max_bytes``."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        # Per partition: segment start offsets (sorted, for bisect) and the segments.
        self._parts: dict[TopicPartition, tuple[list[int], list[_Segment]]] = {}
        self._order: deque[tuple[TopicPartition, _Segment]] = deque()
        self._bytes = 0

    @property
    def nbytes(self) -> int:
        return self._bytes

    def put(self, result: AppendResult, records: list[Record], body: memoryview) -> None:
        """Cache a committed append: its records (none for Kafka batches) and the body
        as stored, whose timestamps are the stored ones (a record sent without one was
        stamped with append time by the writer)."""
        tp = (result.topic, result.partition)
        seg = _Segment(result.topic, result.partition, result.start_offset, records, body)
        if seg.nbytes > self.max_bytes:
            return
        with self._lock:
            starts, segs = self._parts.setdefault(tp, ([], []))
            i = bisect.bisect_left(starts, seg.start)
            if i < len(starts) and starts[i] == seg.start:
                return  # already cached
            starts.insert(i, seg.start)  # commits arrive in offset order: i is the end
            segs.insert(i, seg)
            self._order.append((tp, seg))
            self._bytes += seg.nbytes
            while self._bytes > self.max_bytes:
                old_tp, old = self._order.popleft()
                old_starts, old_segs = self._parts[old_tp]
                j = bisect.bisect_left(old_starts, old.start)
                del old_starts[j], old_segs[j]
                if not old_segs:
                    del self._parts[old_tp]
                self._bytes -= old.nbytes

    def _locate(self, topic: str, partition: int, offset: int) -> tuple[list[_Segment], int] | None:
        """Under the lock: the partition's segments and the index of the one holding
        ``offset``; ``None`` when no cached append holds it."""
        part = self._parts.get((topic, partition))
        if part is None:
            return None
        starts, segs = part
        i = bisect.bisect_right(starts, offset) - 1
        if i < 0 or segs[i].end <= offset:
            return None
        return segs, i

    def get_batches(self, topic: str, partition: int, offset: int, max_bytes: int) -> KafkaRun | None:
        """A Kafka Fetch's :meth:`get`: the appends from ``offset`` on as v2 record
        batches (stored ones as produced, others built from the records), at least one
        and then up to about ``max_bytes``; ``None`` when ``offset`` is not cached."""
        with self._lock:
            found = self._locate(topic, partition, offset)
            if found is None:
                return None
            segs, i = found
            run: list[_Segment] = []
            want, used = offset, 0
            while i < len(segs) and segs[i].start <= want < segs[i].end and (not run or used < max_bytes):
                run.append(segs[i])
                used += segs[i].nbytes
                want = segs[i].end
                i += 1
        out = KafkaRun()
        for seg in run:  # outside the lock: building batches costs CPU
            if seg.kafka is not None:
                out.add_body(seg.start, seg.kafka, max(offset, seg.start), seg.end)
            else:
                out.add_records(seg.consumed()[max(0, offset - seg.start):])
        return out

    def get(self, topic: str, partition: int, offset: int, max_bytes: int) -> list[ConsumedRecord] | None:
        """Records from ``offset`` on while they are contiguous, at least one and then
        up to ``max_bytes``; ``None`` when ``offset`` itself is not cached."""
        with self._lock:
            found = self._locate(topic, partition, offset)
            if found is None:
                return None
            segs, i = found
            out: list[ConsumedRecord] = []
            used = 0
            want = offset
            while i < len(segs) and segs[i].start <= want < segs[i].end:
                for r in segs[i].consumed()[want - segs[i].start:]:
                    size = payload_size(r)
                    if out and used + size > max_bytes:
                        return out
                    out.append(r)
                    used += size
                want = segs[i].end
                i += 1
            return out
