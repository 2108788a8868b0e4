"""Scan resolution (protocol/README.md §9 steps 1-7 and 11): each partition's control
and first index page in one etcd round trip, the plan of its scan, the index walk into
slices (with the pending tail), and the re-resolution of a scan whose blob was vacuumed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from llog.codec.etcd_values.partition import Pending
from llog.connection import Connection
from llog.errors import CorruptMetadata, InvalidInput, LlogError, OffsetOutOfRange
from llog.etcd.operations import KV, Get
from llog.names import check_partition, check_topic
from llog.scan.partition import PartitionScan
from llog.scan.slices import Fetch, SliceRef, coalesce
from llog.state.control import ControlState, decode_control, decode_index, read_control, settle

log = logging.getLogger(__name__)
#: Index keys per etcd range read while walking a partition.
INDEX_PAGE = 256
#: Partitions resolved per etcd round trip: two reads each, within etcd's default
#: limit of 128 operations per transaction.
RESOLVE_BATCH = 64
#: ``(topic, partition, start, end)``: records ``start <= offset < end`` (``end=None``:
#: up to the partition's next offset).
ScanRequest = tuple[str, int, int, int | None]


@dataclass(frozen=True)
class Resolution:
    """A partition's control state and the first index page of a scan from ``start``
    (read with limit ``page``), from one revision."""

    state: ControlState
    first_page: list[KV]
    page: int


@dataclass(frozen=True)
class IndexWalk:
    """The fetches of ``[start, hi)`` from a resolution; each iteration walks anew."""

    resolver: Resolver
    topic: str
    partition: int
    start: int
    hi: int
    resolution: Resolution

    def __iter__(self) -> Iterator[Fetch]:
        config = self.resolver.conn.config
        slices = self.resolver.slices(self.topic, self.partition, self.start, self.hi, self.resolution)
        return coalesce(slices, config.read_coalesce_gap_bytes, config.read_max_fetch_bytes, self.start)


@dataclass(frozen=True)
class BelowLogStart:
    """The fetches of a scan that starts below the log start: none, it raises
    :class:`OffsetOutOfRange` when first advanced (when the consumer reaches it)."""

    error: OffsetOutOfRange

    def __iter__(self) -> Iterator[Fetch]:
        raise self.error
        yield  # a generator: raises when first advanced


class Resolver:
    """Turns scan requests into :class:`PartitionScan` plans, reading etcd."""

    def __init__(self, conn: Connection, *, settle_pending: bool) -> None:
        self.conn = conn
        #: Settle a pending older than ``settle_after_ms`` met while planning (§9 step 5).
        self.settle_pending = settle_pending

    def check(self, topic: str, partition: int, start: int) -> tuple[str, int, int]:
        """``(topic, partition, start)`` once valid (§9 step 1)."""
        check_topic(topic)
        check_partition(topic, partition)
        if isinstance(start, bool) or not isinstance(start, int) or start < 0:
            raise InvalidInput(f"start offset must be an int >= 0, got {start!r}")
        self.conn.check_partition(topic, partition)
        return topic, partition, start

    def resolve(self, reqs: Sequence[ScanRequest]) -> list[Resolution]:
        """Each partition's control and its index page from ``start``, all in one round
        trip at one revision. The page is read before the control says where the
        partition ends; it costs nothing extra when there is nothing to read."""
        keys = self.conn.keys
        reads: list[Get] = []
        pages: list[int] = []
        for topic, partition, start, end in reqs:
            pages.append(1 if end == start + 1 else INDEX_PAGE)
            reads.append(Get(keys.control(topic, partition)))
            reads.append(Get(keys.index(topic, partition, start), keys.index_range_end(topic, partition), pages[-1]))
        got = self.conn.etcd.get_many(reads)
        return [
            Resolution(decode_control(reads[2 * i].key, got[2 * i][0] if got[2 * i] else None), got[2 * i + 1], page)
            for i, page in enumerate(pages)
        ]

    def plan_many(self, reqs: list[ScanRequest], max_records: int | None) -> list[PartitionScan]:
        """The scans of ``reqs`` in turn, at most ``max_records`` records in all: each
        scan ends where the budget left ends, and the requests past the budget are not
        even resolved. :data:`RESOLVE_BATCH` requests are resolved per round trip, each
        batch only when it is reached."""
        scans: list[PartitionScan] = []
        if max_records == 0:
            return scans
        left = max_records
        for i in range(0, len(reqs), RESOLVE_BATCH):
            chunk = reqs[i : i + RESOLVE_BATCH]
            for (t, p, s, e), r in zip(chunk, self.resolve(chunk), strict=True):
                if left is not None:
                    e = s + left if e is None else min(e, s + left)
                sc = self.plan(t, p, s, e, r)
                if sc is None:
                    continue
                scans.append(sc)
                if left is not None:
                    left -= sc.hi - sc.start  # a scan yields every offset of [start, hi) once, or raises
                    if left == 0:
                        return scans
        return scans

    def plan(
        self, topic: str, partition: int, start: int, end: int | None, resolution: Resolution
    ) -> PartitionScan | None:
        """A partition's scan from its resolution; ``None`` when there is nothing to
        read. Below the log start the scan raises :class:`OffsetOutOfRange` when its
        turn comes."""
        st = resolution.state
        ctl = st.control
        if start < ctl.log_start_offset:
            below = OffsetOutOfRange(topic, partition, start, ctl.log_start_offset)
            return PartitionScan(topic, partition, start, start + 1, BelowLogStart(below))
        hi = ctl.next_offset if end is None else min(end, ctl.next_offset)
        if start >= hi:
            return None
        if self.settle_pending and ctl.pending is not None:
            self._maybe_settle(topic, partition, st)
        return PartitionScan(topic, partition, start, hi, IndexWalk(self, topic, partition, start, hi, resolution))

    def re_resolve(self, sc: PartitionScan) -> None:
        """Point ``sc`` at a fresh resolution from where it is (§9 step 11: its blob
        was compacted and vacuumed after it resolved) and restart its fetches."""
        [resolution] = self.resolve([(sc.topic, sc.partition, sc.done, sc.hi)])
        lso = resolution.state.control.log_start_offset
        if sc.done < lso:
            raise OffsetOutOfRange(sc.topic, sc.partition, sc.done, lso) from None
        sc.source = IndexWalk(self, sc.topic, sc.partition, sc.done, sc.hi, resolution)
        sc.restart()  # whatever its old resolution raised is moot now

    def slices(
        self, topic: str, partition: int, start: int, hi: int, resolution: Resolution
    ) -> Iterator[SliceRef]:
        """Slices covering ``[start, hi)`` in order, each record covered exactly once
        by the first slice that holds it (a compaction in flight can make index entries
        overlap; the overlap is skipped). ``resolution`` holds the control state and
        the index page from ``start`` (:meth:`resolve`)."""
        keys, etcd = self.conn.keys, self.conn.etcd
        end_key = keys.index_range_end(topic, partition)
        nxt = start
        cursor = keys.index(topic, partition, start)
        first: list[KV] | None = resolution.first_page
        page = resolution.page
        pending = resolution.state.control.pending
        while nxt < hi:
            if first is not None:
                kvs, first = first, None
            else:
                kvs = etcd.range(cursor, end_key, limit=page)
            for kv in kvs:
                e = decode_index(kv.key, kv.value)
                e_end = keys.end_offset_of(kv.key)
                e_start = e_end - e.msg_count + 1
                if e_end < nxt:
                    continue
                if e_start > nxt:
                    # Only the pending tail may be missing from the index.
                    break
                yield SliceRef(e_start, e.msg_count, e.data_key, e.byte_offset, e.byte_length, e.encoding)
                nxt = e_end + 1
                if nxt >= hi:
                    return
            else:
                if len(kvs) == page:
                    cursor = kvs[-1].key + "\0"
                    page = INDEX_PAGE
                    continue
            # Index exhausted (or a gap) before hi: the rest must be the pending slice.
            tail = self._pending_tail(topic, partition, nxt, pending)
            yield tail
            nxt = tail.end_offset + 1

    def _pending_tail(self, topic: str, partition: int, nxt: int, pending: Pending | None) -> SliceRef:
        """The pending slice when it covers ``nxt`` (§9 step 7); else the reason why
        nothing does, after a fresh control read."""
        if pending is not None and pending.start_offset <= nxt <= pending.end_offset:
            return SliceRef(
                pending.start_offset, pending.msg_count, pending.data_key,
                pending.byte_offset, pending.byte_length,
            )
        lso = read_control(self.conn, topic, partition).control.log_start_offset
        if nxt < lso:
            raise OffsetOutOfRange(topic, partition, nxt, lso)
        keys = self.conn.keys
        raise CorruptMetadata(keys.index(topic, partition, nxt), f"no index entry or pending covers offset {nxt}")

    def _maybe_settle(self, topic: str, partition: int, st: ControlState) -> None:
        try:
            settle(self.conn, topic, partition, min_age_ms=self.conn.config.settle_after_ms, state=st)
        except LlogError as exc:  # best effort: the read itself does not need it
            log.debug("settle of %s/%s skipped: %s", topic, partition, exc)
