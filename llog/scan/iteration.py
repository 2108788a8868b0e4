"""Record iteration (protocol/README.md §9 steps 8, 10 and 11): fetched bytes decoded
into batches in offset order, each record once, and the batches into records."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from itertools import accumulate, repeat
from typing import Any

from prometheus_client import Counter

from llog.codec import bodies, parquet_body
from llog.codec.batch import Columns
from llog.errors import CorruptBlob, ObjectNotFound
from llog.records import ConsumedRecord, new_consumed_record
from llog.scan.fetching import FetchPipeline
from llog.scan.partition import PartitionScan
from llog.scan.resolution import Resolver
from llog.scan.slices import Fetch, SliceRef

#: Row groups of a Parquet file decoded ahead of the one being consumed.
GROUPS_AHEAD = 2
#: Parquet files smaller than this are read whole at once: a file of several row groups
#: holds several ``ROW_GROUP_BYTES`` of values, and reading its footer first costs a
#: small file a fifth of its decode.
GROUPED_MIN_BYTES = 64 * 1024
#: Runs a function on a thread pool: ``submit(fn, *args)`` (``ThreadPoolExecutor.submit``).
Submit = Callable[..., Future[bodies.Body]]

#: ``(scan, batch, first_offset, lo, hi)``: records ``[lo, hi)`` of the scan are the
#: rows ``batch.span(lo - first_offset, hi - first_offset)`` of ``batch`` (every row
#: between, unless a key-compacted body left gaps).
ScanBatch = tuple[PartitionScan, bodies.Body, int, int, int]


def scan_batches(pipeline: FetchPipeline, resolver: Resolver, *, lazy_kafka: bool = False) -> Iterator[ScanBatch]:
    """The decoded slices of the pipeline's scans in turn. A GET that finds its object
    vacuumed re-resolves its scan from where it is, once per object (a blob the index
    still names after that is gone for good). ``lazy_kafka``: Kafka batches come
    undecoded (:class:`~llog.codec.kafka_body.KafkaBody`), for a caller that serves
    them as they are and maps their decode errors itself."""
    try:
        while (taken := pipeline.take()) is not None:
            sc, f, fut = taken
            try:
                data = pipeline.bytes_of(f, fut)
            except ObjectNotFound:
                # Compaction moved these records to a new blob and vacuum deleted the
                # old one after this scan resolved it.
                pipeline.forget(f.data_key)
                if f.data_key in sc.gone:
                    raise
                sc.gone.add(f.data_key)
                pipeline.restart_from(sc)
                resolver.re_resolve(sc)
                continue
            try:
                yield from decode_fetch(sc, f, data, lazy_kafka=lazy_kafka, submit=pipeline.submit)
            except CorruptBlob:
                pipeline.forget(f.data_key)  # a retry reads the object again, not the cache
                raise
    finally:
        pipeline.close()


def decode_fetch(
    sc: PartitionScan, f: Fetch, data: bytes, *, lazy_kafka: bool = False, submit: Submit | None = None
) -> Iterator[ScanBatch]:
    """The slices of ``f`` decoded from ``data``, less what ``sc`` already yielded.
    With ``submit`` (a thread pool's), a Parquet file of several row groups comes group
    by group (:func:`_parquet_groups`)."""
    for s in f.slices:
        rel = s.byte_offset - f.byte_offset
        body = memoryview(data)[rel : rel + s.byte_length]
        footer = None
        if submit is not None and len(body) >= GROUPED_MIN_BYTES and bytes(body[:4]) == parquet_body.MAGIC:
            footer, rows = _row_groups(s, body)
            if len(rows) > 1:
                yield from _parquet_groups(sc, s, body, footer, rows, f.skip_rows, submit)
                continue
        first_row = 0
        b: bodies.Body
        try:
            if footer is not None:  # a Parquet file of one row group, its footer read above
                b = parquet_body.decode_group(body, 0, footer)
            elif f.skip_rows:  # only the row groups from the scan's start on (Fetch)
                b, first_row = bodies.decode_from(body, f.skip_rows)
            else:
                b = bodies.open_body(body) if lazy_kafka else bodies.decode(body)
        except bodies.BatchFormatError as exc:
            raise CorruptBlob(s.data_key, s.byte_offset, s.byte_length, str(exc)) from exc
        if b.deltas is not None and b.extent > s.count:  # key-compacted: gaps, none past the entry
            raise CorruptBlob(s.data_key, s.byte_offset, s.byte_length,
                              f"body's records span {b.extent} offsets, index says {s.count}")
        if b.deltas is None and len(b) != s.count - first_row:
            raise CorruptBlob(
                s.data_key, s.byte_offset, s.byte_length,
                f"body holds {len(b) + first_row} records, index says {s.count}",
            )
        if (got := _unseen(sc, b, s.first_offset + first_row, s.first_offset + s.count)) is not None:
            yield got


def _unseen(sc: PartitionScan, b: bodies.Body, first: int, end: int) -> ScanBatch | None:
    """Records ``[first, end)`` of ``b`` (its first at ``first``) less those ``sc``
    already yielded or will not yield, marked as yielded; ``None`` if nothing is left.
    A compacted entry may overlap WAL entries already yielded (compaction between its
    index overwrite and DELETING_OLD): the overlap is skipped."""
    lo, top = max(sc.done, first), min(sc.hi, end)
    if lo >= top:
        return None
    sc.done = top
    return sc, b, first, lo, top


def _row_groups(s: SliceRef, body: memoryview) -> tuple[Any, list[int]]:
    """The footer of the Parquet file ``s`` and the rows of each of its row groups,
    which must add up to its count."""
    try:
        footer = parquet_body.footer(body)
    except bodies.BatchFormatError as exc:
        raise CorruptBlob(s.data_key, s.byte_offset, s.byte_length, str(exc)) from exc
    rows = parquet_body.row_group_rows(footer)
    if sum(rows) != s.count:
        raise CorruptBlob(s.data_key, s.byte_offset, s.byte_length,
                          f"body holds {sum(rows)} records, index says {s.count}")
    return footer, rows


def _parquet_groups(
    sc: PartitionScan, s: SliceRef, body: memoryview, footer: Any, rows: list[int], skip_rows: int, submit: Submit
) -> Iterator[ScanBatch]:
    """The row groups of a Parquet file that the scan still needs, in order, each
    decoded on the reader's threads up to :data:`GROUPS_AHEAD` ahead: pyarrow lets go of
    the GIL while it decodes, so the next groups decode while this one's records are
    built and consumed (a file the compactor writes holds a few groups of ~4 MiB), and
    groups past the scan's end are not decoded at all."""
    starts = list(accumulate(rows, initial=s.first_offset))  # group g: offsets [starts[g], starts[g + 1])
    begin = max(sc.done, s.first_offset + skip_rows)
    wanted = iter([g for g in range(len(rows)) if starts[g + 1] > begin and starts[g] < sc.hi])
    window: deque[tuple[int, Future[bodies.Body]]] = deque()

    def top_up() -> None:
        while len(window) < GROUPS_AHEAD and (g := next(wanted, None)) is not None:
            window.append((g, submit(parquet_body.decode_group, body, g, footer)))

    try:
        top_up()
        while window:
            g, fut = window.popleft()
            top_up()
            try:
                b = fut.result()
            except bodies.BatchFormatError as exc:
                raise CorruptBlob(s.data_key, s.byte_offset, s.byte_length, f"row group {g}: {exc}") from exc
            if len(b) != rows[g]:
                raise CorruptBlob(s.data_key, s.byte_offset, s.byte_length,
                                  f"row group {g} holds {len(b)} records, its footer says {rows[g]}")
            if (got := _unseen(sc, b, starts[g], starts[g + 1])) is not None:
                yield got
    finally:
        for _, fut in window:
            fut.cancel()


def to_records(batches: Iterator[ScanBatch], read_records: Counter) -> Iterator[ConsumedRecord]:
    """The records of ``batches``, counted in ``read_records``."""
    for sc, b, first, lo, hi in batches:
        start, stop = b.span(lo - first, hi - first)
        cols = b.columns(start, stop)
        yield from records_of(sc.topic, sc.partition, b.offsets(first, start, stop), cols)
        read_records.inc(len(cols[0]))


def records_of(topic: str, partition: int, offsets: Iterable[int], cols: Columns) -> Iterator[ConsumedRecord]:
    """``cols`` (a body's :meth:`~llog.codec.batch.Batch.columns`) as records at
    ``offsets`` (``count(first)`` for consecutive ones)."""
    ts, keys, values, headers = cols
    # map() over the columns builds the records without a Python-level loop.
    return map(
        new_consumed_record,
        repeat(topic),
        repeat(partition),
        offsets,
        ts,
        keys if keys is not None else repeat(None),
        values,
        headers if headers is not None else repeat(()),
    )
