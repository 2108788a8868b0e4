"""The Kafka listener's edge against a real broker process: crafted batches
(decompression bombs in every codec, a batch of 30,000,000 empty records, a record
over the limit once inflated, CRC-valid batches with broken insides) are refused with
nothing written and bounded memory while other clients are served; connections that
never authenticate, trickle a frame, idle or come too many are cut off; idempotent
producers get Kafka's 5-batch window, content-checked, and epoch fencing; a standalone
offset commit cannot overwrite a live group's."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from llog.config import LlogConfig
from llog.connection import Connection
from llog.reader import Reader
from llog.topic.admin import Topics
from tests.broker_harness import PeakRss
from tests.kafka_crafted import hostile_batches, plain_batch, read_exactly
from tests.test_kafka import KafkaBroker, _exchange, kafka_broker

kafka = pytest.importorskip("kafka")
from kafka.protocol.consumer import FetchRequest, FetchResponse, OffsetCommitRequest, OffsetCommitResponse  # noqa: E402
from kafka.protocol.metadata import ApiVersionsRequest  # noqa: E402
from kafka.protocol.producer import (  # noqa: E402
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
)

MiB = 1 << 20
TOPIC = "edge"


@pytest.fixture(name="edge_conn")
def edge_conn_fixture(conn: Connection) -> Connection:
    Topics(conn).create(TOPIC, 2)
    return conn


def _produce(bootstrap: str, partition: int, records_set: bytes, topic: str = TOPIC,
             txn: str | None = None) -> tuple[int, int]:
    """(error code, base offset) of one raw Produce v9 (of transactional id ``txn``)."""
    P = ProduceRequest[9]
    req = P(transactional_id=txn, acks=-1, timeout_ms=30000, topic_data=[P.TopicProduceData(
        name=topic, partition_data=[P.TopicProduceData.PartitionProduceData(index=partition, records=records_set)])])
    [t] = _exchange(bootstrap, req, ProduceResponse).responses
    [p] = t.partition_responses
    return p.error_code, p.base_offset


def _fetch_values(bootstrap: str, partition: int, topic: str = TOPIC) -> list[bytes | None]:
    from kafka.record.default_records import DefaultRecordBatch

    R = FetchRequest[11]
    req = R(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0,
            session_epoch=-1, topics=[R.FetchTopic(topic=topic, partitions=[R.FetchTopic.FetchPartition(
                partition=partition, current_leader_epoch=-1, fetch_offset=0, log_start_offset=-1,
                partition_max_bytes=1 << 20)])], forgotten_topics_data=[], rack_id="")
    [t] = _exchange(bootstrap, req, FetchResponse).responses
    [p] = t.partitions
    assert p.error_code == 0
    data, out, pos = p.records or b"", [], 0
    while pos < len(data):
        length = struct.unpack_from(">i", data, pos + 8)[0] + 12
        out += [r.value for r in DefaultRecordBatch(data[pos:pos + length])]
        pos += length
    return out


def _next_offset(conn: Connection, partition: int) -> int:
    return Reader(conn).high_watermark(TOPIC, partition)[1]


class _Others:
    """Other clients working while the crafted batches go in: ``/health`` over HTTP and
    a consumer's Fetch on its own Kafka connection, in a loop; every answer kept."""

    def __init__(self, kb: KafkaBroker) -> None:
        self.kb = kb
        self.stop = threading.Event()
        self.health: list[int] = []
        self.fetches: list[int] = []
        self._threads = [threading.Thread(target=self._health), threading.Thread(target=self._fetch)]

    def __enter__(self) -> _Others:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self._threads:
            t.join()

    def _health(self) -> None:
        while not self.stop.is_set():
            self.health.append(self.kb.http.request("GET", "/health", timeout=30)[0])

    def _fetch(self) -> None:
        R = FetchRequest[11]
        host, port = self.kb.bootstrap.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=30) as s:
            while not self.stop.is_set():
                req = R(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                        session_id=0, session_epoch=-1, topics=[R.FetchTopic(topic=TOPIC, partitions=[
                            R.FetchTopic.FetchPartition(partition=1, current_leader_epoch=-1, fetch_offset=0,
                                                        log_start_offset=-1, partition_max_bytes=1 << 20)])],
                        forgotten_topics_data=[], rack_id="")
                req.with_header(correlation_id=len(self.fetches), client_id="other")
                s.sendall(req.encode(header=True, framed=True))
                size = struct.unpack(">i", read_exactly(s, 4))[0]
                resp = FetchResponse.decode(read_exactly(s, size), version=11, header=True)
                self.fetches.append(resp.responses[0].partitions[0].error_code)


