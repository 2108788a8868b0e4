"""Spark's own Kafka source and sink (``spark-sql-kafka-0-10``, the connector Spark
users already have) against the Kafka listener, on the suite's real etcd and S3
servers: in one job Spark reads a topic the Java client produced and writes a topic
llog's SDK reads back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from llog.connection import Connection
from llog.reader import Reader
from llog.topic.admin import Topics
from tests import java_client
from tests.test_kafka import KafkaBroker, kb_fixture  # noqa: F401 (the fixture kb)

JOB = Path(__file__).parent / "workers" / "spark_kafka_job.py"


def test_spark_kafka_source_and_sink_in_one_job(kb: KafkaBroker, conn: Connection) -> None:
    topics = Topics(conn)
    topics.create("sk-in", 3)
    topics.create("sk-out", 3)
    n = 600
    acks = java_client.run("produce", kb.bootstrap, "sk-in", str(n), "lz4", "true")
    assert len(acks) == n
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    job = subprocess.run([sys.executable, str(JOB), ",".join(java_client.spark_kafka_jars()), kb.bootstrap,
                          "sk-in", "sk-out"], env=env, capture_output=True, text=True, timeout=600)
    assert job.returncode == 0, job.stderr[-4000:]
    assert json.loads(job.stdout.strip().splitlines()[-1]) == {"read": n}
    with Reader(conn) as r:
        got = sorted((rec.key, rec.value) for p in range(3) for rec in r.scan("sk-out", p))
    assert got == sorted((f"k{i}".encode(), f"V{i}".encode()) for i in range(n))
