"""Record iteration (protocol/README.md §9 steps 8, 10 and 11): fetched bytes decoded
into batches in offset order, each record once, and the batches into records."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import count, repeat

from prometheus_client import Counter

from llog.codec import bodies
from llog.codec.batch import Columns
from llog.errors import CorruptBlob, ObjectNotFound
from llog.records import ConsumedRecord, new_consumed_record
from llog.scan.fetching import FetchPipeline
from llog.scan.partition import PartitionScan
from llog.scan.resolution import Resolver
from llog.scan.slices import Fetch

#: ``(scan, batch, first_offset, lo, hi)``: records ``[lo, hi)`` of the scan are rows
#: ``[lo - first_offset, hi - first_offset)`` of ``batch``.
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
                yield from decode_fetch(sc, f, data, lazy_kafka=lazy_kafka)
            except CorruptBlob:
                pipeline.forget(f.data_key)  # a retry reads the object again, not the cache
                raise
    finally:
        pipeline.close()


def decode_fetch(sc: PartitionScan, f: Fetch, data: bytes, *, lazy_kafka: bool = False) -> Iterator[ScanBatch]:
    """The slices of ``f`` decoded from ``data``, less what ``sc`` already yielded."""
    for s in f.slices:
        rel = s.byte_offset - f.byte_offset
        body = memoryview(data)[rel : rel + s.byte_length]
        first_row = 0
        b: bodies.Body
        try:
            if f.skip_rows:  # only the row groups from the scan's start on (Fetch)
                b, first_row = bodies.decode_from(body, f.skip_rows)
            else:
                b = bodies.open_body(body) if lazy_kafka else bodies.decode(body)
        except bodies.BatchFormatError as exc:
            raise CorruptBlob(s.data_key, s.byte_offset, s.byte_length, str(exc)) from exc
        if len(b) != s.count - first_row:
            raise CorruptBlob(
                s.data_key, s.byte_offset, s.byte_length,
                f"body holds {len(b) + first_row} records, index says {s.count}",
            )
        first = s.first_offset + first_row
        # A compacted entry may overlap WAL entries already yielded (compaction
        # between its index overwrite and DELETING_OLD): skip the overlap.
        lo = max(sc.done, first)
        top = min(sc.hi, s.first_offset + s.count)
        if lo < top:
            sc.done = top
            yield sc, b, first, lo, top


def to_records(batches: Iterator[ScanBatch], read_records: Counter) -> Iterator[ConsumedRecord]:
    """The records of ``batches``, counted in ``read_records``."""
    for sc, b, first, lo, hi in batches:
        cols = b.columns(lo - first, hi - first)
        yield from records_of(sc.topic, sc.partition, lo, cols)
        read_records.inc(len(cols[0]))


def records_of(topic: str, partition: int, first_offset: int, cols: Columns) -> Iterator[ConsumedRecord]:
    """``cols`` (a body's :meth:`~llog.codec.batch.Batch.columns`) as records, the
    first at ``first_offset``."""
    ts, keys, values, headers = cols
    # map() over the columns builds the records without a Python-level loop.
    return map(
        new_consumed_record,
        repeat(topic),
        repeat(partition),
        count(first_offset),
        ts,
        keys if keys is not None else repeat(None),
        values,
        headers if headers is not None else repeat(()),
    )
