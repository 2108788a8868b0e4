"""A table topic end to end: produce, compact, then query the history as a table with
Spark (``llog.spark.read_topic``), DuckDB (over the table's Parquet files) and pyiceberg.

Clicks (``{"page": "/p3", "ms": 120}``) go to a table topic; the compactor turns them
into Parquet files that also form the Iceberg table ``llog.clicks``; the queries count
clicks per page three ways and check they agree with the records written.

Run it against a running stack (``LLOG_*`` variables set, a compactor service running
or not), or with no variables and it starts a throw-away local etcd + file store:

    python examples/table_pipeline.py
    python examples/table_pipeline.py --topic clicks --records 50000
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
from contextlib import ExitStack
from dataclasses import replace

import duckdb
from pyspark.sql import functions as F

from compactor import Compactor
from compactor.compact import COMPACTED
from llog.config import LlogConfig
from llog.connection import Connection
from llog.devstack import LocalStack
from llog.records import AppendGroup, Record
from llog.spark import local_session, read_topic
from llog.table import TableCatalog, sync_table
from llog.topic.admin import Topics
from llog.writer import Writer

PARTITIONS = 4
PAGES = [f"/p{i}" for i in range(8)]


def produce(cfg: LlogConfig, topic: str, records: int) -> collections.Counter[str]:
    """Create the table topic and append ``records`` clicks; the count per page."""
    rng = random.Random(7)
    counts: collections.Counter[str] = collections.Counter()
    with Connection(cfg) as conn:
        Topics(conn).create(topic, PARTITIONS, table="iceberg")
        with Writer(conn) as w:
            for first in range(0, records, 1000):
                groups: dict[int, list[Record]] = collections.defaultdict(list)
                for i in range(first, min(first + 1000, records)):
                    page = rng.choice(PAGES)
                    counts[page] += 1
                    groups[i % PARTITIONS].append(Record(json.dumps({"page": page, "ms": i % 500}).encode()))
                for out in w.append_shared([AppendGroup(topic, p, recs) for p, recs in groups.items()]):
                    if not out.ok:
                        raise RuntimeError(f"produce failed: {out}")
    return counts


def compact_and_sync(cfg: LlogConfig, topic: str) -> None:
    """What the compactor service does on its own schedule: compact every partition
    (no minimum age here), then bring the Iceberg table to the index."""
    with Connection(replace(cfg, compact_min_age_ms=0, settle_after_ms=0)) as conn:
        with Compactor(conn) as c:
            for p in range(PARTITIONS):
                while c.compact_once(topic, p).outcome == COMPACTED:
                    pass
        with TableCatalog(conn) as tables:
            sync_table(tables, topic)
            info = tables.describe(topic)
            assert info is not None
            print(f"table {info.identifier}: {info.files} files, {info.rows} rows at {info.location}")


def spark_counts(cfg: LlogConfig, topic: str) -> dict[str, int]:
    spark = local_session("llog-table-pipeline")
    try:
        options = {"etcdEndpoints": ",".join(cfg.etcd_endpoints), "objectStore": cfg.object_store,
                   "rootPrefix": cfg.root_prefix}
        if cfg.s3_endpoint_url:
            options["s3EndpointUrl"] = cfg.s3_endpoint_url
        df = read_topic(spark, topic, options)
        pages = df.select(F.get_json_object(F.col("value").cast("string"), "$.page").alias("page"))
        return {r.page: r.n for r in pages.groupBy("page").agg(F.count("*").alias("n")).collect()}
    finally:
        spark.stop()


def duckdb_counts(cfg: LlogConfig, topic: str) -> dict[str, int]:
    """DuckDB over the table's current data files (local paths for a file:// store)."""
    with Connection(cfg) as conn, TableCatalog(conn) as tables:
        table = tables.table(topic)
        assert table is not None
        files = [t.file.file_path.removeprefix("file://") for t in table.scan().plan_files()]
    if not files or not all(f.startswith("/") for f in files):
        print("DuckDB: skipped (the files are not local; use DuckDB's httpfs/iceberg extensions)")
        return {}
    rel = duckdb.sql(
        "SELECT json_extract_string(decode(value), '$.page') AS page, count(*) AS n "
        f"FROM read_parquet({files!r}) GROUP BY page"
    )
    assert rel is not None
    return {page: n for page, n in rel.fetchall()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--topic", default="clicks")
    p.add_argument("--records", type=int, default=20_000)
    args = p.parse_args()
    with ExitStack() as stack:
        if os.environ.get("LLOG_ETCD_ENDPOINTS"):
            cfg = LlogConfig.from_env()
        else:
            cfg = stack.enter_context(LocalStack()).config
            print(f"started a local stack: etcd {cfg.etcd_endpoints[0]}, objects {cfg.object_store}")
        written = produce(cfg, args.topic, args.records)
        print(f"produced {args.records} clicks to {args.topic!r}")
        compact_and_sync(cfg, args.topic)
        by_spark = spark_counts(cfg, args.topic)
        by_duckdb = duckdb_counts(cfg, args.topic)
        for page in sorted(written):
            print(f"{page}: written {written[page]}, Spark {by_spark.get(page)}, DuckDB {by_duckdb.get(page, '-')}")
        assert by_spark == dict(written), "Spark's counts differ from what was written"
        assert not by_duckdb or by_duckdb == dict(written), "DuckDB's counts differ from what was written"
        print("all counts agree")


if __name__ == "__main__":
    main()
