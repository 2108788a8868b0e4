"""The ``llog`` PySpark data source: batch reads, streaming reads and writes.

    >>> from llog.spark import register                            # doctest: +SKIP
    >>> register(spark)
    >>> df = (spark.read.format("llog").option("topic", "orders")
    ...       .option("etcdEndpoints", "127.0.0.1:2379").option("objectStore", "s3://b")
    ...       .load())

Planning (``partitions``, stream offsets) runs on the driver and reads etcd only. Each
input partition carries plain data — topic, partition, an offset range and the
connection config as a dict — and the task opens its own clients in ``read()``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from llog.codec.batch import Batch
from llog.connection import Connection
from llog.errors import ConfigError, CorruptMetadata
from llog.reader import Reader
from llog.spark.connections import worker_connection
from llog.spark.options import (
    SourceOptions,
    config_to_dict,
    parse_sink_options,
    parse_source_options,
)
from llog.spark.planning import (
    OffsetRange,
    Offsets,
    batch_offsets,
    offsets_from_json,
    offsets_to_json,
    plan,
    rate_limit,
    read_controls,
    resolve_offsets,
    subscribed_partitions,
)
from llog.spark.schema import SPARK_SCHEMA, coalesce, record_batch
from llog.spark.sink import LlogBatchWriter, LlogStreamWriter, SinkColumns

log = logging.getLogger(__name__)

#: What :meth:`llog.reader.Reader.scan_batches` yields: ``(first_offset, batch, lo, hi)``.
ScanPiece = tuple[int, Batch, int, int]


class LlogInputPartition(InputPartition):  # type: ignore[misc,unused-ignore]
    """The offset ranges one task reads, in order, and how to connect."""

    def __init__(self, ranges: tuple[OffsetRange, ...], config: dict[str, Any]) -> None:
        super().__init__(tuple((r.topic, r.partition, r.start, r.end) for r in ranges))
        self.ranges = ranges
        self.config = config


def read_partition(part: InputPartition) -> Iterator[pa.RecordBatch]:
    """The rows of one input partition as Arrow record batches (runs in the task)."""
    if not isinstance(part, LlogInputPartition):  # Spark's placeholder when nothing was planned
        return
    conn = worker_connection(part.config)
    with Reader(conn, settle_pending=False) as reader:
        for r in part.ranges:
            # How far the scan got, by offset: a compacted topic's range holds fewer
            # records than offsets (spec §10.2), but its scan still covers them all.
            covered = [r.start]
            scan = reader.scan_batches(r.topic, r.partition, r.start, r.end)
            yield from coalesce(record_batch(r.topic, r.partition, *s) for s in _covering(scan, covered))
            if covered[0] != r.end:
                raise CorruptMetadata(
                    conn.keys.control(r.topic, r.partition),
                    f"read [{r.start}, {covered[0]}) of [{r.start}, {r.end}); the partition ends earlier",
                )


def _covering(scan: Iterator[ScanPiece], covered: list[int]) -> Iterator[ScanPiece]:
    """``scan``'s pieces, keeping in ``covered[0]`` the offset the last one reaches."""
    for piece in scan:
        covered[0] = piece[3]
        yield piece


def _input_partitions(conn: Connection, start: Offsets, end: Offsets, o: SourceOptions) -> list[LlogInputPartition]:
    """The input partitions of ``[start, end)`` as ``o``'s split and pack options plan them."""
    cfg = config_to_dict(o.config)
    ranges = plan(conn, start, end, min_partitions=o.min_partitions, max_records=o.max_records_per_partition,
                  min_records=o.min_records_per_partition)
    return [LlogInputPartition(group, cfg) for group in ranges]


def _check_schema(schema: StructType) -> None:
    if [(f.name, f.dataType) for f in schema.fields] != [(f.name, f.dataType) for f in SPARK_SCHEMA.fields]:
        raise ConfigError(
            f"the llog source has a fixed schema {SPARK_SCHEMA.simpleString()}, not {schema.simpleString()}"
        )


