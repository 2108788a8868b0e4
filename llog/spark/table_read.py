"""``read_topic``: a batch read of a topic where the Parquet-compacted history goes
through Spark's own Parquet reader and only the rest through the ``llog`` source.

The plan, made on the driver from the index (no data read):

* for each partition, the offsets ``[start, end)`` the options select (as the ``llog``
  source resolves them);
* from ``start``, the run of consecutive COMPACTED entries whose ``encoding`` is
  ``parquet-v1`` (a table topic's, or any ``compacted_format = "parquet"`` topic's):
  those files are read by ``spark.read.parquet`` and cut to ``[start, end)`` by a
  filter on ``partition`` and ``offset``, which Parquet's row-group statistics prune;
* the offsets after that run (the uncompacted tail, or ranges compacted as llog's own
  bodies) through ``spark.read.format("llog")`` with per-partition offsets;

unioned by name into the Kafka-source schema (:data:`llog.spark.schema.SPARK_SCHEMA`).
Spark reads ``file://`` stores natively; an ``s3://`` store needs the cluster's S3A
filesystem (hadoop-aws): without it (or with ``native=False``) every range goes
through the ``llog`` source, which reads the same Parquet files through pyarrow.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from llog.codec.etcd_values.partition import COMPACTED, PARQUET_ENCODING
from llog.connection import Connection
from llog.errors import ConfigError
from llog.spark.options import parse_source_options
from llog.spark.planning import Offsets, batch_offsets
from llog.state.control import decode_index

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ParquetSlice:
    """Records ``[start, end)`` of ``partition`` read from the Parquet file at ``uri``,
    which holds ``[file_start, file_end)``."""

    uri: str
    partition: int
    start: int
    end: int
    file_start: int
    file_end: int

    @property
    def whole(self) -> bool:
        return (self.start, self.end) == (self.file_start, self.file_end)


@dataclass(frozen=True)
class TopicReadPlan:
    """Parquet files for the compacted prefix of each partition, and where the ``llog``
    source takes over (``tail_start``)."""

    topic: str
    files: tuple[ParquetSlice, ...]
    tail_start: Offsets


def plan_topic_read(conn: Connection, topic: str, start: Offsets, end: Offsets) -> TopicReadPlan:
    """Split each partition's ``[start, end)`` into its Parquet-compacted prefix and the rest."""
    files: list[ParquetSlice] = []
    tail: Offsets = {}
    keys = conn.keys
    for (t, p), s in sorted(start.items()):
        e = end[(t, p)]
        at = s
        for kv in conn.etcd.scan(keys.index(t, p, s), keys.index_range_end(t, p)):
            if at >= e:
                break
            entry = decode_index(kv.key, kv.value)
            last = keys.end_offset_of(kv.key)
            first = last - entry.msg_count + 1
            if entry.kind != COMPACTED or entry.encoding != PARQUET_ENCODING or first > at:
                break
            files.append(ParquetSlice(conn.store.object_uri(entry.data_key), p, at, min(last + 1, e), first, last + 1))
            at = min(last + 1, e)
        tail[(t, p)] = at
    return TopicReadPlan(topic, tuple(files), tail)


def spark_paths(uris: list[str], spark: Any) -> list[str] | None:
    """The paths Spark reads ``uris`` at, or ``None`` if this Spark cannot read them
    all (S3 objects without the S3A filesystem on its classpath, asked once)."""
    if all(u.startswith("file://") for u in uris):
        return uris
    if not all(u.startswith(("file://", "s3://")) for u in uris):
        return None
    try:
        spark._jvm.java.lang.Class.forName("org.apache.hadoop.fs.s3a.S3AFileSystem")
    except Exception:  # py4j raises its own error for a missing class
        return None
    return ["s3a://" + u[len("s3://"):] if u.startswith("s3://") else u for u in uris]


def read_topic(
    spark: Any, topic: str, options: Mapping[str, str] | None = None, *, native: bool | None = None, **more: str
) -> Any:
    """``topic`` as a DataFrame with the ``llog`` (Kafka) source's schema and offsets.

    ``options`` and ``more`` are the ``llog`` source's options (``startingOffsets``,
    ``endingOffsets``, ``failOnDataLoss``, connection options such as
    ``etcdEndpoints``; ``more`` wins). ``native``:
    ``None`` reads Parquet files natively where Spark can reach them, ``False`` never,
    ``True`` raises :class:`ConfigError` where it cannot.

    >>> read_topic(spark, "events", {"rootPrefix": "prod"}, startingOffsets="earliest")  # doctest: +SKIP
    """
    from llog.spark.source import register

    options = {**(options or {}), **more}
    opts = {**options, "subscribe": topic}
    src = parse_source_options(opts, streaming=False)
    with Connection(src.config) as conn:
        start, end = batch_offsets(conn, src)
        plan = plan_topic_read(conn, topic, start, end)
    paths = spark_paths([f.uri for f in plan.files], spark) if plan.files and native is not False else None
    if native and plan.files and paths is None:
        raise ConfigError(f"Spark cannot read {plan.files[0].uri} natively (no S3A filesystem)")
    frames = _parquet_frames(spark, plan, start, paths) if paths is not None else []
    tail_start = plan.tail_start if paths is not None else start
    rest = {tp: s for tp, s in tail_start.items() if s < end[tp]}
    if rest or not frames:
        register(spark)
        frames.append(_source_frame(spark, topic, options, tail_start, end))
    log.info("read_topic %s: %d Parquet files read by Spark, %d partitions through the llog source",
             topic, len(paths or ()), len(rest))
    out = frames[0]
    for f in frames[1:]:
        out = out.unionByName(f)
    return out


def _parquet_frames(spark: Any, plan: TopicReadPlan, start: Offsets, paths: list[str]) -> list[Any]:
    """The files' rows in the source's columns: whole files as they are, files the
    offsets cut behind a filter on ``partition`` and ``offset``."""
    from pyspark.sql import functions as F

    whole = sorted({p for f, p in zip(plan.files, paths, strict=True) if f.whole})
    cut = sorted({p for f, p in zip(plan.files, paths, strict=True) if not f.whole})
    frames = [spark.read.parquet(*whole)] if whole else []
    if cut:
        cond = None
        for (_, p), hi in sorted(plan.tail_start.items()):
            lo = start[(plan.topic, p)]
            if lo < hi:
                c = (F.col("partition") == p) & (F.col("offset") >= lo) & (F.col("offset") < hi)
                cond = c if cond is None else cond | c
        frames.append(spark.read.parquet(*cut).where(cond))
    return [
        df.select(
            F.col("key"), F.col("value"), F.lit(plan.topic).alias("topic"), F.col("partition"), F.col("offset"),
            F.timestamp_millis(F.col("timestamp")).alias("timestamp"), F.lit(0).alias("timestampType"),
            F.col("headers"),
        )
        for df in frames
    ]


def _source_frame(spark: Any, topic: str, options: Mapping[str, str], start: Offsets, end: Offsets) -> Any:
    def as_json(offsets: Offsets) -> str:
        return json.dumps({topic: {str(p): o for (_, p), o in sorted(offsets.items())}})

    reader = spark.read.format("llog")
    for k, v in options.items():
        if k.lower() not in ("startingoffsets", "endingoffsets"):
            reader = reader.option(k, v)
    return (reader.option("subscribe", topic).option("startingOffsets", as_json(start))
            .option("endingOffsets", as_json(end)).load())


__all__ = ["ParquetSlice", "TopicReadPlan", "plan_topic_read", "read_topic", "spark_paths"]
