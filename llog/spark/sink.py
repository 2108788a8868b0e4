"""``df.write.format("llog")`` and ``df.writeStream.format("llog")``.

A batch write needs ``.mode("append")``: Spark refuses its default mode
(``ErrorIfExists``) for any Python data source before the write reaches llog, and
``overwrite`` is refused by :meth:`llog.spark.source.LlogDataSource.writer` (a topic is
append-only). docs/spark.md, "Writing", has why the default cannot mean append here.

Columns, as for Spark's Kafka sink: ``value`` (binary or string, required), and
optionally ``key`` (binary or string), ``topic`` (string; the ``topic`` option is the
default for rows without one), ``partition`` (int), ``timestamp`` (timestamp, or long
milliseconds; null means append time) and ``headers``
(``array<struct<key: string, value: binary>>``). ``offset`` and ``timestampType`` (read
columns, so a read DataFrame can be written back as is) are ignored; any other column
is an error.

A row without a partition goes to ``llog.partitioner.partition_for_key(key, n)`` when
it has a key, else to one partition per flush, rotating (Kafka's sticky partitioner).
Each task batches rows into shared appends of about ``batch_max_bytes`` and returns a
:class:`LlogCommitMessage` with what it wrote; the driver logs the job's total.

Delivery is at least once: a task that fails after some appends committed is retried
by Spark and appends those rows again. With the option ``transactionalId`` it is exactly
once: each write (a job, or a micro-batch) is one transaction
(:mod:`llog.spark.sink_transactions`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    ByteType,
    DataType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from llog.connection import Connection
from llog.errors import ConfigError, InvalidRecord
from llog.names import TopicPartition
from llog.records import AppendGroup, Record
from llog.spark.connections import worker_connection
from llog.spark.options import SinkOptions, config_to_dict
from llog.spark.sink_transactions import TaskTransaction, abort_write, commit_write, task_transaction
from llog.writer import AppendFailure, Writer

log = logging.getLogger(__name__)

_BYTES = (BinaryType(), StringType())
_INTS = (ByteType(), ShortType(), IntegerType(), LongType())
_TIMES = (TimestampType(), TimestampNTZType(), LongType())
_IGNORED = frozenset({"offset", "timestampType"})
_UNIT_MS = {"s": (1000, 1), "ms": (1, 1), "us": (1, 1000), "ns": (1, 1_000_000)}


@dataclass(frozen=True)
class SinkColumns:
    """Which optional columns the written DataFrame has (checked on the driver)."""

    key: bool
    topic: bool
    partition: bool
    timestamp: bool
    headers: bool

    @classmethod
    def from_schema(cls, schema: StructType) -> SinkColumns:
        types = {f.name: f.dataType for f in schema.fields}
        unknown = set(types) - {"value", "key", "topic", "partition", "timestamp", "headers"} - _IGNORED
        if unknown:
            raise ConfigError(f"llog sink: unknown columns {sorted(unknown)}")
        if "value" not in types:
            raise ConfigError("llog sink: the DataFrame needs a 'value' column")
        _expect(types, "value", _BYTES, "binary or string")
        _expect(types, "key", _BYTES, "binary or string")
        _expect(types, "topic", (StringType(),), "string")
        _expect(types, "partition", _INTS, "an integer type")
        _expect(types, "timestamp", _TIMES, "timestamp or long (ms)")
        if "headers" in types:
            h = types["headers"]
            ok = (
                isinstance(h, ArrayType)
                and isinstance(h.elementType, StructType)
                and [f.name for f in h.elementType.fields] == ["key", "value"]
                and h.elementType.fields[0].dataType == StringType()
                and h.elementType.fields[1].dataType in _BYTES
            )
            if not ok:
                raise ConfigError(
                    f"llog sink: column 'headers' must be array<struct<key: string, value: binary>>, "
                    f"not {h.simpleString()}"
                )
        return cls(*(name in types for name in ("key", "topic", "partition", "timestamp", "headers")))


def _expect(types: dict[str, DataType], name: str, allowed: tuple[DataType, ...], what: str) -> None:
    if name in types and types[name] not in allowed:
        raise ConfigError(f"llog sink: column {name!r} must be {what}, not {types[name].simpleString()}")


@dataclass(frozen=True)
class LlogCommitMessage(WriterCommitMessage):  # type: ignore[misc,unused-ignore]
    """What one task wrote: records, shared appends, and records per topic-partition."""

    records: int
    appends: int
    per_partition: tuple[tuple[str, int, int], ...]
    #: The task's ongoing transaction (``transactionalId`` set and rows written).
    transaction: TaskTransaction | None = None


def summarize(
    messages: Iterable[WriterCommitMessage | None],
) -> tuple[int, int, dict[TopicPartition, int]]:
    """``(records, appends, records per topic-partition)`` over the tasks' messages
    (a failed task's is ``None``)."""
    records = appends = 0
    per: dict[TopicPartition, int] = {}
    for m in messages:
        if not isinstance(m, LlogCommitMessage):
            continue
        records += m.records
        appends += m.appends
        for t, p, n in m.per_partition:
            per[(t, p)] = per.get((t, p), 0) + n
    return records, appends, per


class _TaskWriter:
    """Buffers one task's rows per topic-partition and appends them in shared blobs."""

    def __init__(self, conn: Connection, options: SinkOptions, task_id: int) -> None:
        self.conn = conn
        self.default_topic = options.topic
        self.txn = None if options.transactional_id is None else task_transaction(conn, options, task_id)
        self.writer = Writer(conn) if self.txn is None else None
        # A transaction's commit takes an etcd op per staged append: fewer, bigger ones.
        self.flush_bytes = conn.config.batch_max_bytes if self.txn is None else conn.config.max_blob_bytes // 2
        self.buffer: dict[TopicPartition, list[Record]] = {}
        self.buffered = 0
        self.flushes = task_id
        self.records = 0
        self.appends = 0
        self.per_partition: dict[TopicPartition, int] = {}

    def add(self, rb: pa.RecordBatch, cols: SinkColumns) -> None:
        n = rb.num_rows
        values = _bytes_list(rb.column("value"))
        keys = _bytes_list(rb.column("key")) if cols.key else [None] * n
        topics = rb.column("topic").to_pylist() if cols.topic else [None] * n
        parts = rb.column("partition").to_pylist() if cols.partition else [None] * n
        stamps = _millis(rb.column("timestamp")) if cols.timestamp else [None] * n
        headers = _headers(rb.column("headers")) if cols.headers else [()] * n
        for i in range(n):
            value = values[i]  # None: a tombstone
            topic = topics[i] or self.default_topic
            if topic is None:
                raise ConfigError("llog sink: a row has no topic; set the 'topic' option or column")
            p = parts[i]
            if p is None:
                p = self._partition(topic, keys[i])
            rec = Record(value, keys[i], stamps[i], headers[i])
            self.buffer.setdefault((topic, p), []).append(rec)
            self.buffered += len(value or b"") + (len(keys[i] or b"")) + 32
            if self.buffered >= self.flush_bytes:
                self.flush()

    def _partition(self, topic: str, key: bytes | None) -> int:
        count = self.conn.topic(topic).partitions
        if key is not None:
            from llog.partitioner import partition_for_key

            return int(partition_for_key(key, count))
        return self.flushes % count

    def flush(self) -> None:
        if not self.buffer:
            return
        groups = [AppendGroup(t, p, recs) for (t, p), recs in self.buffer.items()]
        self.buffer, self.buffered = {}, 0
        self.flushes += 1
        self.appends += 1
        if self.writer is None:
            assert self.txn is not None
            self.txn.append_shared(groups)
            for g in groups:
                self._count(g.topic, g.partition, len(g.records))
            return
        for g, out in zip(groups, self.writer.append_shared(groups), strict=True):
            if isinstance(out, AppendFailure):
                raise out.error
            self._count(g.topic, g.partition, out.count)

    def _count(self, topic: str, partition: int, n: int) -> None:
        self.records += n
        self.per_partition[(topic, partition)] = self.per_partition.get((topic, partition), 0) + n

    def message(self) -> LlogCommitMessage:
        txn = self.txn
        return LlogCommitMessage(
            self.records, self.appends, tuple((t, p, n) for (t, p), n in sorted(self.per_partition.items())),
            None if txn is None or not txn.ongoing else (txn.transactional_id, txn.producer_id, txn.epoch),
        )

    def close(self, *, failed: bool) -> None:
        """Close the writers; a task's transaction stays ongoing for the driver unless
        the task failed (then it is aborted)."""
        try:
            if self.txn is not None:
                self.txn.close(abort=failed)
        finally:
            if self.writer is not None:
                self.writer.close()


def write_task(
    options: SinkOptions, cols: SinkColumns, batches: Iterator[pa.RecordBatch]
) -> LlogCommitMessage:
    """Append every row of one task; the task's commit message."""
    ctx = TaskContext.get()
    task = _TaskWriter(worker_connection(config_to_dict(options.config)), options, ctx.partitionId() if ctx else 0)
    failed = True
    try:
        for rb in batches:
            task.add(rb, cols)
        task.flush()
        message = task.message()
        failed = False
    finally:
        task.close(failed=failed)
    return message


class LlogBatchWriter(DataSourceArrowWriter):  # type: ignore[misc,unused-ignore]
    """``df.write.format("llog")``."""

    def __init__(self, options: SinkOptions, columns: SinkColumns) -> None:
        self.options = options
        self.columns = columns

    def write(self, iterator: Iterator[pa.RecordBatch]) -> LlogCommitMessage:
        return write_task(self.options, self.columns, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        records, appends, per = summarize(messages)
        if self.options.transactional_id is not None:
            commit_write(self.options, _transactions(messages), None)
        log.info("llog sink wrote %d records in %d appends to %d partitions", records, appends, len(per))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        records, _, _ = summarize(messages)
        if self.options.transactional_id is not None:
            abort_write(self.options, _transactions(messages))
            log.warning("llog write aborted; the %d records its finished tasks staged are discarded", records)
            return
        log.warning("llog write aborted; %d records appended by finished tasks stay in the log", records)


class LlogStreamWriter(DataSourceStreamArrowWriter):  # type: ignore[misc,unused-ignore]
    """``df.writeStream.format("llog")``: each micro-batch's tasks append their rows."""

    def __init__(self, options: SinkOptions, columns: SinkColumns) -> None:
        self.options = options
        self.columns = columns

    def write(self, iterator: Iterator[pa.RecordBatch]) -> LlogCommitMessage:
        return write_task(self.options, self.columns, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        records, appends, per = summarize(messages)
        if self.options.transactional_id is not None and not commit_write(
                self.options, _transactions(messages), batchId):
            return
        log.info("llog sink batch %d wrote %d records in %d appends to %d partitions",
                 batchId, records, appends, len(per))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        records, _, _ = summarize(messages)
        if self.options.transactional_id is not None:
            abort_write(self.options, _transactions(messages))
            log.warning("llog sink batch %d aborted; the %d records its tasks staged are discarded", batchId, records)
            return
        log.warning(
            "llog sink batch %d aborted; %d records appended by finished tasks stay", batchId, records
        )


def _transactions(messages: Iterable[WriterCommitMessage | None]) -> list[TaskTransaction]:
    return [m.transaction for m in messages if isinstance(m, LlogCommitMessage) and m.transaction is not None]


# -- column conversion (C-level casts, then one Python list per column) -----------------
def _bytes_list(col: pa.Array) -> list[Any]:
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        col = col.cast(pa.large_binary())
    out: list[Any] = col.to_pylist()
    return out


def _millis(col: pa.Array) -> list[Any]:
    if pa.types.is_timestamp(col.type):
        mul, div = _UNIT_MS[col.type.unit]
        ints = col.cast(pa.int64())
        if mul != 1:
            ints = pc.multiply(ints, mul)
        if div != 1:
            ints = pc.divide(ints, div)
        col = ints
    out: list[Any] = col.to_pylist()
    return out


def _headers(col: pa.Array) -> list[Any]:
    out: list[Any] = []
    for hs in col.to_pylist():
        if not hs:
            out.append(())
            continue
        items = []
        for h in hs:
            v = h["value"]
            if v is None or h["key"] is None:
                raise InvalidRecord("llog sink: a header has a null key or value")
            items.append((h["key"], v.encode() if isinstance(v, str) else v))
        out.append(tuple(items))
    return out