class LlogBatchReader(DataSourceReader):  # type: ignore[misc,unused-ignore]
    """``spark.read.format("llog")``: plans on the driver, reads in the tasks."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> list[LlogInputPartition]:
        o = self.options
        with Connection(o.config) as conn:
            start, end = batch_offsets(conn, o)
            parts = _input_partitions(conn, start, end, o)
        log.info("llog batch read: %d input partitions over %d topic-partitions", len(parts), len(end))
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition)


class LlogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc,unused-ignore]
    """``spark.readStream.format("llog")``.

    An offset is ``{"topic": {"partition": next offset to read}}``. Everything Spark
    re-runs after a restart (``partitions`` and ``read`` for a checkpointed pair of
    offsets) depends only on those offsets, so a replayed micro-batch reads exactly the
    same records. A partition that appears later (a new topic matching the pattern) is
    first reported at its log start offset and read from there in the next batch.
    """

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._conn: Connection | None = None
        self._cap: Offsets | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Shipped to the tasks for read(): never with a live client.
        state = dict(self.__dict__)
        state["_conn"] = None
        return state

    def _connection(self) -> Connection:
        if self._conn is None:
            self._conn = Connection(self.options.config)
        return self._conn

    def _next_offsets(self) -> tuple[Offsets, Offsets]:
        """``(next offset, log start)`` of every subscribed partition, now."""
        conn = self._connection()
        controls = read_controls(conn, subscribed_partitions(conn, self.options.subscription))
        return (
            {tp: c.next_offset for tp, c in controls.items()},
            {tp: c.log_start_offset for tp, c in controls.items()},
        )

    def initialOffset(self) -> dict[str, dict[str, int]]:
        o = self.options
        conn = self._connection()
        controls = read_controls(conn, subscribed_partitions(conn, o.subscription))
        start = resolve_offsets(
            conn, o.starting, controls, what="startingOffsets", fail_on_data_loss=o.fail_on_data_loss
        )
        return offsets_to_json(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.options.max_offsets_per_trigger
        return ReadAllAvailable() if n is None else ReadMaxRows(n)

    def prepareForTriggerAvailableNow(self) -> None:
        self._cap = self._next_offsets()[0]

    def latestOffset(self, start: dict[str, dict[str, int]], limit: ReadLimit) -> dict[str, dict[str, int]]:
        begin = offsets_from_json(start)
        nxt, log_start = self._next_offsets()
        latest: Offsets = dict(begin)  # a partition that vanished keeps its place
        for tp, n in nxt.items():
            if tp not in begin:
                latest[tp] = log_start[tp]
                continue
            if self._cap is not None:
                n = min(n, self._cap.get(tp, begin[tp]))
            if n < begin[tp]:
                raise ConfigError(
                    f"stream offset {begin[tp]} of {tp[0]}/{tp[1]} is past its next offset {n}: "
                    "the checkpoint belongs to another llog deployment or root prefix"
                )
            latest[tp] = n
        if isinstance(limit, ReadMaxRows):
            latest = rate_limit(begin, latest, limit.max_rows)
        return offsets_to_json(latest)

    def partitions(
        self, start: dict[str, dict[str, int]], end: dict[str, dict[str, int]]
    ) -> list[LlogInputPartition]:
        o = self.options
        begin, stop = offsets_from_json(start), offsets_from_json(end)
        conn = self._connection()
        if not o.fail_on_data_loss:
            # Records removed by retention since the offsets were logged are skipped.
            controls = read_controls(conn, sorted(tp for tp in stop if tp in begin))
            begin = {tp: max(off, controls[tp].log_start_offset) if tp in controls else off
                     for tp, off in begin.items()}
            stop = {tp: max(off, begin.get(tp, off)) for tp, off in stop.items()}
        return _input_partitions(conn, begin, stop, o)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition)

    def commit(self, end: dict[str, dict[str, int]]) -> None:
        log.debug("llog stream committed through %s", end)

    def stop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class LlogDataSource(DataSource):  # type: ignore[misc,unused-ignore]
    """The ``llog`` format: ``spark.read``, ``spark.readStream``, ``df.write`` and
    ``df.writeStream``. Options: see :mod:`llog.spark.options` and docs/spark.md."""

    @classmethod
    def name(cls) -> str:
        return "llog"

    def schema(self) -> StructType:
        return SPARK_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        _check_schema(schema)
        return LlogBatchReader(parse_source_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        _check_schema(schema)
        return LlogStreamReader(parse_source_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise ConfigError("an llog topic is append-only: use mode('append'), not overwrite")
        return LlogBatchWriter(parse_sink_options(self.options), SinkColumns.from_schema(schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        # Complete output mode (overwrite) appends each result again, as Kafka's sink does.
        return LlogStreamWriter(parse_sink_options(self.options), SinkColumns.from_schema(schema))


def register(spark: Any) -> None:
    """Register the ``llog`` format with ``spark`` (a ``SparkSession``)."""
    spark.dataSource.register(LlogDataSource)
