"""Spark streaming reads and writes of the ``llog`` format against the real etcd + S3
servers, in the suite's one ``local[2]`` SparkSession (the ``spark`` fixture)."""

from __future__ import annotations

import threading
import uuid
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from llog.config import LlogConfig
from llog.connection import Connection
from llog.records import AppendGroup
from llog.topic.admin import Topics
from llog.writer import AppendResult, Writer
from tests.conftest import wait_until

BUCKET = "llog-test"  # created by the servers fixture in conftest.py
PARTITIONS = 4
MAX_PER_TRIGGER = 1000

Row = tuple[str, int, int, bytes]


class Producer(threading.Thread):
    """Appends a round of records to every partition of ``topics`` about every 100 ms
    until stopped (or ``max_rounds``); remembers what it wrote."""

    def __init__(self, config: LlogConfig, topics: list[str], max_rounds: int = 2000) -> None:
        super().__init__(name="test-producer", daemon=True)
        self.config = config
        self.topics = topics
        self.max_rounds = max_rounds
        self.written: set[Row] = set()
        self.error: BaseException | None = None
        self._stop_event = threading.Event()
        self._lock = threading.Lock()

    def add_topic(self, topic: str) -> None:
        with self._lock:
            self.topics.append(topic)

    def run(self) -> None:
        try:
            with Connection(self.config) as conn, Writer(conn) as w:
                for r in range(self.max_rounds):
                    if self._stop_event.is_set():
                        return
                    with self._lock:
                        topics = list(self.topics)
                    groups = [
                        AppendGroup(t, p, [f"{t}/{p}/{r}/{i}".encode() for i in range(1 + (r + p) % 4)])
                        for t in topics
                        for p in range(PARTITIONS)
                    ]
                    for g, out in zip(groups, w.append_shared(groups), strict=True):
                        assert isinstance(out, AppendResult), out
                        self.written.update(
                            (g.topic, g.partition, out.start_offset + i, v)
                            for i, v in enumerate(g.records)
                            if isinstance(v, bytes)
                        )
                    self._stop_event.wait(0.1)  # pacing, not synchronisation
        except BaseException as exc:
            self.error = exc

    def stop(self) -> None:
        self._stop_event.set()
        self.join(60)
        assert not self.is_alive()
        if self.error is not None:
            raise self.error


def data_batches(query: Any) -> int:
    return sum(1 for p in query.recentProgress if p["numInputRows"] > 0)


def has_data(query: Any) -> bool:
    return data_batches(query) >= 1


def test_stream_restarted_three_times_holds_every_record_once(
    spark: SparkSession, config: LlogConfig, opts: dict[str, str], tmp_path: Path
) -> None:
    with Connection(config) as conn:
        Topics(conn).create("s-1", PARTITIONS)
    out, ckpt = tmp_path / "out", tmp_path / "checkpoint"

    def start(**trigger: Any) -> Any:
        df = (
            spark.readStream.format("llog")
            .options(**opts)
            .option("topicPattern", "s-.*")
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(MAX_PER_TRIGGER))
            .load()
        )
        return (
            df.select("topic", "partition", "offset", "value")
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(ckpt))
            .trigger(**trigger)
            .start()
        )

    # A backlog bigger than one trigger's worth, so maxOffsetsPerTrigger engages.
    with Connection(config) as conn, Writer(conn) as w:
        groups = [
            AppendGroup("s-1", p, [f"backlog/{p}/{i}".encode() for i in range(400)])
            for p in range(PARTITIONS)
        ]
        backlog = {
            ("s-1", p, out.start_offset + i, f"backlog/{p}/{i}".encode())
            for p, out in enumerate(w.append_shared(groups))
            if isinstance(out, AppendResult)
            for i in range(400)
        }
    assert len(backlog) == 400 * PARTITIONS
    producer = Producer(config, ["s-1"])
    producer.start()
    progress: list[dict[str, Any]] = []
    try:
        for run in range(4):  # the first run and three restarts
            if run == 1:
                # A new topic matching the pattern: its partitions are picked up.
                with Connection(config) as conn:
                    Topics(conn).create("s-2", PARTITIONS)
                producer.add_topic("s-2")
            q = start(processingTime="100 milliseconds")
            try:
                wait_until(partial(has_data, q), 120, f"a micro-batch with data in run {run}")
            finally:
                q.stop()
            assert q.exception() is None
            progress.extend(q.recentProgress)
    finally:
        producer.stop()

    final = start(availableNow=True)
    assert final.awaitTermination(300), "the availableNow run did not finish"
    assert final.exception() is None
    progress.extend(final.recentProgress)

    got = [(r.topic, r.partition, r.offset, bytes(r.value)) for r in spark.read.parquet(str(out)).collect()]
    assert len(got) == len(set(got)), "a record was delivered twice"
    expected = producer.written | backlog
    missing = expected - set(got)
    assert not missing, f"{len(missing)} records never delivered, e.g. {sorted(missing)[:3]}"
    assert set(got) == expected
    assert {t for t, _, _, _ in got} == {"s-1", "s-2"}
    sizes = [p["numInputRows"] for p in progress]
    assert max(sizes) == MAX_PER_TRIGGER and sum(n > 0 for n in sizes) >= 5


def test_stream_to_llog_sink(
    spark: SparkSession, config: LlogConfig, opts: dict[str, str], tmp_path: Path
) -> None:
    with Connection(config) as conn:
        Topics(conn).create("src", 2)
        Topics(conn).create("dst", 2)
        with Writer(conn) as w:
            w.append_shared(
                [AppendGroup("src", p, [f"{p}-{i}".encode() for i in range(50)]) for p in range(2)]
            )
    q = (
        spark.readStream.format("llog")
        .options(**opts)
        .option("topic", "src")
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("key", "value", "partition", "headers", "timestamp")
        .writeStream.format("llog")
        .options(**opts)
        .option("topic", "dst")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    assert q.awaitTermination(180)
    assert q.exception() is None
    back = spark.read.format("llog").options(**opts).option("topic", "dst").load().collect()
    assert sorted((r.partition, bytes(r.value)) for r in back) == sorted(
        (p, f"{p}-{i}".encode()) for p in range(2) for i in range(50)
    )


def test_stream_rejects_ending_offsets(spark: SparkSession, config: LlogConfig, opts: dict[str, str]) -> None:
    with Connection(config) as conn:
        Topics(conn).create("e", 1)
    df = (
        spark.readStream.format("llog")
        .options(**opts)
        .option("topic", "e")
        .option("endingOffsets", "latest")
        .load()
    )
    with pytest.raises(Exception, match="endingOffsets applies to batch reads only"):
        df.writeStream.format("memory").queryName(f"q{uuid.uuid4().hex[:6]}").start().awaitTermination(60)
