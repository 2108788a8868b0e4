"""Typed tables end to end (issue 40): 100,000 records per schema type through the
registry, queried as typed columns.

Starts a local stack (real etcd, a ``file://`` store so DuckDB and Spark read the files
natively, pyiceberg's SQL catalog), a broker with its Kafka listener and the compactor
service with its defaults (table topics compacted at half of
``LLOG_ICEBERG_FRESHNESS_S``). For Avro, JSON Schema and Protobuf in turn:
confluent-kafka's serializer produces ``--records`` records to a 4-partition table
topic with ``value_schema="schema-id"`` and ``value_validation="dlq"``, one in a hundred
replaced by malformed bytes, and the bench waits until the table holds every record; once
every type is in, it queries each table with a ``WHERE`` on a field through pyiceberg,
DuckDB (over the table's files) and Spark (``llog.spark.read_table``), checking each count
against what was sent (Spark starts after the produces: its JVM's compiling would take a
core from them).

Prints per type: produce records/s, seconds from the last acknowledgement to the table
holding everything, the dead-lettered count, and each engine's count and seconds; the
last line is one JSON object. ``--quick``: 20,000 records per type.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import LocalStack, bench_args, emit_json, print_table
from bench.kafka import kafka_broker_process
from compactor.service import CompactorService
from llog.config import LlogConfig
from llog.connection import Connection
from llog.reader import Reader
from llog.table import TableCatalog
from llog.topic.admin import Topics

PARTITIONS = 4
AVRO = {"type": "record", "name": "Click", "fields": [{"name": "page", "type": "string"},
                                                     {"name": "ms", "type": "long"}]}
JSON_SCHEMA = {"type": "object", "properties": {"page": {"type": "string"}, "ms": {"type": "integer"}},
               "required": ["page", "ms"]}
PROTO = 'syntax = "proto3";\npackage bench;\nmessage Click { string page = 1; int64 ms = 2; }\n'


def _serializers(url: str, workdir: Path) -> dict[str, Callable[[str], Callable[[int], bytes]]]:
    """Per schema type: topic → (i → the i-th record's value, Confluent's wire format)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.schema_registry.json_schema import JSONSerializer
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient({"url": url})
    (workdir / "click.proto").write_text(PROTO)
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{workdir}", f"--python_out={workdir}",
                    "click.proto"], check=True)
    sys.path.insert(0, str(workdir))
    import click_pb2  # type: ignore[import-not-found]

    def avro(topic: str) -> Callable[[int], bytes]:
        ser, ctx = AvroSerializer(client, json.dumps(AVRO)), SerializationContext(topic, MessageField.VALUE)
        return lambda i: ser({"page": f"/p{i % 10}", "ms": i}, ctx)

    def json_schema(topic: str) -> Callable[[int], bytes]:
        ser, ctx = JSONSerializer(json.dumps(JSON_SCHEMA), client), SerializationContext(topic, MessageField.VALUE)
        return lambda i: ser({"page": f"/p{i % 10}", "ms": i}, ctx)

    def protobuf(topic: str) -> Callable[[int], bytes]:
        ser = ProtobufSerializer(click_pb2.Click, client, {"use.deprecated.format": False})
        ctx = SerializationContext(topic, MessageField.VALUE)
        return lambda i: ser(click_pb2.Click(page=f"/p{i % 10}", ms=i), ctx)

    return {"avro": avro, "json": json_schema, "protobuf": protobuf}


