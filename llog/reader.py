"""The read path (protocol/README.md, "Read resolution").

An offset resolves through a ceiling lookup on the partition's index keys (the first
key whose end offset is >= the offset), or the control's ``pending`` for the newest
committed append. Scans walk the index in pages, coalesce nearby slices of one object
into one range GET, keep a bounded number of GETs in flight, and yield records in
offset order. :class:`Reader` is the façade over the pipeline in :mod:`llog.scan`.
"""

from __future__ import annotations

import logging
from collections.abc import Generator, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

from llog.codec import batch
from llog.codec.bodies import Body
from llog.config import LlogConfig
from llog.connection import Connection
from llog.errors import InvalidInput
from llog.names import check_partition, check_topic
from llog.records import ConsumedRecord
from llog.scan import parquet_ranges
from llog.scan.fetching import FetchPipeline
from llog.scan.iteration import ScanBatch, scan_batches, to_records
from llog.scan.partition import PartitionScan
from llog.scan.read_ahead import ReadAhead
from llog.scan.resolution import Resolver, ScanRequest
from llog.scan.slices import Fetch
from llog.state.control import read_control

log = logging.getLogger(__name__)


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
        self._resolver = Resolver(self.conn, settle_pending=settle_pending)
        cfg = self.config
        self._pool = ThreadPoolExecutor(cfg.read_max_inflight, thread_name_prefix="llog-read")
        self._ahead = ReadAhead(cfg.read_prefetch, cfg.read_max_inflight, self.conn.metrics.read_ahead_depth)

    @property
    def settle_pending(self) -> bool:
        """Whether a scan settles a pending older than ``settle_after_ms`` it meets."""
        return self._resolver.settle_pending

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
        return to_records(self._batches(topic, partition, start, end), self.conn.metrics.read_records)

    def scan_many(
        self, requests: Sequence[ScanRequest], *, max_records: int | None = None,
        progress: dict[tuple[str, int], int] | None = None,
    ) -> Iterator[ConsumedRecord]:
        """:meth:`scan` of each ``(topic, partition, start, end)`` in turn, at most
        ``max_records`` in all: each partition's scan ends where the records left in
        that budget end, so no GET is made for records past it. Every partition's
        control and first index page are read up front, in one etcd round trip per
        :data:`~llog.scan.resolution.RESOLVE_BATCH` partitions instead of one per
        partition (a consumer polling many partitions, most of them idle, costs etcd
        one read per poll), and the range GETs run ahead across partition boundaries,
        so the next partition's first slices are on their way while this one's last are
        consumed. A bad request raises before anything is read; a partition's
        :class:`OffsetOutOfRange` is raised when its turn comes. The records yielded
        before an error are valid and complete up to it: a caller that stops at the
        error keeps them (:meth:`llog.groups.Consumer.poll` returns them and raises the
        error on its next poll).

        ``progress``, if given, receives for each partition scanned the offset its scan
        got to: past its last record, and past offsets a key-compacted topic no longer
        holds (spec §10.2), so a consumer whose budget fell in such a gap moves on."""
        reqs = [(*self._resolver.check(t, p, s), e) for t, p, s, e in requests]
        if max_records is not None and (isinstance(max_records, bool) or not isinstance(max_records, int)
                                        or max_records < 0):
            raise InvalidInput(f"max_records must be an int >= 0, got {max_records!r}")
        return to_records(self._scan_many(reqs, max_records, progress), self.conn.metrics.read_records)

    def scan_batches(
        self, topic: str, partition: int, start: int = 0, end: int | None = None
    ) -> Iterator[tuple[int, batch.Batch, int, int]]:
        """Decoded bodies for the scan: ``(first_offset, batch, lo, hi)`` where records
        ``[lo, hi)`` of the scan are the rows ``batch.span(lo - first_offset, hi -
        first_offset)`` of ``batch``, at ``batch.offsets(...)`` (consecutive unless the
        body is key-compacted). For columnar consumers (Spark) that skip per-record
        objects."""
        for _, b, first, lo, hi in self._batches(topic, partition, start, end):
            assert isinstance(b, batch.Batch)
            yield first, b, lo, hi

    def scan_bodies(
        self, topic: str, partition: int, start: int = 0, end: int | None = None
    ) -> Generator[tuple[int, Body, int, int], None, None]:
        """:meth:`scan_batches`, with bodies of Kafka record batches left undecoded
        (:class:`~llog.codec.kafka_body.KafkaBody`), for the Kafka Fetch that serves
        them as they were produced."""
        for _, b, first, lo, hi in self._batches(topic, partition, start, end, lazy_kafka=True):
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

    # -- the pipeline ----------------------------------------------------------
    def _batches(
        self, topic: str, partition: int, start: int, end: int | None, *, lazy_kafka: bool = False
    ) -> Iterator[ScanBatch]:
        # A generator: a bad request raises when the scan is first advanced.
        self._resolver.check(topic, partition, start)
        [resolution] = self._resolver.resolve([(topic, partition, start, end)])
        sc = self._resolver.plan(topic, partition, start, end, resolution)
        if sc is not None:
            yield from self._stream([sc], lazy_kafka=lazy_kafka)

    def _scan_many(
        self, reqs: list[ScanRequest], max_records: int | None, progress: dict[tuple[str, int], int] | None
    ) -> Iterator[ScanBatch]:
        scans = self._resolver.plan_many(reqs, max_records)
        try:
            yield from self._stream(scans)
        finally:
            if progress is not None:
                for sc in scans:
                    if sc.done > sc.start:
                        progress[(sc.topic, sc.partition)] = sc.done

    def _stream(self, scans: list[PartitionScan], *, lazy_kafka: bool = False) -> Iterator[ScanBatch]:
        pipeline = FetchPipeline(scans, self._get, self._pool, self.conn, self._ahead, self.config.read_inflight_bytes)
        return scan_batches(pipeline, self._resolver, lazy_kafka=lazy_kafka)

    def _get(self, f: Fetch) -> bytes:
        """The bytes of one range GET (run on the pool): small reads of WAL blobs through
        the connection's blob cache, the row groups a scan needs of a Parquet file it
        starts inside, the rest from storage."""
        cache = self.conn.blob_cache
        if cache.covers(f.data_key, f.byte_length):
            data = cache.read(f.data_key, f.byte_offset, f.byte_length)
        elif f.skip_rows and parquet_ranges.worth_it(f.byte_length, f.slices[0].count, f.skip_rows):
            data, fetched = parquet_ranges.fetch_from(self.conn.store, f.data_key, f.byte_length, f.skip_rows)
            self.conn.metrics.read_bytes.inc(fetched)
            return data
        else:
            data = self.conn.store.get_range(f.data_key, f.byte_offset, f.byte_length)
        self.conn.metrics.read_bytes.inc(len(data))
        return data
