"""The exactly-once Spark sink (option ``transactionalId``, protocol/README.md §15.5) on
the suite's servers and SparkSession: a failed job leaves nothing, and a micro-batch
Spark runs again after its driver died between llog's commit and Spark's commit log is
never written twice — where the at-least-once sink writes it twice."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.functions import col, udf
from pyspark.sql.types import BinaryType

from llog.config import LlogConfig
from llog.connection import Connection
from llog.reader import Reader
from llog.records import AppendGroup
from llog.topic.admin import Topics
from llog.writer import Writer


def _values(conn: Connection, topic: str, partitions: int) -> list[bytes]:
    return sorted(r.value or b"" for p in range(partitions) for r in Reader(conn).scan(topic, p))


def test_a_failed_transactional_job_leaves_nothing(spark: SparkSession, config: LlogConfig,
                                                   opts: dict[str, str]) -> None:
    with Connection(config) as conn:
        Topics(conn).create("eo-batch", 2)

    @udf(BinaryType())
    def fail_late(v: bytes) -> bytes:
        if v == b"row-150":  # one task fails after the others finished or staged rows
            raise ValueError("the job fails")
        return v

    df = spark.createDataFrame([(f"row-{i}".encode(),) for i in range(200)], "value binary").repartition(4)
    writer = (df.select(fail_late(col("value")).alias("value")).write.format("llog").options(**opts)
              .option("topic", "eo-batch").option("transactionalId", "eo-batch").mode("append"))
    with pytest.raises(Exception, match="the job fails"):
        writer.save()
    with Connection(config) as conn:
        assert _values(conn, "eo-batch", 2) == []
    # The same job without the failing row: every row once, all visible together.
    (df.write.format("llog").options(**opts).option("topic", "eo-batch").option("transactionalId", "eo-batch")
     .mode("append").save())
    with Connection(config) as conn:
        assert _values(conn, "eo-batch", 2) == sorted(f"row-{i}".encode() for i in range(200))


def _stream(spark: SparkSession, opts: dict[str, str], dst: str, ckpt: Path, txn: str | None) -> None:
    w = (spark.readStream.format("llog").options(**opts).option("topic", "eo-src")
         .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "40").load()
         .selectExpr("value", "partition").writeStream.format("llog").options(**opts).option("topic", dst)
         .option("checkpointLocation", str(ckpt)).trigger(availableNow=True))
    q = (w if txn is None else w.option("transactionalId", txn)).start()
    assert q.awaitTermination(180)
    assert q.exception() is None


def _lose_last_commit(ckpt: Path) -> int:
    """The driver died after the sink committed its last micro-batch but before Spark
    wrote it in its commit log: Spark runs that micro-batch again on restart."""
    last = max(int(p.name) for p in (ckpt / "commits").iterdir() if p.name.isdigit())
    (ckpt / "commits" / str(last)).unlink()
    for crc in (ckpt / "commits").glob(f".{last}.crc"):
        crc.unlink()
    return last


def test_a_micro_batch_run_again_after_the_driver_died_is_written_once(
    spark: SparkSession, config: LlogConfig, opts: dict[str, str], tmp_path: Path,
) -> None:
    with Connection(config) as conn:
        for t in ("eo-src", "eo-dst", "eo-plain"):
            Topics(conn).create(t, 2)
        with Writer(conn) as w:
            w.append_shared([AppendGroup("eo-src", p, [f"{p}-{i}".encode() for i in range(60)]) for p in range(2)])
    expected = sorted(f"{p}-{i}".encode() for p in range(2) for i in range(60))
    for dst, txn in (("eo-dst", "eo-sink"), ("eo-plain", None)):
        ckpt = tmp_path / dst
        _stream(spark, opts, dst, ckpt, txn)
        assert _lose_last_commit(ckpt) >= 2  # 120 records at 40 a trigger: several micro-batches
        _stream(spark, opts, dst, ckpt, txn)
    with Connection(config) as conn:
        assert _values(conn, "eo-dst", 2) == expected
        again = _values(conn, "eo-plain", 2)  # at least once: the last micro-batch twice
        assert len(again) > len(expected) and set(again) == set(expected)
