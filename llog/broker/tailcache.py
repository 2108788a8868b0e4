"""A bounded in-process cache of committed records, by partition and offset, so
consumers at the tail are served without an etcd or S3 round trip: the appends this
broker committed, and those other brokers committed to partitions its consumers watch
(their bodies read once, as the watch announces each commit).

Entries are exact (committed offsets), but a partition's entries may have gaps (an
append too large to keep, or one whose read failed); a lookup returns only the
contiguous run that starts at the requested offset, and the caller reads the rest from
storage. Key compaction can remove cached records below a partition's compaction
cursor: the fetch asks the cache only at or above it (llog/broker/fetch.py).
"""

from __future__ import annotations

import bisect
import itertools
import threading
from collections import deque
from collections.abc import Callable, Sequence

from llog.codec import batch
from llog.codec.bodies import Body
from llog.codec.kafka_body import KafkaBody, KafkaRun
from llog.names import TopicPartition
from llog.records import ConsumedRecord, Record, new_consumed_record, payload_size
from llog.scan.iteration import records_of
from llog.writer import AppendResult


class _Segment:
    """One committed append: its records, built into :class:`ConsumedRecord` objects
    on the first read (a broker whose consumers are not at the tail never pays for
    them), or for Kafka record batches the stored body."""

    __slots__ = ("_build", "_consumed", "count", "kafka", "nbytes", "start")

    def __init__(self, start: int, count: int, nbytes: int, build: Callable[[], tuple[ConsumedRecord, ...]],
                 kafka: KafkaBody | None = None) -> None:
        self.start, self.count, self.nbytes, self.kafka = start, count, nbytes, kafka
        self._build: Callable[[], tuple[ConsumedRecord, ...]] | None = build
        self._consumed: tuple[ConsumedRecord, ...] | None = None

    @property
    def end(self) -> int:  # exclusive
        return self.start + self.count

    def consumed(self) -> tuple[ConsumedRecord, ...]:
        if self._consumed is None:
            assert self._build is not None
            self._consumed, self._build = self._build(), None
        return self._consumed


def _segment(topic: str, partition: int, start: int, body: Body) -> _Segment:
    """A segment of a stored body: Kafka batches kept as they are; other records built
    at once (this runs off the event loop, where the reads that follow would pay)."""
    def build() -> tuple[ConsumedRecord, ...]:
        return tuple(records_of(topic, partition, itertools.count(start), body.columns()))

    if isinstance(body, KafkaBody):
        return _Segment(start, len(body), body.nbytes, build, body)
    rows = build()
    return _Segment(start, len(rows), sum(map(payload_size, rows)), lambda: rows)


def _appended(result: AppendResult, records: Sequence[Record], body: memoryview) -> _Segment:
    """A segment of a local append: the records as handed in, with the timestamps the
    body stores (a record sent without one was stamped with append time by the
    writer). The body is the one just PUT and committed: its CRC is not checked again."""
    t, p, start = result.topic, result.partition, result.start_offset
    if not records:  # Kafka batches: framed once here, decoded on the first read that needs records
        return _segment(t, p, start, KafkaBody(bytes(body), verify=False))
    stamps = batch.decode(body, verify=False).timestamps.tolist()
    return _Segment(start, len(records), sum(map(payload_size, records)), lambda: tuple(
        new_consumed_record(t, p, start + i, ts, r.key, r.value, r.headers)
        for i, (r, ts) in enumerate(zip(records, stamps, strict=True))))


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
        """Cache a committed local append: its records (none for Kafka batches) and the
        body as stored."""
        self._insert((result.topic, result.partition), _appended(result, records, body))

    def put_stored(self, topic: str, partition: int, start: int, body: Body) -> None:
        """Cache another broker's committed append, ``start`` being its first offset,
        from its body as read from storage or a peer and checked (CRC and count)."""
        self._insert((topic, partition), _segment(topic, partition, start, body))

    def _insert(self, tp: TopicPartition, seg: _Segment) -> None:
        if seg.nbytes > self.max_bytes:
            return
        with self._lock:
            starts, segs = self._parts.setdefault(tp, ([], []))
            i = bisect.bisect_left(starts, seg.start)
            if i < len(starts) and starts[i] == seg.start:
                return  # already cached
            starts.insert(i, seg.start)  # commits mostly arrive in offset order: i is the end
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
