"""Spark scan throughput of the ``llog`` source, against its ceiling and Parquet.

In one SparkSession (``local[2]``) over the same rows (100-byte values across 16
partitions, written through the SDK to a local etcd + moto S3):

* ``llog``: ``spark.read.format("llog")`` of the whole topic, objects in moto S3 (a
  Python server sharing the 2 cores, ~9 ms of CPU per GET);
* ``llog_file``: the same from a local-file object store (what the source itself costs;
  not in ``--quick``);
* ``ceiling``: a trivial Python data source yielding pre-built Arrow batches of the
  same schema, row count and split from memory — the most any Python data source can
  carry here;
* ``parquet``: ``spark.read.parquet`` of the same rows from local files.

Every scan is forced through all columns with the ``noop`` sink. Figures are medians
of repeated, interleaved runs; the last line is one JSON object.

    python bench/spark_scan.py            # 2 million records, 5 runs
    python bench/spark_scan.py --quick    # 2 million records in S3 only, 2 runs
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from bench.common import (
    MIB,
    LocalStack,
    bench_args,
    emit_json,
    median,
    print_table,
    ratio,
    seconds,
)
from llog.config import LlogConfig
from llog.connection import Connection
from llog.records import AppendGroup, Record
from llog.spark import local_session
from llog.spark.schema import ARROW_SCHEMA, SPARK_SCHEMA
from llog.topics import Topics
from llog.writer import Writer

log = logging.getLogger("bench.spark_scan")

TOPIC = "bench"
PARTITIONS = 16
VALUE_BYTES = 100
#: Records per partition per shared append: one index entry (and one Arrow batch).
SLICE = 8192


class CeilingReader(DataSourceReader):  # type: ignore[misc,unused-ignore]
    """Yields the same pre-built batch over and over: no I/O, no decoding."""

    def __init__(self, rows: int, partitions: int) -> None:
        self.rows = rows
        self.n = partitions

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(p) for p in range(self.n)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        share = self.rows // self.n + (1 if partition.value < self.rows % self.n else 0)
        full = _batch(partition.value, SLICE)
        done = 0
        while done < share:
            n = min(SLICE, share - done)
            yield full if n == SLICE else full.slice(0, n)
            done += n


class CeilingSource(DataSource):  # type: ignore[misc,unused-ignore]
    @classmethod
    def name(cls) -> str:
        return "llog_ceiling"

    def schema(self) -> Any:
        return SPARK_SCHEMA

    def reader(self, schema: Any) -> DataSourceReader:
        return CeilingReader(int(self.options["rows"]), int(self.options["partitions"]))


def _batch(partition: int, n: int) -> pa.RecordBatch:
    """``n`` rows of the llog schema with VALUE_BYTES-byte values and no key/headers."""
    from array import array

    values = pa.Array.from_buffers(
        pa.binary(), n,
        [None, pa.py_buffer(array("i", range(0, VALUE_BYTES * (n + 1), VALUE_BYTES))),
         pa.py_buffer(os.urandom(VALUE_BYTES * n))],
    )
    zeros = pa.py_buffer(bytes(4 * (n + 1)))
    headers = pa.ListArray.from_arrays(
        pa.Array.from_buffers(pa.int32(), n + 1, [None, zeros]),
        pa.array([], ARROW_SCHEMA.field("headers").type.value_type),
    ).cast(ARROW_SCHEMA.field("headers").type)
    return pa.RecordBatch.from_arrays(
        [
            pa.nulls(n, pa.binary()),
            values,
            pa.array([TOPIC] * n, pa.string()),
            pa.array([partition] * n, pa.int32()),
            pa.array(range(n), pa.int64()),
            pa.array([time.time_ns() // 1000] * n, pa.int64()).cast(ARROW_SCHEMA.field("timestamp").type),
            pa.array([0] * n, pa.int32()),
            headers,
        ],
        schema=ARROW_SCHEMA,
    )


def produce(cfg: LlogConfig, records: int) -> float:
    """Write ``records`` 100-byte records round-robin over the partitions; seconds taken."""
    t0 = time.perf_counter()
    with Connection(cfg) as conn:
        Topics(conn).create(TOPIC, PARTITIONS)
        with Writer(conn) as w:
            left = records
            while left > 0:
                groups = []
                for p in range(PARTITIONS):
                    n = min(SLICE, left)
                    if n <= 0:
                        break
                    payload = os.urandom(VALUE_BYTES * n)
                    groups.append(
                        AppendGroup(
                            TOPIC, p,
                            [Record(payload[i * VALUE_BYTES : (i + 1) * VALUE_BYTES]) for i in range(n)],
                        )
                    )
                    left -= n
                outs = w.append_shared(groups)
                failed = [o for o in outs if not o.ok]
                if failed:
                    raise RuntimeError(f"produce failed: {failed[0]}")
    return time.perf_counter() - t0


def source_options(cfg: LlogConfig) -> dict[str, str]:
    return {
        "etcdEndpoints": ",".join(cfg.etcd_endpoints),
        "objectStore": cfg.object_store,
        "s3EndpointUrl": cfg.s3_endpoint_url or "",
        "rootPrefix": cfg.root_prefix,
    }


def main() -> None:
    p = bench_args(__doc__ or "")
    p.add_argument("--records", type=int, default=2_000_000)
    args = p.parse_args()
    runs = args.runs or (2 if args.quick else 5)
    logging.basicConfig(level=logging.WARNING)

    with LocalStack() as stack:
        # --quick skips the local-file variant: producing 2 million records twice
        # would not fit in its budget.
        kinds: tuple[Literal["s3", "file"], ...] = ("s3",) if args.quick else ("s3", "file")
        configs = {("llog" if k == "s3" else "llog_file"): stack.config(k) for k in kinds}
        for name, cfg in configs.items():
            produce_s = produce(cfg, args.records)
            print(f"{name}: produced {args.records} records in {produce_s:.1f}s", flush=True)

        spark = local_session("llog-bench-spark-scan", conf={"spark.driver.memory": "2g"})
        parquet_dir = stack.workdir / "parquet"
        try:
            spark.dataSource.register(CeilingSource)
            frames = {
                name: spark.read.format("llog").options(**source_options(cfg)).option("topic", TOPIC).load()
                for name, cfg in configs.items()
            }
            frames["ceiling"] = (
                spark.read.format("llog_ceiling")
                .option("rows", str(args.records)).option("partitions", str(PARTITIONS)).load()
            )
            # Writing the llog scan to Parquet warms the llog workers up too, and the
            # Parquet row count (from file metadata) checks that the scan saw every row.
            frames["llog"].write.parquet(str(parquet_dir))
            frames["parquet"] = spark.read.parquet(str(parquet_dir))
            got = frames["parquet"].count()
            if got != args.records:
                raise RuntimeError(f"the llog scan returned {got} rows, not {args.records}")

            def scan(df: Any) -> float:
                return seconds(lambda: df.write.format("noop").mode("overwrite").save())

            for name, df in frames.items():  # warm-up: workers, caches
                if name != "llog":
                    scan(df)
            times: dict[str, list[float]] = {k: [] for k in frames}
            for _ in range(runs):
                for name, df in frames.items():
                    times[name].append(scan(df))
        finally:
            spark.stop()
            shutil.rmtree(parquet_dir, ignore_errors=True)

    rows_s = {k: args.records / median(v) for k, v in times.items()}
    mib = args.records * VALUE_BYTES / MIB
    print_table(
        ["scan", "median s", "rows/s", "value MiB/s", "runs (s)"],
        [
            [k, median(v), f"{rows_s[k]:,.0f}", mib / median(v), " ".join(f"{x:.2f}" for x in v)]
            for k, v in times.items()
        ],
    )
    result: dict[str, object] = {
        "records": args.records,
        "partitions": PARTITIONS,
        "runs": runs,
        "llog_rows_s": rows_s["llog"],
        "llog_mib_s": mib / median(times["llog"]),
        "ceiling_rows_s": rows_s["ceiling"],
        "parquet_rows_s": rows_s["parquet"],
        "ratio_to_ceiling": ratio(rows_s["llog"], rows_s["ceiling"]),
        "ratio_to_parquet": ratio(rows_s["llog"], rows_s["parquet"]),
    }
    if "llog_file" in rows_s:
        result["llog_file_rows_s"] = rows_s["llog_file"]
    emit_json(result)


if __name__ == "__main__":
    main()