@pytest.fixture(scope="module")
def crafted() -> list[tuple[str, bytes, int]]:
    """(what, batch, the error code it must get): built once, some take seconds."""
    return hostile_batches(LlogConfig().max_record_bytes)


def test_crafted_batches_are_refused_with_nothing_written_and_bounded_memory(
    config: LlogConfig, edge_conn: Connection, crafted: list[tuple[str, bytes, int]]
) -> None:
    with kafka_broker(config) as kb:
        assert _produce(kb.bootstrap, 1, plain_batch([b"for the consumer"]))[0] == 0
        rss = PeakRss(kb.http.proc.pid)
        rss.reset()
        with _Others(kb) as others:
            for _ in range(3):  # again and again: what one refusal held must not pile up
                for what, raw, code in crafted:
                    assert len(raw) <= config.max_record_bytes, what
                    assert _produce(kb.bootstrap, 0, raw) == (code, -1), what
                    assert _next_offset(edge_conn, 0) == 0, what
        growth = rss.growth()
        assert growth < 256 * MiB, f"broker RSS grew by {growth / MiB:.0f} MiB"
        # The other clients were answered all along, and correctly.
        assert others.health and set(others.health) == {200}
        assert others.fetches and set(others.fetches) == {0}
        assert kb.http.metric("llog_kafka_batches_refused_total") == 3 * len(crafted)
        # A good batch still goes in.
        assert _produce(kb.bootstrap, 0, plain_batch([b"ok"])) == (0, 0)


def _raw_connection(bootstrap: str) -> socket.socket:
    host, port = bootstrap.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=30)


def _closed_by_peer(s: socket.socket) -> bool:
    """Wait (up to the socket's timeout) for the broker to close ``s``."""
    try:
        while True:
            if not s.recv(65536):
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def _junk_sender(s: socket.socket, total: int) -> int:
    """Send ``total`` junk bytes after a 100 MiB frame size, until the broker closes;
    how many went out."""
    sent = 0
    try:
        s.sendall(struct.pack(">i", 100 * MiB))
        chunk = b"\xab" * MiB
        while sent < total:
            s.sendall(chunk)
            sent += len(chunk)
    except (BrokenPipeError, ConnectionResetError):
        pass
    return sent