def produce(bootstrap: str, topic: str, value: Callable[[int], bytes], n: int) -> tuple[float, int]:
    """``(seconds, malformed sent)``: every 100th record is malformed bytes."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True})
    bad = 0
    t0 = time.perf_counter()
    for i in range(n):
        if i % 100 == 99:
            p.produce(topic, value=f"malformed {i}".encode(), partition=i % PARTITIONS)
            bad += 1
        else:
            p.produce(topic, value=value(i), partition=i % PARTITIONS)
        if i % 10_000 == 0:
            p.poll(0)
    if p.flush(120) != 0:
        raise RuntimeError("the producer did not deliver everything")
    return time.perf_counter() - t0, bad


def wait_for_table(cfg: LlogConfig, topic: str, n: int, timeout_s: float = 600.0) -> float:
    """Seconds until the table holds ``n`` rows."""
    t0 = time.perf_counter()
    with Connection(cfg) as conn, TableCatalog(conn) as tables:
        while time.perf_counter() - t0 < timeout_s:
            info = tables.describe(topic)
            if info is not None and info.rows >= n:
                return time.perf_counter() - t0
            time.sleep(0.5)  # a bench polling the table as a user would
    raise RuntimeError(f"the table of {topic} did not reach {n} rows in {timeout_s:.0f} s")


def queries(cfg: LlogConfig, topic: str, spark: Any) -> dict[str, tuple[int, float]]:
    """``engine → (rows with page = '/p3', seconds)``."""
    import duckdb

    from llog.spark import read_table

    out: dict[str, tuple[int, float]] = {}
    with Connection(cfg) as conn, TableCatalog(conn) as tables:
        table = tables.table(topic, create=False)
        assert table is not None
        t0 = time.perf_counter()
        out["pyiceberg"] = (table.scan(row_filter="fields.page == '/p3'").to_arrow().num_rows,
                            time.perf_counter() - t0)
        files = [t.file.file_path.removeprefix("file://") for t in table.scan().plan_files()]
    t0 = time.perf_counter()
    got = duckdb.sql(f"SELECT count(*) FROM read_parquet({files!r}) WHERE fields.page = '/p3'").fetchall()[0][0]
    out["duckdb"] = (int(got), time.perf_counter() - t0)
    opts = {"etcdEndpoints": ",".join(cfg.etcd_endpoints), "objectStore": cfg.object_store,
            "rootPrefix": cfg.root_prefix, "icebergCatalogUri": cfg.iceberg_catalog_uri or ""}
    t0 = time.perf_counter()
    out["spark"] = (read_table(spark, topic, opts).where("fields.page = '/p3'").count(), time.perf_counter() - t0)
    return out


def main() -> None:
    p = bench_args(__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=None, help="records per schema type")
    args = p.parse_args()
    n = args.records or (20_000 if args.quick else 100_000)
    expected = sum(1 for i in range(n) if i % 100 != 99 and i % 10 == 3)
    from llog.spark import local_session

    rows, result = [], {"records": n, "partitions": PARTITIONS}
    with LocalStack() as stack:
        cfg = stack.config("file", iceberg_catalog_uri=f"sqlite:///{stack.workdir / 'catalog.db'}",
                           compactor_port=0, vacuum_interval_s=0)
        with kafka_broker_process(cfg) as (bootstrap, url, _proc), CompactorService(cfg, http=False):
            # Every type produced (and its table complete) before Spark starts: a JVM
            # compiling after a query takes a core from the next produce on two cores.
            topics: dict[str, tuple[str, int]] = {}
            for kind, make in _serializers(url, stack.workdir).items():
                topic = f"{kind}-{uuid.uuid4().hex[:6]}"
                with Connection(cfg) as conn:
                    Topics(conn).create(topic, PARTITIONS, table="iceberg", value_schema="schema-id",
                                        value_validation="dlq")
                secs, bad = produce(bootstrap, topic, make(topic), n)
                fresh = wait_for_table(cfg, topic, n)
                topics[kind] = (topic, bad)
                result[kind] = {"produce_records_s": round(n / secs), "table_complete_after_s": round(fresh, 1)}
            spark = local_session("llog-bench-typed-tables")
            try:
                for kind, (topic, bad) in topics.items():
                    with Connection(cfg) as conn, Reader(conn) as r:
                        dead = sum(1 for part in range(PARTITIONS) for _ in r.scan(f"{topic}~dlq", part))
                    got = queries(cfg, topic, spark)
                    wrong = {e: c for e, (c, _) in got.items() if c != expected}
                    if wrong or dead != bad:
                        raise RuntimeError(f"{kind}: expected {expected} rows and {bad} dead letters, got {wrong}, "
                                           f"{dead}")
                    rows.append([kind, f"{result[kind]['produce_records_s']:,}",
                                 f"{result[kind]['table_complete_after_s']:.1f}", dead,
                                 *(f"{c} in {s:.2f}s" for c, s in got.values())])
                    result[kind] |= {"dead_letters": dead, **{f"{e}_s": round(s, 3) for e, (_, s) in got.items()}}
            finally:
                spark.stop()
    print_table(["type", "produce rec/s", "table complete s", "dead letters", "pyiceberg", "DuckDB", "Spark"], rows)
    print(f"each engine counted {expected} rows with fields.page = '/p3', as sent")
    emit_json(result)


if __name__ == "__main__":
    main()
