"""The Kafka Java client (``kafka-clients`` 4.1, the client Kafka's own tools, Connect,
Streams and most JVM applications are built on) against the Kafka listener, on the
suite's real etcd and S3 servers: its admin client creates a topic, its producer
(idempotent by default, compressed) writes what llog's SDK reads back exactly, and its
consumer group reads what the SDK wrote and commits offsets the SDK sees."""

from __future__ import annotations

import pytest

from llog.connection import Connection
from llog.groups.offsets import GroupOffsets
from llog.producer import BatchingProducer
from llog.reader import Reader
from llog.records import Record
from tests import java_client
from tests.test_kafka import KafkaBroker, kb_fixture  # noqa: F401 (the fixture kb)


def test_java_admin_creates_a_topic_the_sdk_sees(kb: KafkaBroker, conn: Connection) -> None:
    # Before the configs of a created topic were returned, the Java admin client failed
    # every createTopics with a NullPointerException.
    out = java_client.run("admin", kb.bootstrap, "java-admin", "6")
    assert "partitions 6" in out
    assert any(line.startswith("topics ") and "java-admin" in line for line in out)
    assert conn.topic("java-admin", refresh=True).partitions == 6


@pytest.mark.parametrize(("compression", "idempotent"), [("lz4", True), ("zstd", False), ("none", True)])
def test_java_producer_writes_what_the_sdk_reads(kb: KafkaBroker, conn: Connection, compression: str,
                                                 idempotent: bool) -> None:
    topic = f"java-{compression}"
    java_client.run("admin", kb.bootstrap, topic, "4")
    n = 400
    acks = [line.split() for line in java_client.run("produce", kb.bootstrap, topic, str(n), compression,
                                                      str(idempotent).lower())]
    assert len(acks) == n
    placed = {int(i): (int(p), int(o)) for _, i, p, o in acks}
    for p in range(4):  # record i went to partition i % 4, in order: offsets 0..99 there
        assert sorted(o for q, o in placed.values() if q == p) == list(range(n // 4))
    with Reader(conn) as r:
        for p in range(4):
            recs = list(r.scan(topic, p, 0))
            want = [i for i in range(n) if i % 4 == p]
            assert [(rec.key, rec.value, list(rec.headers)) for rec in recs] == [
                (f"k{i}".encode(), f"v{i}".encode(), [("i", str(i).encode())]) for i in want]
            assert [placed[i] for i in want] == [(p, o) for o in range(len(want))]


def test_java_consumer_group_reads_what_the_sdk_wrote_and_commits(kb: KafkaBroker, conn: Connection) -> None:
    topic = "java-group"
    java_client.run("admin", kb.bootstrap, topic, "4")
    with BatchingProducer(conn) as prod:
        futures = [prod.send_group(topic, p, [Record(f"v{p}-{i}".encode(), f"k{i}".encode()) for i in range(50)])
                   for p in range(4)]
        for f in futures:
            f.result(timeout=30)
    out = java_client.run("consume", kb.bootstrap, topic, "java-readers", "200")
    records = [line.split() for line in out if line.startswith("record ")]
    got = {(int(p), int(o)): (k, v) for _, p, o, k, v, _ in records}
    assert len(records) == len(got) == 200  # each once
    assert got == {(p, i): (f"k{i}", f"v{p}-{i}") for p in range(4) for i in range(50)}
    assert sorted(line for line in out if line.startswith("committed ")) == [f"committed {p} 50" for p in range(4)]
    offsets = GroupOffsets(conn, "java-readers")
    for p in range(4):
        committed = offsets.get(topic, p)
        assert committed is not None and committed.offset == 50
