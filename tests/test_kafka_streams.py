"""Kafka Streams (``kafka-streams`` 4.1) against the Kafka listener, on the suite's real
etcd and S3 servers: the word count of 100,000 lines written through llog's SDK, with
the repartition topic and the compacted changelog Streams creates for itself, matches a
count made in Python — at least once, and exactly once (``exactly_once_v2``, llog's
transactions) through a broker killed with SIGKILL mid-count."""

from __future__ import annotations

import random
import struct
import subprocess
import time
from collections import Counter
from pathlib import Path

from llog.config import LlogConfig
from llog.connection import Connection
from llog.groups import Consumer
from llog.producer import BatchingProducer
from llog.records import Record
from llog.topic.admin import Topics
from tests import java_client
from tests.test_kafka import KafkaBroker, kafka_broker, kb_fixture  # noqa: F401 (the fixture kb)

WORDS = [f"w{i}" for i in range(500)]


def _lines(n: int) -> list[str]:
    rng = random.Random(7)
    return [" ".join(rng.choices(WORDS, k=rng.randint(1, 8))) for _ in range(n)]


def test_streams_word_count_matches_python(kb: KafkaBroker, conn: Connection, tmp_path: Path) -> None:
    lines = _lines(100_000)
    want = dict(Counter(w for line in lines for w in line.split()))
    topics = Topics(conn)
    topics.create("wc-lines", 3)
    topics.create("wc-counts", 3)
    with BatchingProducer(conn) as prod:
        futures = [prod.send_group("wc-lines", i % 3, [Record(line.encode()) for line in lines[i::3]])
                   for i in range(3)]
        for f in futures:
            f.result(timeout=120)
    app = java_client.start(kb.bootstrap, "wc-lines", "wc-counts", "llog-wordcount", str(tmp_path / "state"),
                            main_class="StreamsWordCount", stdin=subprocess.PIPE)
    try:
        assert app.stdout is not None
        assert app.stdout.readline().strip() == "running"
        # Each word's latest count, as Streams writes them (a poll waits for records).
        got: dict[str, int] = {}
        deadline = time.monotonic() + 240
        with Consumer(conn, "wc-check", ["wc-counts"]) as counts:
            while got != want and time.monotonic() < deadline:
                for rec in counts.poll(max_records=5000, timeout_s=1.0):
                    assert rec.key is not None and rec.value is not None
                    got[rec.key.decode()] = struct.unpack(">q", rec.value)[0]
        assert got == want
        # Streams made its internal topics through CreateTopics: the changelog compacted.
        assert conn.topic("llog-wordcount-counts-changelog", refresh=True).cleanup_policy == "compact"
        assert conn.topic("llog-wordcount-counts-repartition", refresh=True).cleanup_policy is None
    finally:
        if app.stdin is not None:
            app.stdin.close()
        try:
            app.wait(timeout=60)
        finally:
            app.kill()


def test_streams_exactly_once_word_count_survives_a_broker_kill(config: LlogConfig, conn: Connection,
                                                                tmp_path: Path) -> None:
    lines = _lines(100_000)
    want = dict(Counter(w for line in lines for w in line.split()))
    topics = Topics(conn)
    topics.create("eos-lines", 3)
    topics.create("eos-counts", 3)
    with BatchingProducer(conn) as prod:
        for f in [prod.send_group("eos-lines", i % 3, [Record(line.encode()) for line in lines[i::3]])
                  for i in range(3)]:
            f.result(timeout=120)
    # Streams warns of every transactional send's offset -1 (docs/kafka.md): to a file,
    # which no pipe left unread can block.
    log = (tmp_path / "streams.log").open("w")
    with kafka_broker(config) as a, kafka_broker(config) as b:
        app = java_client.start(f"{a.bootstrap},{b.bootstrap}", "eos-lines", "eos-counts", "llog-eos",
                                str(tmp_path / "state"), "exactly_once_v2", main_class="StreamsWordCount",
                                stdin=subprocess.PIPE, stderr=log)
        try:
            assert app.stdout is not None
            assert app.stdout.readline().strip() == "running"
            got: dict[str, int] = {}
            killed = False
            deadline = time.monotonic() + 300
            with Consumer(conn, "eos-check", ["eos-counts"]) as counts:
                while got != want and time.monotonic() < deadline:
                    for rec in counts.poll(max_records=5000, timeout_s=1.0):
                        assert rec.key is not None and rec.value is not None
                        got[rec.key.decode()] = struct.unpack(">q", rec.value)[0]
                    if not killed and got:  # mid-count: transactions in flight on both brokers
                        a.http.kill()
                        killed = True
            assert killed
            # Exactly once: a record processed twice would have counted its words twice.
            assert got == want, (tmp_path / "streams.log").read_text()[-3000:]
        finally:
            if app.stdin is not None:
                app.stdin.close()
            try:
                app.wait(timeout=60)
            finally:
                app.kill()
                log.close()
