"""The Kafka Java client (``kafka-clients`` 4.1, the client Kafka's own tools, Connect,
Streams and most JVM applications are built on) against the Kafka listener, on the
suite's real etcd and S3 servers: its admin client creates a topic, its producer
(idempotent by default, compressed) writes what llog's SDK reads back exactly, and its
consumer group reads what the SDK wrote and commits offsets the SDK sees."""

from __future__ import annotations

import threading
import time

import pytest

from llog.connection import Connection
from llog.groups.offsets import GroupOffsets
from llog.producer import BatchingProducer
from llog.reader import Reader
from llog.records import Record
from tests import java_client
from tests.broker_harness import shared_conn_with_topic_t  # noqa: F401 (the fixture shared_conn)
from tests.test_kafka import KafkaBroker, kb_fixture, shared_kb_fixture  # noqa: F401 (kb, shared_kb)


def test_java_admin_creates_a_topic_the_sdk_sees(kb: KafkaBroker, conn: Connection) -> None:
    # Before the configs of a created topic were returned, the Java admin client failed
    # every createTopics with a NullPointerException.
    out = java_client.run("admin", kb.bootstrap, "java-admin", "6")
    assert "partitions 6" in out
    assert any(line.startswith("topics ") and "java-admin" in line for line in out)
    assert conn.topic("java-admin", refresh=True).partitions == 6


@pytest.mark.parametrize(("compression", "idempotent"), [
    ("lz4", True), ("zstd", False), ("gzip", True), ("snappy", True), ("none", True)])
def test_java_producer_writes_what_the_sdk_reads(shared_kb: KafkaBroker, shared_conn: Connection, compression: str,
                                                 idempotent: bool) -> None:
    topic = f"java-{compression}-{shared_kb.workers}"  # a topic per case: the cases share the module's root
    java_client.run("admin", shared_kb.bootstrap, topic, "4")
    n = 400
    acks = [line.split() for line in java_client.run("produce", shared_kb.bootstrap, topic, str(n), compression,
                                                      str(idempotent).lower())]
    assert len(acks) == n
    placed = {int(i): (int(p), int(o)) for _, i, p, o in acks}
    for p in range(4):  # record i went to partition i % 4, in order: offsets 0..99 there
        assert sorted(o for q, o in placed.values() if q == p) == list(range(n // 4))
    with Reader(shared_conn) as r:
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


@pytest.mark.parametrize("static", [False, True], ids=["dynamic", "static-members"])
def test_java_consumers_share_a_topic_with_the_cooperative_sticky_assignor(
    kb: KafkaBroker, conn: Connection, static: bool,
) -> None:
    """Two Java consumers (cooperative-sticky, KIP-429's incremental rebalances; with
    ``group.instance.id`` too) split a topic: every record arrives once, the group's
    committed offsets reach the end of every partition."""
    topic, group = f"coop-{static}", f"coop-readers-{static}"
    java_client.run("admin", kb.bootstrap, topic, "6")
    members = [java_client.start("member", kb.bootstrap, topic, group,
                                 "org.apache.kafka.clients.consumer.CooperativeStickyAssignor",
                                 f"member-{i}" if static else "-", "4000") for i in range(2)]
    lines: list[list[str]] = [[], []]
    both_assigned = threading.Event()

    def read(i: int) -> None:
        assert members[i].stdout is not None
        for line in members[i].stdout:
            lines[i].append(line.strip())
            if all(any(x.startswith("assigned") and not x.endswith(" now 0") for x in got) for got in lines):
                both_assigned.set()

    readers = [threading.Thread(target=read, args=(i,)) for i in range(2)]
    for t in readers:
        t.start()
    try:
        deadline = time.monotonic() + 90
        while not both_assigned.wait(0.5):  # the second join moved partitions onto it
            for m in members:
                assert m.poll() is None, m.stderr.read() if m.stderr else ""
            assert time.monotonic() < deadline, lines
        with BatchingProducer(conn) as prod:
            for f in [prod.send_group(topic, p, [Record(f"{p}-{i}".encode()) for i in range(100)])
                      for p in range(6)]:
                f.result(timeout=30)
        for m in members:
            assert m.wait(180) == 0, m.stderr.read() if m.stderr else ""
    finally:
        for m in members:
            if m.poll() is None:
                m.kill()
        for t in readers:
            t.join(30)
    got = [tuple(line.split()[1:]) for member in lines for line in member if line.startswith("record ")]
    assert sorted(got) == sorted((str(p), str(i), f"{p}-{i}") for p in range(6) for i in range(100))  # each once
    offsets = GroupOffsets(conn, group)
    assert [c.offset if (c := offsets.get(topic, p)) else None for p in range(6)] == [100] * 6
