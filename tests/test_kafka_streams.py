"""Kafka Streams (``kafka-streams`` 4.1, at-least-once) against the Kafka listener, on
the suite's real etcd and S3 servers: the word count of 100,000 lines written through
llog's SDK, with the repartition topic and the compacted changelog Streams creates for
itself, matches a count made in Python."""

from __future__ import annotations

import random
import struct
import subprocess
import time
from collections import Counter
from pathlib import Path

from llog.connection import Connection
from llog.groups import Consumer
from llog.producer import BatchingProducer
from llog.records import Record
from llog.topics import Topics
from tests import java_client
from tests.test_kafka import KafkaBroker, kb_fixture  # noqa: F401 (the fixture kb)

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