def test_unauthenticated_connections_are_cut_at_the_preauth_cap(config: LlogConfig, edge_conn: Connection) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    with kafka_broker(config, LLOG_BROKER_TOKEN="s3cret") as kb:
        rss = PeakRss(kb.http.proc.pid)
        rss.reset()
        socks = [_raw_connection(kb.bootstrap) for _ in range(8)]
        sent: list[int] = [0] * 8
        threads = [threading.Thread(target=lambda i=i: sent.__setitem__(i, _junk_sender(socks[i], 48 * MiB)))
                   for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert all(_closed_by_peer(s) for s in socks)
        for s in socks:
            s.close()
        # Closed after the frame size, never read: what went out sat in socket buffers.
        assert all(n < 48 * MiB for n in sent), sent
        status, snap = kb.http.request("GET", "/metrics", headers={"authorization": "Bearer s3cret"})
        assert status == 200
        assert [s["value"] for s in snap["llog_kafka_connections_closed_total"]
                if s["labels"]["reason"] == "preauth_frame_too_large"] == [8]
        growth = rss.growth()
        assert growth < 64 * MiB, f"broker RSS grew by {growth / MiB:.0f} MiB"
        producer = confluent_kafka.Producer({
            "bootstrap.servers": kb.bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": "app", "sasl.password": "s3cret", "enable.idempotence": True})
        for i in range(10):
            producer.produce(TOPIC, b"v%d" % i, partition=0)
        assert producer.flush(30) == 0
    assert _next_offset(edge_conn, 0) == 10


def test_slow_idle_and_surplus_connections_are_closed(config: LlogConfig, edge_conn: Connection) -> None:
    env = {"LLOG_KAFKA_FRAME_TIMEOUT_S": "1", "LLOG_KAFKA_IDLE_TIMEOUT_S": "2",
           "LLOG_KAFKA_MAX_CONNECTIONS_PER_IP": "2"}
    versions = ApiVersionsRequest[3](client_software_name="edge", client_software_version="1")
    with kafka_broker(config, **env) as kb:
        # A frame that trickles: its size, a few bytes, then nothing.
        trickle = _raw_connection(kb.bootstrap)
        trickle.sendall(struct.pack(">i", 100) + b"\x00" * 10)
        # A connection that answers one request, then goes quiet.
        idle = _raw_connection(kb.bootstrap)
        versions.with_header(correlation_id=1, client_id="idle")
        idle.sendall(versions.encode(header=True, framed=True))
        read_exactly(idle, struct.unpack(">i", read_exactly(idle, 4))[0])
        # Those two fill the per-address limit of 2: a third is closed on arrival.
        surplus = _raw_connection(kb.bootstrap)
        assert _closed_by_peer(surplus)
        assert _closed_by_peer(trickle) and _closed_by_peer(idle)
        for s in (trickle, idle, surplus):
            s.close()
        assert kb.http.metric("llog_kafka_connections_refused_total", reason="max_connections_per_ip") == 1
        assert kb.http.metric("llog_kafka_connections_closed_total", reason="frame_timeout") == 1
        assert kb.http.metric("llog_kafka_connections_closed_total", reason="idle_timeout") == 1
        # Their slots are free again: a client that works is served.
        assert _produce(kb.bootstrap, 0, plain_batch([b"after"])) == (0, 0)


def _init_producer_id(bootstrap: str, pid: int = -1, epoch: int = -1, txn: str | None = None) -> Any:
    req = InitProducerIdRequest[4](transactional_id=txn, transaction_timeout_ms=60000, producer_id=pid,
                                   producer_epoch=epoch)
    return _exchange(bootstrap, req, InitProducerIdResponse)


def _idempotent(values: list[bytes], pid: int, epoch: int, seq: int) -> bytes:
    return plain_batch(values, producer=(pid, epoch, seq))


def test_idempotent_resends_of_the_last_five_batches_get_their_offsets(
    config: LlogConfig, edge_conn: Connection
) -> None:
    with kafka_broker(config) as kb:
        got = _init_producer_id(kb.bootstrap)
        pid, epoch = got.producer_id, got.producer_epoch
        assert got.error_code == 0 and pid >= 0
        batches = [[b"b%d-%d" % (s, i) for i in range(2)] for s in range(7)]  # sequences count records: 2 each
        offsets = [_produce(kb.bootstrap, 0, _idempotent(vs, pid, epoch, 2 * s)) for s, vs in enumerate(batches)]
        assert offsets == [(0, 2 * s) for s in range(7)]
        for s in (3, 6, 2, 5, 4):  # any of the last five, in any order
            assert _produce(kb.bootstrap, 0, _idempotent(batches[s], pid, epoch, 2 * s)) == (0, 2 * s)
        for s in (0, 1):  # older than the window: found in the log (spec §8.7, "Older batches")
            assert _produce(kb.bootstrap, 0, _idempotent(batches[s], pid, epoch, 2 * s)) == (0, 2 * s)
        # Other records under a used sequence: refused, never 46 (clients count 46 as delivered).
        assert _produce(kb.bootstrap, 0, _idempotent([b"X", b"Y"], pid, epoch, 12))[0] == 45
        assert _produce(kb.bootstrap, 0, _idempotent([b"X", b"Y"], pid, epoch, 0))[0] == 45
        assert _next_offset(edge_conn, 0) == 14
        assert _fetch_values(kb.bootstrap, 0) == [v for vs in batches for v in vs]
        # KIP-360: the same id, a new epoch, sequences from 0; the old epoch is fenced.
        bumped = _init_producer_id(kb.bootstrap, pid, epoch)
        assert (bumped.error_code, bumped.producer_id, bumped.producer_epoch) == (0, pid, epoch + 1)
        assert _produce(kb.bootstrap, 0, _idempotent([b"new"], pid, epoch + 1, 0)) == (0, 14)
        assert _produce(kb.bootstrap, 0, _idempotent([b"zombie"], pid, epoch, 14))[0] == 47
        assert _next_offset(edge_conn, 0) == 15


def test_a_retry_older_than_the_window_through_another_broker_gets_its_offsets(
    config: LlogConfig, edge_conn: Connection
) -> None:
    """Issue 55's Java-client sequence with raw requests: a batch committed through
    broker A whose answer the client never saw, then many more of its batches (and
    another producer's, of the same size) through broker B, then the old batch again."""
    with kafka_broker(config) as a, kafka_broker(config) as b:
        pid = _init_producer_id(a.bootstrap).producer_id
        other = _init_producer_id(b.bootstrap).producer_id
        frozen = [b"f0", b"f1", b"f2"]
        assert _produce(a.bootstrap, 1, _idempotent(frozen, pid, 0, 4721)) == (0, 0)
        expected = list(frozen)
        for i in range(12):  # far past the five batches the producer state remembers
            mine = [b"m%d-%d" % (i, j) for j in range(3)]
            theirs = [b"o%d-%d" % (i, j) for j in range(3)]
            assert _produce(b.bootstrap, 1, _idempotent(mine, pid, 0, 4724 + 3 * i))[0] == 0
            assert _produce(b.bootstrap, 1, _idempotent(theirs, other, 0, 3 * i))[0] == 0
            expected += mine + theirs
        before = _next_offset(edge_conn, 1)
        for broker in (b, a):  # the client's retry, wherever it goes: the original offsets, nothing appended
            assert _produce(broker.bootstrap, 1, _idempotent(frozen, pid, 0, 4721)) == (0, 0)
            mid = _idempotent([b"m3-0", b"m3-1", b"m3-2"], pid, 0, 4724 + 9)
            assert _produce(broker.bootstrap, 1, mid) == (0, 3 + 6 * 3)
        # Other records under the old sequence: refused (45), never acknowledged.
        assert _produce(b.bootstrap, 1, _idempotent([b"x", b"y", b"z"], pid, 0, 4721))[0] == 45
        # Older than anything the producer committed here: still out of order.
        assert _produce(b.bootstrap, 1, _idempotent([b"x", b"y", b"z"], pid, 0, 4000))[0] == 45
        assert _next_offset(edge_conn, 1) == before
        assert [r.value for r in Reader(edge_conn).scan(TOPIC, 1)] == expected


def test_a_sequence_reused_for_other_records_is_refused_on_every_broker(
    config: LlogConfig, edge_conn: Connection
) -> None:
    with kafka_broker(config) as a, kafka_broker(config) as b:
        # HTTP: one producer id and sequence, two brokers, two contents.
        tp = {"topic": TOPIC, "partition": 1, "producer_id": "p1", "sequence": 0}
        status, first = a.http.post("/produce", {"topic_partitions": [{**tp, "records": ["a"]}]})
        assert status == 200 and first["results"][0]["start_offset"] == 0
        status, second = b.http.post("/produce", {"topic_partitions": [{**tp, "records": ["b"]}]})
        assert status == 409 and second["results"][0]["error_type"] == "SequenceReused"
        status, again = b.http.post("/produce", {"topic_partitions": [{**tp, "records": ["a"]}]})
        assert status == 200 and again["results"][0]["duplicate"] and again["results"][0]["start_offset"] == 0
        # Kafka: the same through the two listeners.
        pid = _init_producer_id(a.bootstrap).producer_id
        assert _produce(a.bootstrap, 0, _idempotent([b"x"], pid, 0, 0)) == (0, 0)
        assert _produce(b.bootstrap, 0, _idempotent([b"y"], pid, 0, 0))[0] == 45
        # Every reader returns the first: the SDK, each broker's HTTP consume and Kafka fetch.
        assert [r.value for r in Reader(edge_conn).scan(TOPIC, 1)] == [b"a"]
        assert [r.value for r in Reader(edge_conn).scan(TOPIC, 0)] == [b"x"]
        for broker in (a, b):
            status, got = broker.http.post("/consume", {"topic_partitions": [
                {"topic": TOPIC, "partition": p, "fetch_offset": 0} for p in (0, 1)], "max_wait_ms": 0})
            assert status == 200
            assert [[r["value"] for r in tp["records"]] for tp in got["topic_partitions"]] == [["x"], ["a"]]
            assert _fetch_values(broker.bootstrap, 0) == [b"x"]
            assert _fetch_values(broker.bootstrap, 1) == [b"a"]


def _commit(bootstrap: str, group: str, generation: int, member: str, offset: int) -> int:
    R = OffsetCommitRequest[8]
    req = R(group_id=group, generation_id_or_member_epoch=generation, member_id=member, group_instance_id=None,
            topics=[R.OffsetCommitRequestTopic(name=TOPIC, partitions=[
                R.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                    partition_index=0, committed_offset=offset, committed_leader_epoch=-1,
                    committed_metadata="")])])
    [t] = _exchange(bootstrap, req, OffsetCommitResponse).topics
    return int(t.partitions[0].error_code)


@pytest.fixture(name="member")
def member_fixture(config: LlogConfig, edge_conn: Connection) -> Iterator[tuple[KafkaBroker, Any]]:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    with kafka_broker(config) as kb:
        assert _produce(kb.bootstrap, 0, plain_batch([b"a", b"b", b"c"]))[0] == 0
        consumer = confluent_kafka.Consumer({"bootstrap.servers": kb.bootstrap, "group.id": "live",
                                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.subscribe([TOPIC])
        try:
            deadline = time.monotonic() + 60
            while not consumer.assignment():  # joined: the group has a live member
                assert time.monotonic() < deadline
                consumer.poll(0.5)
            yield kb, consumer
        finally:
            consumer.close()


def test_a_standalone_commit_cannot_overwrite_a_live_groups_offsets(member: tuple[KafkaBroker, Any]) -> None:
    kb, consumer = member
    msg = consumer.poll(30)
    assert msg is not None and msg.error() is None
    consumer.commit(message=msg, asynchronous=False)
    committed = consumer.committed(consumer.assignment(), 30)
    assert 0 in {tp.partition for tp in committed if tp.offset == msg.offset() + 1}
    assert _commit(kb.bootstrap, "live", -1, "", 0) == 25  # UNKNOWN_MEMBER_ID
    assert _commit(kb.bootstrap, "live", 1, "nobody", 0) == 25
    # The member's offset stands; a group nobody is in takes standalone commits.
    assert {tp.partition: tp.offset for tp in consumer.committed(consumer.assignment(), 30)}[0] == msg.offset() + 1
    assert _commit(kb.bootstrap, "standalone", -1, "", 2) == 0
