"""The row layout of the ``llog`` Spark source: the same columns as Spark's Kafka source,
and the vectorized conversion of decoded bodies into Arrow record batches.

A body's columns (timestamps, keys, values, headers) are already Arrow buffers
(:meth:`llog.codec.batch.Batch.to_arrow`); the columns a body does not hold (topic,
partition, offset, timestampType) are built from cached constant arrays, so no Python
code runs per record.
"""

from __future__ import annotations

import threading
from array import array
from collections.abc import Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from llog.codec.batch import Batch

#: Spark SQL schema, as Spark's Kafka source declares it.
SPARK_SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
        StructField(
            "headers",
            ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())])),
        ),
    ]
)

#: Kafka's timestamp type codes: 0 = create time, 1 = log append time. llog keeps one
#: timestamp per record (producer-set, or stamped at append when the producer gave none)
#: and does not record which, so every row reports create time.
CREATE_TIME = 0

HEADER_STRUCT = pa.struct([("key", pa.string()), ("value", pa.binary())])
# Spark's Arrow conversion names a list's element field "element"; the batch must match
# the expected schema exactly, field names included.
HEADERS_TYPE = pa.list_(pa.field("element", HEADER_STRUCT))
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
ARROW_SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", TIMESTAMP_TYPE),
        ("timestampType", pa.int32()),
        ("headers", HEADERS_TYPE),
    ]
)

#: Slices smaller than this are merged before they go to Spark: every record batch is
#: one Arrow IPC message to the JVM, and a log of tiny appends would otherwise pay that
#: per handful of rows.
MIN_BATCH_ROWS = 8192


class _Constants:
    """Per-process cache of long constant columns, handed out as zero-copy slices."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._iota = pa.array([], pa.int64())
        self._strings: dict[str, pa.Array] = {}
        self._ints: dict[int, pa.Array] = {}

    def offsets(self, lo: int, hi: int) -> pa.Array:
        """int64 ``[lo, hi)``."""
        n = hi - lo
        with self._lock:
            if len(self._iota) < n:
                size = max(n, 2 * len(self._iota), 65536)
                self._iota = pa.Array.from_buffers(
                    pa.int64(), size, [None, pa.py_buffer(array("q", range(size)))]
                )
            iota = self._iota
        return pc.add(iota.slice(0, n), pa.scalar(lo, pa.int64()))

    def string(self, value: str, n: int) -> pa.Array:
        with self._lock:
            cached = self._strings.get(value)
            if cached is None or len(cached) < n:
                cached = pa.repeat(pa.scalar(value, pa.string()), max(n, 65536))
                self._strings[value] = cached
        return cached.slice(0, n)

    def int32(self, value: int, n: int) -> pa.Array:
        with self._lock:
            cached = self._ints.get(value)
            if cached is None or len(cached) < n:
                cached = pa.repeat(pa.scalar(value, pa.int32()), max(n, 65536))
                self._ints[value] = cached
        return cached.slice(0, n)


_CONSTANTS = _Constants()


def record_batch(
    topic: str, partition: int, first_offset: int, body: Batch, lo: int, hi: int
) -> pa.RecordBatch:
    """Rows for offsets ``[lo, hi)`` of a decoded body whose first record is at
    ``first_offset``, in :data:`ARROW_SCHEMA` (a key-compacted body's gaps skipped)."""
    cols = body.to_arrow()
    start, stop = body.span(lo - first_offset, hi - first_offset)
    n = stop - start
    if body.deltas is None:
        offsets = _CONSTANTS.offsets(lo, hi)
    else:
        offsets = pa.array(body.offsets(first_offset, start, stop), pa.int64())
    ts_ms = cols["timestamp"].slice(start, n)
    return pa.RecordBatch.from_arrays(
        [
            cols["key"].slice(start, n),
            cols["value"].slice(start, n),
            _CONSTANTS.string(topic, n),
            _CONSTANTS.int32(partition, n),
            offsets,
            ts_ms.cast(pa.timestamp("ms", tz="UTC")).cast(TIMESTAMP_TYPE),
            _CONSTANTS.int32(CREATE_TIME, n),
            cols["headers"].slice(start, n).cast(HEADERS_TYPE),
        ],
        schema=ARROW_SCHEMA,
    )


def coalesce(batches: Iterable[pa.RecordBatch], min_rows: int = MIN_BATCH_ROWS) -> Iterator[pa.RecordBatch]:
    """Pass big batches through untouched; merge runs of small ones to ``min_rows``."""
    small: list[pa.RecordBatch] = []
    rows = 0
    for b in batches:
        if b.num_rows >= min_rows and not small:
            yield b
            continue
        small.append(b)
        rows += b.num_rows
        if rows >= min_rows:
            yield _merge(small)
            small, rows = [], 0
    if small:
        yield _merge(small)


def _merge(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    if len(batches) == 1:
        return batches[0]
    table = pa.Table.from_batches(batches, schema=ARROW_SCHEMA).combine_chunks()
    return table.to_batches(max_chunksize=table.num_rows)[0]
