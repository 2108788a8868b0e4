"""The read path (protocol/README.md, "Read resolution").

An offset resolves through a ceiling lookup on the partition's index keys (the first
key whose end offset is >= the offset), or the control's ``pending`` for the newest
committed append. Scans walk the index in pages, coalesce nearby slices of one object
into one range GET, keep a bounded number of GETs in flight, and yield records in
offset order.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import count, repeat

from llog.codec import batch
from llog.config import LlogConfig
from llog.connection import Connection
from llog.control import ControlState, decode_control, decode_index, read_control, settle
from llog.errors import (
    CorruptBlob,
    CorruptMetadata,
    InvalidInput,
    LlogError,
    ObjectNotFound,
    OffsetOutOfRange,
    StoreError,
)
from llog.etcd import KV, Get
from llog.names import check_partition, check_topic
from llog.records import ConsumedRecord

log = logging.getLogger(__name__)
#: Index keys per etcd range read while walking a partition.
_INDEX_PAGE = 256
#: Partitions :meth:`Reader.scan_many` resolves per etcd round trip: two reads each,
#: within etcd's default limit of 128 operations per transaction.
RESOLVE_BATCH = 64


@dataclass(frozen=True)
class SliceRef:
    """Records ``[first_offset, first_offset + count)`` in bytes of one object."""

    first_offset: int
    count: int
    data_key: str
    byte_offset: int
    byte_length: int

    @property
    def end_offset(self) -> int:
        return self.first_offset + self.count - 1


@dataclass(frozen=True)
class _Resolved:
    """A partition's control state and the first index page of a scan from ``start``
    (read with limit ``page``), from one revision."""

    state: ControlState
    first_page: list[KV]
    page: int


@dataclass(eq=False)
class _Scan:
    """One partition's part of a scan, as it goes: its range ``[start, hi)``, where to
    (re)start its fetches, and how far it has yielded."""

    topic: str
    partition: int
    start: int
    hi: int
    #: Builds the scan's fetches (again, if the scan must start over): from ``start``,
    #: or from where it was once its blob was found vacuumed and it re-resolved.
    source: Callable[[], Iterator[_Fetch]]
    fetches: Iterator[_Fetch] = field(init=False)
    #: Next offset to yield.
    done: int = field(init=False)
    #: Objects found gone (vacuumed) during the scan: each is re-resolved once.
    gone: set[str] = field(default_factory=set)
    #: What the fetches raised; the consumer gets it when it reaches this point.
    failed: LlogError | None = None

    def __post_init__(self) -> None:
        self.done = self.start
        self.restart()

    def restart(self) -> None:
        self.fetches = self.source()
        self.failed = None


@dataclass(frozen=True)
class _Fetch:
    data_key: str
    byte_offset: int
    byte_length: int
    slices: tuple[SliceRef, ...]


class Reader:
    """Reads committed records; thread-safe.

    >>> with Reader(conn) as r:                                   # doctest: +SKIP
    ...     for rec in r.scan("orders", 0, 0):
    ...         print(rec.offset, rec.value)
    """

    def __init__(self, conn: Connection | LlogConfig | None = None, *, settle_pending: bool = True) -> None:
        self._owns_conn = not isinstance(conn, Connection)
        self.conn = conn if isinstance(conn, Connection) else Connection(conn)
        self.config = self.conn.config
        self.settle_pending = settle_pending
        self._pool = ThreadPoolExecutor(max(1, self.config.read_prefetch), thread_name_prefix="llog-read")

    # -- public API ------------------------------------------------------------
    def read(self, topic: str, partition: int, offset: int) -> ConsumedRecord | None:
        """The record at ``offset``, or ``None`` if it is at/after the next offset.
        Raises :class:`OffsetOutOfRange` below the log start offset."""
        for rec in self.scan(topic, partition, offset, offset + 1):
            return rec
        return None

    def scan(
        self, topic: str, partition: int, start: int = 0, end: int | None = None
    ) -> Iterator[ConsumedRecord]:
        """Records with ``start <= offset < end`` (``end=None``: up to the partition's
        next offset when the scan begins), in offset order, with bounded memory."""
        return self._records(self._batches(topic, partition, start, end))

    def scan_many(
        self, requests: Sequence[tuple[str, int, int, int | None]], *, max_records: int | None = None
    ) -> Iterator[ConsumedRecord]:
        """:meth:`scan` of each ``(topic, partition, start, end)`` in turn, at most
        ``max_records`` in all: each partition's scan ends where the records left in
        that budget end, so no GET is made for records past it. Every partition's
        control and first index page are read up front, in one etcd round trip per
        :data:`RESOLVE_BATCH` partitions instead of one per partition (a consumer
        polling many partitions, most of them idle, costs etcd one read per poll), and
        the range GETs run ahead across partition boundaries, so the next partition's
        first slices are on their way while this one's last are consumed. A bad request
        raises before anything is read; a partition's :class:`OffsetOutOfRange` is
        raised when its turn comes. The records yielded before an error are valid and
        complete up to it: a caller that stops at the error keeps them
        (:meth:`llog.groups.Consumer.poll` returns them and raises the error on its
        next poll)."""
        reqs = [(*self._check(t, p, s), e) for t, p, s, e in requests]
        if max_records is not None and (isinstance(max_records, bool) or not isinstance(max_records, int)
                                        or max_records < 0):
            raise InvalidInput(f"max_records must be an int >= 0, got {max_records!r}")
        return self._records(self._scan_many(reqs, max_records))

    def _scan_many(
        self, reqs: list[tuple[str, int, int, int | None]], max_records: int | None
    ) -> Iterator[tuple[_Scan, batch.Batch, int, int, int]]:
        if max_records == 0:
            return
        scans: list[_Scan] = []
        left = max_records
        for (t, p, s, e), r in self._resolve_all(reqs):
            if left is not None:
                e = s + left if e is None else min(e, s + left)
            sc = self._plan(t, p, s, e, r)
            if sc is None:
                continue
            scans.append(sc)
            if left is not None:
                left -= sc.hi - sc.start  # a scan yields every offset of [start, hi) once, or raises
                if left == 0:
                    break  # the chunks past the budget are not even resolved
        yield from self._stream(scans)

    def _resolve_all(
        self, reqs: list[tuple[str, int, int, int | None]]
    ) -> Iterator[tuple[tuple[str, int, int, int | None], _Resolved]]:
        """Each request with its resolution, :data:`RESOLVE_BATCH` per round trip, a
        chunk resolved only when it is reached."""
        for i in range(0, len(reqs), RESOLVE_BATCH):
            chunk = reqs[i : i + RESOLVE_BATCH]
            yield from zip(chunk, self._resolve(chunk), strict=True)

    def _records(self, batches: Iterator[tuple[_Scan, batch.Batch, int, int, int]]) -> Iterator[ConsumedRecord]:
        for sc, b, first, lo, hi in batches:
            ts, keys, values, headers = b.columns(lo - first, hi - first)
            # map() over the columns builds the records without a Python-level loop.
            yield from map(
                ConsumedRecord,
                repeat(sc.topic),
                repeat(sc.partition),
                count(lo),
                ts,
                keys if keys is not None else repeat(None),
                values,
                headers if headers is not None else repeat(()),
            )
            self.conn.metrics.read_records.inc(len(ts))

    def scan_batches(
        self, topic: str, partition: int, start: int = 0, end: int | None = None
    ) -> Iterator[tuple[int, batch.Batch, int, int]]:
        """Decoded bodies for the scan: ``(first_offset, batch, lo, hi)`` where records
        ``[lo, hi)`` of the scan are rows ``[lo - first_offset, hi - first_offset)`` of
        ``batch``. For columnar consumers (Spark) that skip per-record objects."""
        for _, b, first, lo, hi in self._batches(topic, partition, start, end):
            yield first, b, lo, hi

    def high_watermark(self, topic: str, partition: int) -> tuple[int, int]:
        """``(log_start_offset, next_offset)`` of the partition."""
        check_topic(topic)
        check_partition(topic, partition)
        self.conn.check_partition(topic, partition)
        c = read_control(self.conn, topic, partition).control
        return c.log_start_offset, c.next_offset

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        if self._owns_conn:
            self.conn.close()

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- resolution --------------------------------------------------------------
    def _check(self, topic: str, partition: int, start: int) -> tuple[str, int, int]:
        check_topic(topic)
        check_partition(topic, partition)
        if isinstance(start, bool) or not isinstance(start, int) or start < 0:
            raise InvalidInput(f"start offset must be an int >= 0, got {start!r}")
        self.conn.check_partition(topic, partition)
        return topic, partition, start

    def _resolve(self, reqs: Sequence[tuple[str, int, int, int | None]]) -> list[_Resolved]:
        """Each partition's control and its index page from ``start``, all in one round
        trip at one revision. The page is read before the control says where the
        partition ends; it costs nothing extra when there is nothing to read."""
        keys = self.conn.keys
        reads: list[Get] = []
        pages: list[int] = []
        for topic, partition, start, end in reqs:
            pages.append(1 if end == start + 1 else _INDEX_PAGE)
            reads.append(Get(keys.control(topic, partition)))
            reads.append(Get(keys.index(topic, partition, start), keys.index_range_end(topic, partition), pages[-1]))
        got = self.conn.etcd.get_many(reads)
        return [
            _Resolved(decode_control(reads[2 * i].key, got[2 * i][0] if got[2 * i] else None), got[2 * i + 1], page)
            for i, page in enumerate(pages)
        ]

    def _batches(
        self, topic: str, partition: int, start: int, end: int | None
    ) -> Iterator[tuple[_Scan, batch.Batch, int, int, int]]:
        self._check(topic, partition, start)
        [resolved] = self._resolve([(topic, partition, start, end)])
        sc = self._plan(topic, partition, start, end, resolved)
        if sc is not None:
            yield from self._stream([sc])

    def _plan(
        self, topic: str, partition: int, start: int, end: int | None, resolved: _Resolved
    ) -> _Scan | None:
        """A partition's scan from its resolution; ``None`` when there is nothing to
        read. Below the log start the scan raises :class:`OffsetOutOfRange` when its
        turn comes."""
        st = resolved.state
        ctl = st.control
        if start < ctl.log_start_offset:
            below = OffsetOutOfRange(topic, partition, start, ctl.log_start_offset)
            return _Scan(topic, partition, start, start + 1, lambda: _raising(below))
        hi = ctl.next_offset if end is None else min(end, ctl.next_offset)
        if start >= hi:
            return None
        if self.settle_pending and ctl.pending is not None:
            self._maybe_settle(topic, partition, st)
        return _Scan(topic, partition, start, hi, self._source(topic, partition, start, hi, resolved))

    def _source(
        self, topic: str, partition: int, start: int, hi: int, resolved: _Resolved
    ) -> Callable[[], Iterator[_Fetch]]:
        """The fetches of ``[start, hi)`` from a resolution, built anew on each call."""
        return lambda: self._fetches(self._slices(topic, partition, start, hi, resolved))

    def _stream(self, scans: list[_Scan]) -> Iterator[tuple[_Scan, batch.Batch, int, int, int]]:
        """Decoded slices of ``scans`` in turn, ``(scan, batch, first_offset, lo, hi)``:
        records ``[lo, hi)`` are rows ``[lo - first_offset, hi - first_offset)``. Up to
        ``read_prefetch`` GETs stay in flight, running on into the next scans."""
        inflight: deque[tuple[_Scan, _Fetch, Future[bytes]]] = deque()
        depth = max(1, self.config.read_prefetch)
        feeding = 0  # the scan whose fetches are queued next

        def top_up() -> None:
            nonlocal feeding
            while len(inflight) < depth and feeding < len(scans):
                sc = scans[feeding]
                if sc.failed is not None:  # its slices raised: nothing more of it, or after it
                    return
                try:
                    nxt = next(sc.fetches, None)
                except LlogError as exc:
                    # Raised when the consumer reaches this point of the scan, not before.
                    sc.failed = exc
                    return
                if nxt is None:
                    feeding += 1
                    continue
                inflight.append((sc, nxt, self._pool.submit(self._get, nxt)))

        try:
            while True:
                top_up()
                if not inflight:
                    failed = scans[feeding].failed if feeding < len(scans) else None
                    if failed is not None:
                        raise failed
                    return
                sc, f, fut = inflight.popleft()
                # Keep `depth` GETs in flight while this one is decoded and consumed.
                top_up()
                try:
                    data = fut.result()
                except ObjectNotFound:
                    # Compaction moved these records to a new blob and vacuum deleted the
                    # old one after this scan resolved it: resolve again from where the
                    # scan is (once per object; a blob the index still names is corrupt).
                    if f.data_key in sc.gone:
                        raise
                    sc.gone.add(f.data_key)
                    for _, _, later in inflight:
                        later.cancel()
                    inflight.clear()
                    at = scans.index(sc)
                    for later_sc in scans[at + 1 : feeding + 1]:
                        later_sc.restart()  # nothing of it was yielded yet
                    feeding = at
                    [resolved] = self._resolve([(sc.topic, sc.partition, sc.done, sc.hi)])
                    lso = resolved.state.control.log_start_offset
                    if sc.done < lso:
                        raise OffsetOutOfRange(sc.topic, sc.partition, sc.done, lso) from None
                    sc.source = self._source(sc.topic, sc.partition, sc.done, sc.hi, resolved)
                    sc.restart()  # whatever its old resolution raised is moot now
                    continue
                except StoreError as exc:
                    # A range past the object's end means the blob is shorter than the
                    # index says: damage, not an outage.
                    short = self._past_end(f)
                    if short is None:
                        raise
                    raise short from exc
                for s in f.slices:
                    rel = s.byte_offset - f.byte_offset
                    body = memoryview(data)[rel : rel + s.byte_length]
                    try:
                        b = batch.decode(body)
                    except batch.BatchFormatError as exc:
                        raise CorruptBlob(s.data_key, s.byte_offset, s.byte_length, str(exc)) from exc
                    if len(b) != s.count:
                        raise CorruptBlob(
                            s.data_key, s.byte_offset, s.byte_length,
                            f"body holds {len(b)} records, index says {s.count}",
                        )
                    # A compacted entry may overlap WAL entries already yielded (compaction
                    # between its index overwrite and DELETING_OLD): skip the overlap.
                    lo = max(sc.done, s.first_offset)
                    top = min(sc.hi, s.first_offset + s.count)
                    if lo < top:
                        sc.done = top
                        yield sc, b, s.first_offset, lo, top
        finally:
            for _, _, fut in inflight:
                fut.cancel()

    def _get(self, f: _Fetch) -> bytes:
        data = self.conn.store.get_range(f.data_key, f.byte_offset, f.byte_length)
        self.conn.metrics.read_bytes.inc(len(data))
        return data

    def _past_end(self, f: _Fetch) -> CorruptBlob | None:
        """:class:`CorruptBlob` for the first slice of ``f`` past the end of its object."""
        info = self.conn.store.head(f.data_key)
        if info is None:
            return None
        for s in f.slices:
            if s.byte_offset + s.byte_length > info.size:
                return CorruptBlob(
                    s.data_key, s.byte_offset, s.byte_length, f"the object ends at byte {info.size}"
                )
        return None

    def _maybe_settle(self, topic: str, partition: int, st: ControlState) -> None:
        try:
            settle(self.conn, topic, partition, min_age_ms=self.config.settle_after_ms, state=st)
        except LlogError as exc:  # best effort: the read itself does not need it
            log.debug("settle of %s/%s skipped: %s", topic, partition, exc)

    def _slices(
        self, topic: str, partition: int, start: int, hi: int, resolved: _Resolved
    ) -> Iterator[SliceRef]:
        """Slices covering ``[start, hi)`` in order, each record covered exactly once
        by the first slice that holds it (a compaction in flight can make index entries
        overlap; the overlap is skipped). ``resolved`` holds the control state and the
        index page from ``start`` (:meth:`_resolve`)."""
        keys, etcd = self.conn.keys, self.conn.etcd
        end_key = keys.index_range_end(topic, partition)
        nxt = start
        cursor = keys.index(topic, partition, start)
        first: list[KV] | None = resolved.first_page
        page = resolved.page
        pending = resolved.state.control.pending
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
                yield SliceRef(e_start, e.msg_count, e.data_key, e.byte_offset, e.byte_length)
                nxt = e_end + 1
                if nxt >= hi:
                    return
            else:
                if len(kvs) == page:
                    cursor = kvs[-1].key + "\0"
                    page = _INDEX_PAGE
                    continue
            # Index exhausted (or a gap) before hi: the rest must be the pending slice.
            if pending is not None and pending.start_offset <= nxt <= pending.end_offset:
                yield SliceRef(
                    pending.start_offset, pending.msg_count, pending.data_key,
                    pending.byte_offset, pending.byte_length,
                )
                nxt = pending.end_offset + 1
                continue
            lso = read_control(self.conn, topic, partition).control.log_start_offset
            if nxt < lso:
                raise OffsetOutOfRange(topic, partition, nxt, lso)
            raise CorruptMetadata(
                keys.index(topic, partition, nxt), f"no index entry or pending covers offset {nxt}"
            )

    def _fetches(self, slices: Iterator[SliceRef]) -> Iterator[_Fetch]:
        """Group consecutive slices of one object, near each other, into one GET."""
        gap = self.config.read_coalesce_gap_bytes
        cap = self.config.read_max_fetch_bytes
        group: list[SliceRef] = []
        for s in slices:
            if group:
                first, last = group[0], group[-1]
                last_end = last.byte_offset + last.byte_length
                if (
                    s.data_key == last.data_key
                    and last_end <= s.byte_offset <= last_end + gap
                    and s.byte_offset + s.byte_length - first.byte_offset <= cap
                ):
                    group.append(s)
                    continue
                yield _group(group)
            group = [s]
        if group:
            yield _group(group)


def _raising(exc: LlogError) -> Iterator[_Fetch]:
    raise exc
    yield  # a generator: raises when first advanced


def _group(slices: list[SliceRef]) -> _Fetch:
    first, last = slices[0], slices[-1]
    return _Fetch(
        first.data_key,
        first.byte_offset,
        last.byte_offset + last.byte_length - first.byte_offset,
        tuple(slices),
    )
