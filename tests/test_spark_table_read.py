"""``llog.spark.read_topic`` on a table topic (Parquet-compacted history plus an
uncompacted tail) against the real etcd and S3 servers, in the suite's ``local[2]``
SparkSession: the rows equal the ``llog`` source's, column for column, for the whole
topic and for offset ranges that cut files; on a ``file://`` store Spark's own Parquet
reader reads the compacted files; on S3 without S3A every range goes through the
source; a streaming read of the same topic delivers every record once."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from compactor.compact import compact_once
from llog.config import LlogConfig
from llog.connection import Connection
from llog.errors import ConfigError
from llog.records import AppendGroup, Record
from llog.spark import read_topic
from llog.spark.planning import read_controls
from llog.spark.table_read import plan_topic_read
from llog.topic.admin import Topics
from llog.writer import Writer

PARTITIONS = 3
ROUNDS = 4
PER_ROUND = 50
BASE_TS = 1_700_000_000_000
TOPIC = "tbl"


def _options(cfg: LlogConfig) -> dict[str, str]:
    out = {"etcdEndpoints": ",".join(cfg.etcd_endpoints), "objectStore": cfg.object_store,
           "rootPrefix": cfg.root_prefix, "compactMinAgeMs": "0"}
    if cfg.s3_endpoint_url:
        out["s3EndpointUrl"] = cfg.s3_endpoint_url
    return out


def _fill(cfg: LlogConfig) -> None:
    """4 rounds per partition; the first 3 compacted into Parquet files (one per round),
    the last left as WAL."""
    with Connection(cfg) as conn:
        Topics(conn).create(TOPIC, PARTITIONS, table="iceberg")
        with Writer(conn) as w:
            for r in range(ROUNDS):
                w.append_shared([
                    AppendGroup(TOPIC, p, [
                        Record(f"{p}/{r}/{i}".encode(), key=None if i % 3 else f"k{i}".encode(),
                               timestamp=BASE_TS + r * 1000 + i,
                               headers=(("round", str(r).encode()),) if i == 0 else ())
                        for i in range(PER_ROUND)
                    ])
                    for p in range(PARTITIONS)
                ])
        ccfg = replace(cfg, compact_min_age_ms=0, compact_max_records=PER_ROUND)
        with Connection(ccfg) as cconn:
            for p in range(PARTITIONS):
                for _ in range(ROUNDS - 1):
                    assert compact_once(cconn, TOPIC, p).outcome == "compacted"


@pytest.fixture(scope="module")
def file_cfg(servers: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlogConfig]:
    cfg = LlogConfig(
        etcd_endpoints=(servers.etcd_endpoint,),
        object_store=f"file://{tmp_path_factory.mktemp('store')}",
        root_prefix=f"t-{uuid.uuid4().hex[:12]}",
    )
    _fill(cfg)
    yield cfg


def _all(df: Any) -> list[tuple[Any, ...]]:
    return sorted(
        (r.topic, r.partition, r.offset, r.timestamp, r.timestampType, None if r.key is None else bytes(r.key),
         bytes(r.value), tuple((h.key, bytes(h.value)) for h in r.headers or ()))
        for r in df.collect()
    )


def _source(spark: SparkSession, cfg: LlogConfig, **options: str) -> Any:
    return spark.read.format("llog").options(**_options(cfg)).option("subscribe", TOPIC).options(**options).load()


def test_the_plan_reads_compacted_files_natively_and_the_tail_through_the_source(file_cfg: LlogConfig) -> None:
    with Connection(file_cfg) as conn:
        controls = read_controls(conn, [(TOPIC, p) for p in range(PARTITIONS)])
        start = {tp: 10 for tp in controls}
        end = {tp: c.next_offset for tp, c in controls.items()}
        plan = plan_topic_read(conn, TOPIC, start, end)
    assert len(plan.files) == PARTITIONS * (ROUNDS - 1)
    assert all(f.uri.startswith("file://") for f in plan.files)
    assert plan.tail_start == {(TOPIC, p): (ROUNDS - 1) * PER_ROUND for p in range(PARTITIONS)}
    assert [(f.start, f.end) for f in plan.files if f.partition == 0] == [(10, 50), (50, 100), (100, 150)]


def test_read_topic_equals_the_source_and_uses_spark_s_parquet_reader(
    spark: SparkSession, file_cfg: LlogConfig
) -> None:
    from llog.spark import register

    register(spark)
    df = read_topic(spark, TOPIC, _options(file_cfg))
    assert "parquet" in df._jdf.queryExecution().executedPlan().toString().lower()
    assert df.schema == _source(spark, file_cfg).schema
    got = _all(df)
    assert len(got) == PARTITIONS * ROUNDS * PER_ROUND
    assert got == _all(_source(spark, file_cfg))
    # Offsets that cut a file at both ends and reach into the tail.
    starting = '{"tbl": {"0": 25, "1": 120, "2": -2}}'
    ending = '{"tbl": {"0": 75, "1": 180, "2": 150}}'
    cut = _all(read_topic(spark, TOPIC, _options(file_cfg), startingOffsets=starting, endingOffsets=ending))
    assert cut == _all(_source(spark, file_cfg, startingOffsets=starting, endingOffsets=ending))
    assert [r[2] for r in cut if r[1] == 0] == list(range(25, 75))


def test_on_s3_without_s3a_every_range_goes_through_the_source(
    spark: SparkSession, config: LlogConfig, tmp_path: Path
) -> None:
    cfg = replace(config, root_prefix=f"t-{uuid.uuid4().hex[:12]}",
                  iceberg_catalog_uri=f"sqlite:///{tmp_path / 'catalog.db'}")
    _fill(cfg)
    df = read_topic(spark, TOPIC, _options(cfg))
    assert _all(df) == _all(_source(spark, cfg))
    with pytest.raises(ConfigError, match="natively"):
        read_topic(spark, TOPIC, _options(cfg), native=True)


def test_a_stream_of_a_table_topic_delivers_every_record_once(
    spark: SparkSession, file_cfg: LlogConfig, tmp_path: Path
) -> None:
    name = f"q{uuid.uuid4().hex[:6]}"
    q = (spark.readStream.format("llog").options(**_options(file_cfg)).option("subscribe", TOPIC)
         .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "200").load()
         .writeStream.format("memory").queryName(name)
         .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start())
    assert q.awaitTermination(300) and q.exception() is None
    assert _all(spark.table(name)) == _all(_source(spark, file_cfg))
