"""A Spark pipeline over llog: read a topic, aggregate, write Parquet.

Orders are JSON records (``{"customer": "c7", "amount": 12.5}``) keyed by customer; the
pipeline totals them per customer and writes the result as Parquet.

Run it against a running stack (``LLOG_*`` variables set), or with no variables and it
starts a throw-away local etcd + file store itself; either way it first writes sample
orders (``--records``, 0 to skip):

    python examples/spark_pipeline.py
    python examples/spark_pipeline.py --topic orders --records 0 --out /data/orders_by_customer
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
from contextlib import ExitStack, suppress
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from llog.config import LlogConfig
from llog.connection import Connection
from llog.devstack import LocalStack
from llog.errors import TopicConflict
from llog.partitioner import partition_for_key
from llog.records import AppendGroup, Record
from llog.spark import local_session
from llog.topic.admin import Topics
from llog.writer import Writer

PARTITIONS = 4
ORDER_SCHEMA = "customer string, amount double"


def write_sample(cfg: LlogConfig, topic: str, records: int) -> float:
    """Append ``records`` random orders to ``topic`` (created if missing); their total."""
    rng = random.Random(7)
    total = 0.0
    with Connection(cfg) as conn:
        with suppress(TopicConflict):  # an existing topic keeps its partition count
            Topics(conn).create(topic, PARTITIONS)
        partitions = conn.topic(topic, refresh=True).partitions
        with Writer(conn) as w:
            for first in range(0, records, 1000):
                by_customer: dict[str, list[Record]] = {}
                for _ in range(min(1000, records - first)):
                    customer = f"c{rng.randrange(20)}"
                    amount = round(rng.uniform(1, 100), 2)
                    total += amount
                    doc = json.dumps({"customer": customer, "amount": amount}).encode()
                    by_customer.setdefault(customer, []).append(Record(doc, key=customer.encode()))
                groups = [
                    AppendGroup(topic, partition_for_key(customer, partitions), recs)
                    for customer, recs in by_customer.items()
                ]
                for out in w.append_shared(groups):
                    if not out.ok:
                        raise RuntimeError(f"sample write failed: {out}")
    return total


def orders_by_customer(spark: SparkSession, options: dict[str, str], topic: str) -> DataFrame:
    """The pipeline: per customer, the number of orders, their total and the last order time."""
    orders = (
        spark.read.format("llog")
        .options(**options)
        .option("topic", topic)
        .load()
        .select(F.from_json(F.col("value").cast("string"), ORDER_SCHEMA).alias("o"), "timestamp")
        .select("o.*", "timestamp")
    )
    return orders.groupBy("customer").agg(
        F.count("*").alias("orders"),
        F.round(F.sum("amount"), 2).alias("total"),
        F.max("timestamp").alias("last_order"),
    )


def source_options(cfg: LlogConfig) -> dict[str, str]:
    """The connection as ``llog`` format options (they override the ``LLOG_*`` env)."""
    options = {
        "etcdEndpoints": ",".join(cfg.etcd_endpoints),
        "objectStore": cfg.object_store,
        "rootPrefix": cfg.root_prefix,
    }
    if cfg.s3_endpoint_url:
        options["s3EndpointUrl"] = cfg.s3_endpoint_url
    return options


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--topic", default="orders")
    p.add_argument("--records", type=int, default=20_000, help="sample orders to write first")
    p.add_argument("--out", type=Path, help="Parquet output directory (default: a temporary one)")
    args = p.parse_args()

    with ExitStack() as stack:
        if os.environ.get("LLOG_ETCD_ENDPOINTS"):
            cfg = LlogConfig.from_env()
        else:
            cfg = stack.enter_context(LocalStack()).config
            print(f"started a local stack: etcd {cfg.etcd_endpoints[0]}, objects {cfg.object_store}")
        out = args.out or Path(stack.enter_context(tempfile.TemporaryDirectory())) / "orders_by_customer"
        if args.records:
            total = write_sample(cfg, args.topic, args.records)
            print(f"wrote {args.records} sample orders to {args.topic!r} (total {total:.2f})")

        spark = local_session("llog-spark-pipeline")
        stack.callback(spark.stop)
        orders_by_customer(spark, source_options(cfg), args.topic).write.mode("overwrite").parquet(str(out))

        result = spark.read.parquet(str(out))
        summary = result.agg(F.sum("orders").alias("orders"), F.round(F.sum("total"), 2).alias("total")).first()
        print(f"wrote {result.count()} customers to {out}: {summary.orders} orders, total {summary.total}")
        result.orderBy(F.desc("total")).show(5, truncate=False)


if __name__ == "__main__":
    main()
