"""The Kafka listener against real Kafka clients (kafka-python, confluent-kafka),
on the suite's real etcd and S3 servers: records produced through Kafka read back
through Kafka and through llog's own SDK, and the reverse."""

from __future__ import annotations

import asyncio
import functools
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from llog.config import LlogConfig
from llog.connection import Connection
from llog.groups.offsets import GroupOffsets
from llog.producer import BatchingProducer
from llog.reader import Reader
from llog.records import Record
from llog.topic.admin import Topics
from tests.broker_harness import (
    BrokerProcess,
    broker_process,
    conn_with_topic_t,  # noqa: F401 (the fixture conn, with topic t)
    shared_conn_with_topic_t,  # noqa: F401 (the fixture shared_conn)
)
from tests.conftest import wait_until
from tests.kafka_crafted import exchange

kafka = pytest.importorskip("kafka")


@dataclass(frozen=True)
class KafkaBroker:
    http: BrokerProcess
    bootstrap: str
    #: Its processes (``llog broker --workers``), each a Kafka node.
    workers: int = 1


@contextmanager
def kafka_broker(cfg: LlogConfig, *args: str, **env: str) -> Iterator[KafkaBroker]:
    with broker_process(cfg, "--kafka-port", "0", *args, **env) as b:
        assert b.proc.stdout is not None
        line = b.proc.stdout.readline()
        assert "Kafka listener on port " in line, line
        workers = int(args[args.index("--workers") + 1]) if "--workers" in args else 1
        if workers > 1:
            assert "worker processes" in b.proc.stdout.readline()
        yield KafkaBroker(b, f"127.0.0.1:{int(line.rsplit(' ', 1)[1])}", workers)


@pytest.fixture(name="kb", params=[1, 2], ids=["1-worker", "2-workers"])
def kb_fixture(config: LlogConfig, conn: Connection, request: pytest.FixtureRequest) -> Iterator[KafkaBroker]:
    """A broker with a Kafka listener: one process, and (a second run of each test) two
    workers, each its own Kafka node, the bootstrap port worker 0's."""
    with kafka_broker(config, "--workers", str(request.param)) as b:
        yield b


@pytest.fixture(name="shared_kb", scope="module", params=[1, 2], ids=["1-worker", "2-workers"])
def shared_kb_fixture(shared_conn: Connection, request: pytest.FixtureRequest) -> Iterator[KafkaBroker]:
    """``kb`` for a whole module, on ``shared_conn`` (tests/broker_harness.py): for the
    cases of a test whose requests must be refused and change nothing."""
    with kafka_broker(shared_conn.config, "--workers", str(request.param)) as b:
        yield b


def _records(n: int) -> list[tuple[int, bytes | None, bytes, list[tuple[str, bytes]]]]:
    """(partition, key, value, headers) of ``n`` records over topic t's 4 partitions."""
    return [(i % 4, None if i % 5 == 0 else f"k{i}".encode(), f"value-{i}".encode(),
             [("h", str(i).encode())] if i % 3 == 0 else []) for i in range(n)]


def test_kafka_python_produce_and_fetch_round_trip(kb: KafkaBroker, conn: Connection) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    sent = _records(400)
    producer = KafkaProducer(bootstrap_servers=kb.bootstrap, acks="all", linger_ms=5)
    futures = [producer.send("t", value=v, key=k, headers=h, partition=p) for p, k, v, h in sent]
    producer.flush()
    offsets = [f.get(timeout=30) for f in futures]
    producer.close()
    by_partition: dict[int, list[tuple[bytes | None, bytes, list[tuple[str, bytes]]]]] = {p: [] for p in range(4)}
    for p, k, v, h in sent:
        by_partition[p].append((k, v, h))
    assert sorted(m.offset for m in offsets if m.partition == 0) == list(range(100))

    consumer = KafkaConsumer(bootstrap_servers=kb.bootstrap, enable_auto_commit=False, consumer_timeout_ms=5000)
    tps = [TopicPartition("t", p) for p in range(4)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    got: dict[int, list[tuple[bytes | None, bytes, list[tuple[str, bytes]]]]] = {p: [] for p in range(4)}
    for msg in consumer:
        assert msg.offset == len(got[msg.partition])
        got[msg.partition].append((msg.key, msg.value, list(msg.headers)))
        if sum(map(len, got.values())) == len(sent):
            break
    consumer.close()
    assert got == by_partition

    # The same records through llog's own reader: keys, headers and timestamps kept.
    reader = Reader(conn)
    recs = list(reader.scan("t", 3, 0))
    assert [(r.key, r.value, list(r.headers)) for r in recs] == by_partition[3]
    assert all(r.timestamp > 0 for r in recs)
    # ... and through the HTTP broker.
    status, body = kb.http.post("/consume", {"topic_partitions": [{"topic": "t", "partition": 3, "fetch_offset": 0}],
                                             "max_wait_ms": 0})
    assert status == 200
    got_http = [(None if r["key"] is None else r["key"].encode(), r["value"].encode(),
                 [(k, v.encode()) for k, v in r["headers"]]) for r in body["topic_partitions"][0]["records"]]
    assert got_http == by_partition[3]


def test_confluent_kafka_reads_what_the_sdk_wrote(kb: KafkaBroker, conn: Connection) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    with BatchingProducer(conn) as p:
        for i in range(50):
            p.send_group("t", 1, [Record(f"sdk-{i}".encode(), key=b"k", headers=(("src", b"sdk"),))]).result()
    consumer = confluent_kafka.Consumer({"bootstrap.servers": kb.bootstrap, "group.id": "g-read",
                                         "enable.auto.commit": False})
    consumer.assign([confluent_kafka.TopicPartition("t", 1, confluent_kafka.OFFSET_BEGINNING)])
    got = []
    while len(got) < 50:
        msg = consumer.poll(10)
        assert msg is not None, f"no record after {len(got)}"
        assert msg.error() is None, msg.error()
        got.append((msg.offset(), msg.key(), msg.value(), msg.headers()))
    consumer.close()
    assert got == [(i, b"k", f"sdk-{i}".encode(), [("src", b"sdk")]) for i in range(50)]


def test_librdkafka_is_told_a_fetch_error_not_handed_a_response_it_cannot_parse(
    kb: KafkaBroker, conn: Connection,
) -> None:
    """A partition answered with an error carries an empty record set, as Kafka's does:
    with a null one librdkafka dropped the response as malformed ("invalid
    MessageSetSize -1") and retried, never reporting the error (a draining broker's
    NOT_LEADER_OR_FOLLOWER was retried ~100 times a second in the rolling upgrade)."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    with BatchingProducer(conn) as p:
        p.send_group("t", 2, [Record(b"only")]).result()
    logs: list[str] = []
    consumer = confluent_kafka.Consumer({"bootstrap.servers": kb.bootstrap, "group.id": "g-err",
                                         "enable.auto.commit": False, "auto.offset.reset": "error",
                                         "logger": _Lines(logs)})
    consumer.assign([confluent_kafka.TopicPartition("t", 2, 5)])  # past the end: OFFSET_OUT_OF_RANGE
    try:
        msg = consumer.poll(10)
        assert msg is not None and msg.error() is not None, "the out-of-range fetch was never reported"
        assert msg.error().code() == confluent_kafka.KafkaError._AUTO_OFFSET_RESET, msg.error()
        assert "Offset out of range" in msg.error().str(), msg.error()
    finally:
        consumer.close()
    assert not [line for line in logs if "MessageSetSize" in line or "parse failure" in line], logs


class _Lines:
    """A ``logging.Logger`` stand-in for librdkafka's ``logger`` setting: keeps the lines."""

    def __init__(self, into: list[str]) -> None:
        self._into = into

    def log(self, _level: int, fmt: str, *args: object) -> None:
        self._into.append(fmt % args if args else fmt)


def test_confluent_kafka_produces_100k_records_with_every_codec(kb: KafkaBroker, conn: Connection) -> None:
    """100,000 records with keys and headers, 20,000 per codec (one partition each),
    read back through Kafka exactly once and in order; the SDK reads the same."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    codecs = ("none", "gzip", "snappy", "lz4", "zstd")
    per_codec = 20_000
    Topics(conn).create("codecs", len(codecs))
    for partition, codec in enumerate(codecs):
        producer = confluent_kafka.Producer({"bootstrap.servers": kb.bootstrap, "compression.type": codec,
                                             "linger.ms": 5, "enable.idempotence": True})
        errors: list[object] = []
        for i in range(per_codec):
            while True:
                try:
                    producer.produce("codecs", value=f"{codec}-{i}".encode() * 3, key=str(i).encode(),
                                     headers=[("codec", codec.encode()), ("i", str(i).encode())],
                                     partition=partition, on_delivery=functools.partial(_note_error, errors))
                    break
                except BufferError:
                    producer.poll(0.05)
        assert producer.flush(120) == 0
        assert errors == []
    consumer = confluent_kafka.Consumer({"bootstrap.servers": kb.bootstrap, "group.id": "codecs-check",
                                         "enable.auto.commit": False})
    consumer.assign([confluent_kafka.TopicPartition("codecs", p, confluent_kafka.OFFSET_BEGINNING)
                     for p in range(len(codecs))])
    got: dict[int, list[tuple[int, bytes, bytes, list[tuple[str, bytes]]]]] = {p: [] for p in range(len(codecs))}
    deadline = time.monotonic() + 120
    while sum(map(len, got.values())) < per_codec * len(codecs):
        assert time.monotonic() < deadline, {p: len(v) for p, v in got.items()}
        for msg in consumer.consume(10_000, timeout=1):
            assert msg.error() is None, msg.error()
            got[msg.partition()].append((msg.offset(), msg.key(), msg.value(), msg.headers()))
    consumer.close()
    for partition, codec in enumerate(codecs):
        assert got[partition] == [(i, str(i).encode(), f"{codec}-{i}".encode() * 3,
                                   [("codec", codec.encode()), ("i", str(i).encode())]) for i in range(per_codec)]
    last = list(Reader(conn).scan("codecs", 4, per_codec - 1))
    assert [(r.key, r.value) for r in last] == [(str(per_codec - 1).encode(), f"zstd-{per_codec - 1}".encode() * 3)]


def _note_error(errors: list[object], err: object, _msg: object) -> None:
    if err is not None:
        errors.append(err)


def test_consumer_group_rebalances_when_a_member_is_killed(kb: KafkaBroker, conn: Connection, tmp_path: Path) -> None:
    """3 members over 12 partitions; one is killed with SIGKILL midway. Every record is
    read, and a record read twice is one the killed member read after its last commit
    of that partition (at-least-once, never a replay of committed records)."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    Topics(conn).create("events", 12)
    total = 3000
    producer = confluent_kafka.Producer({"bootstrap.servers": kb.bootstrap, "linger.ms": 5})
    for i in range(total):
        producer.produce("events", value=str(i).encode(), partition=i % 12)
    assert producer.flush(60) == 0
    outs = [tmp_path / f"member-{i}.txt" for i in range(3)]
    procs = [subprocess.Popen([sys.executable, str(WORKERS / "kafka_group_consumer.py"), kb.bootstrap, "g3", "events",
                               str(out)], stdout=subprocess.PIPE, text=True) for out in outs]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        wait_until(lambda: len(_reads(outs)) >= total // 4, 120, "a quarter of the records read")
        procs[0].kill()
        procs[0].wait()
        offsets = GroupOffsets(conn, "g3")
        wait_until(lambda: all((c := offsets.get("events", p)) is not None and c.offset == total // 12
                               for p in range(12)), 120, "every partition committed to its end")
    finally:
        for p in procs[1:]:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(timeout=60)
    reads = [r for out in outs for r in _lines(out, "R")]
    assert set(reads) == {(p, o) for p in range(12) for o in range(total // 12)}
    killed_commits: dict[int, int] = {}
    for p, o in _lines(outs[0], "C"):
        killed_commits[p] = max(killed_commits.get(p, 0), o)
    twice = {r for r in set(reads) if reads.count(r) > 1}
    assert all(o >= killed_commits.get(p, 0) for p, o in twice), sorted(twice)[:10]


WORKERS = Path(__file__).resolve().parent / "workers"


def _lines(path: Path, kind: str) -> list[tuple[int, int]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == kind:
            out.append((int(parts[1]), int(parts[2])))
    return out


def _reads(outs: list[Path]) -> set[tuple[int, int]]:
    return {r for out in outs for r in _lines(out, "R")}


def test_sasl_plain_with_the_broker_token(config: LlogConfig, conn: Connection) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.errors import KafkaError

    with kafka_broker(config, LLOG_BROKER_TOKEN="s3cret") as kbt:
        producer = KafkaProducer(bootstrap_servers=kbt.bootstrap, security_protocol="SASL_PLAINTEXT",
                                 sasl_mechanism="PLAIN", sasl_plain_username="app", sasl_plain_password="s3cret")
        assert producer.send("t", b"authenticated", partition=0).get(timeout=30).offset == 0
        producer.close()
        # api_version given: otherwise kafka-python's constructor spends 30 s probing
        # versions of a broker that refuses it, before max_block_ms applies.
        with pytest.raises(KafkaError):
            KafkaProducer(bootstrap_servers=kbt.bootstrap, security_protocol="SASL_PLAINTEXT",
                          sasl_mechanism="PLAIN", sasl_plain_username="app", sasl_plain_password="wrong",
                          max_block_ms=5000, api_version=(3, 8)).send("t", b"no", partition=0).get(timeout=10)
        with pytest.raises(KafkaError):  # no SASL at all: refused
            KafkaProducer(bootstrap_servers=kbt.bootstrap, max_block_ms=5000, api_version=(3, 8),
                          request_timeout_ms=5000).send("t", b"no", partition=0).get(timeout=10)
        consumer = KafkaConsumer(bootstrap_servers=kbt.bootstrap, security_protocol="SASL_PLAINTEXT",
                                 sasl_mechanism="PLAIN", sasl_plain_username="app", sasl_plain_password="s3cret",
                                 consumer_timeout_ms=5000)
        consumer.assign([TopicPartition("t", 0)])
        consumer.seek(TopicPartition("t", 0), 0)
        assert [m.value for m in consumer] == [b"authenticated"]
        consumer.close()


def test_aiokafka_produces_and_consumes_in_a_group(kb: KafkaBroker, conn: Connection) -> None:
    aiokafka = pytest.importorskip("aiokafka")

    async def run() -> list[bytes]:
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=kb.bootstrap, enable_idempotence=True)
        await producer.start()
        try:
            for i in range(100):
                await producer.send_and_wait("t", f"a{i}".encode(), key=b"k", partition=2)
        finally:
            await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer("t", bootstrap_servers=kb.bootstrap, group_id="aio",
                                             auto_offset_reset="earliest", enable_auto_commit=False)
        await consumer.start()
        got: list[bytes] = []
        try:
            while len(got) < 100:
                batch = await consumer.getmany(timeout_ms=10_000)
                assert batch, f"nothing after {len(got)} records"
                for msgs in batch.values():
                    got.extend(m.value for m in msgs)
            await consumer.commit()
        finally:
            await consumer.stop()
        return got

    assert asyncio.run(run()) == [f"a{i}".encode() for i in range(100)]
    committed = GroupOffsets(conn, "aio").get("t", 2)
    assert committed is not None and committed.offset == 100


def test_list_offsets_and_create_topics(kb: KafkaBroker, conn: Connection) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(bootstrap_servers=kb.bootstrap)
    admin.create_topics([NewTopic("made", num_partitions=3, replication_factor=3,
                                  topic_configs={"retention.ms": "3600000"})])
    assert conn.topic("made", refresh=True).partitions == 3
    assert conn.topic("made").retention_ms == 3_600_000
    with pytest.raises(TopicAlreadyExistsError):
        admin.create_topics([NewTopic("made", num_partitions=3, replication_factor=1)])
    admin.close()

    producer = KafkaProducer(bootstrap_servers=kb.bootstrap)
    stamps = [1_700_000_000_000 + 1000 * i for i in range(10)]
    for ts in stamps:
        producer.send("made", b"x", partition=1, timestamp_ms=ts)
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=kb.bootstrap)
    tp = TopicPartition("made", 1)
    assert consumer.beginning_offsets([tp]) == {tp: 0}
    assert consumer.end_offsets([tp]) == {tp: 10}
    found = consumer.offsets_for_times({tp: stamps[4] - 1})[tp]
    assert found is not None and (found.offset, found.timestamp) == (4, stamps[4])
    assert consumer.offsets_for_times({tp: stamps[-1] + 1})[tp] is None
    consumer.close()


def test_an_unsupported_api_is_answered_not_dropped(kb: KafkaBroker) -> None:
    from kafka.protocol.admin import (
        DescribeAclsRequest,
        DescribeAclsResponse,
        ListPartitionReassignmentsRequest,
        ListPartitionReassignmentsResponse,
    )

    req = ListPartitionReassignmentsRequest[0](timeout_ms=1000, topics=None)
    resp = _exchange(kb.bootstrap, req, ListPartitionReassignmentsResponse)
    assert resp.error_code == 35  # UNSUPPORTED_VERSION
    # Served, but without an authorizer: SECURITY_DISABLED, as Kafka answers.
    acls = _exchange(kb.bootstrap, DescribeAclsRequest[1](
        resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1, principal_filter=None,
        host_filter=None, operation=1, permission_type=1), DescribeAclsResponse)
    assert acls.error_code == 54
    status, snap = kb.http.request("GET", "/metrics")
    assert status == 200
    assert {s["labels"]["api"] for s in snap["llog_kafka_requests_total"]} >= {"UNSUPPORTED"}


def test_oversized_and_cut_off_frames_close_only_their_connection(kb: KafkaBroker, conn: Connection) -> None:
    from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

    host, port = kb.bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(struct.pack(">i", 2**31 - 1))  # a frame no broker would buffer
        assert s.recv(1) == b""
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(struct.pack(">i", 1000) + b"\x00\x00\x00\x09")  # a produce cut off mid-request
    got = _exchange(kb.bootstrap, ApiVersionsRequest[3](client_software_name="t", client_software_version="1"),
                    ApiVersionsResponse)
    assert got.error_code == 0
    assert Reader(conn).high_watermark("t", 0) == (0, 0)  # nothing written


def test_a_garbled_request_closes_only_its_connection(kb: KafkaBroker) -> None:
    from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

    host, port = kb.bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as s:
        body = struct.pack(">hhi", 3, 12, 1) + b"\xff" * 7  # Metadata v12 whose body is nonsense
        s.sendall(struct.pack(">i", len(body)) + body)
        assert s.recv(1) == b""  # closed, no answer
    got = _exchange(kb.bootstrap, ApiVersionsRequest[3](client_software_name="t", client_software_version="1"),
                    ApiVersionsResponse)
    assert got.error_code == 0


def _exchange(bootstrap: str, req: Any, response_cls: Any) -> Any:
    """One request on a fresh connection, its response decoded (correlation id checked)."""
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as s:
        resp = response_cls.decode(exchange(s, req, 7), version=req.API_VERSION, header=True)
    assert resp.header.correlation_id == 7
    return resp


def test_two_brokers_both_in_metadata_and_either_serves_any_partition(config: LlogConfig, conn: Connection) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.protocol.metadata import MetadataRequest, MetadataResponse

    with kafka_broker(config) as a, kafka_broker(config) as b:
        meta = _exchange(a.bootstrap, MetadataRequest[8](topics=None, allow_auto_topic_creation=False,
                                                         include_cluster_authorized_operations=False,
                                                         include_topic_authorized_operations=False),
                         MetadataResponse)
        ports = {int(x.bootstrap.rsplit(":", 1)[1]) for x in (a, b)}
        assert {n.port for n in meta.brokers} == ports
        (topic,) = [t for t in meta.topics if t.name == "t"]
        assert len({p.leader_id for p in topic.partitions}) == 2  # the partitions spread over both
        producer = KafkaProducer(bootstrap_servers=b.bootstrap)
        for p in range(4):
            producer.send("t", f"p{p}".encode(), partition=p)
        producer.flush()
        producer.close()
        consumer = KafkaConsumer(bootstrap_servers=a.bootstrap, consumer_timeout_ms=5000)
        tps = [TopicPartition("t", p) for p in range(4)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        assert sorted(m.value for m in consumer) == [b"p0", b"p1", b"p2", b"p3"]
        consumer.close()


def test_the_docs_list_every_served_api_at_its_versions() -> None:
    from llog.kafka.apis import API_BY_KEY

    text = (Path(__file__).resolve().parent.parent / "docs" / "kafka.md").read_text()
    section = text[text.index("\n## APIs and versions\n"):]
    section = section[: section.index("\n## ", 1)]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[1].isdigit():
            rows[int(cells[1])] = (cells[0], cells[2])
    served = {key: (api.request.name.removesuffix("Request"),
                    f"{api.min_version}\N{EN DASH}{api.max_version}" if api.min_version != api.max_version
                    else str(api.min_version)) for key, api in API_BY_KEY.items()}
    assert rows == served


def test_kafka_producer_ids_count_sequences_in_records() -> None:
    from llog.codec.etcd_values.producers import ProducerState
    from llog.errors import SequenceError
    from llog.write.commit_plan import sequence_verdict
    from llog.write.validation import ProducerSequence

    last = ProducerState(sequence=10, start_offset=100, end_offset=104, append_id="a", data_key="d", updated_at_ms=0)
    kafka_id, llog_id = "kafka.7", "app-1"
    assert sequence_verdict("t", 0, ProducerSequence(kafka_id, 15), last, 3) is None  # 10 + 5 records
    assert sequence_verdict("t", 0, ProducerSequence(kafka_id, 10), last, 5) == last.last  # the retry
    assert isinstance(sequence_verdict("t", 0, ProducerSequence(kafka_id, 11), last, 3), SequenceError)
    assert sequence_verdict("t", 0, ProducerSequence(llog_id, 11), last, 3) is None  # batches for llog ids
    wrapped = ProducerState(sequence=2**31 - 2, start_offset=0, end_offset=4, append_id="a", data_key="d",
                            updated_at_ms=0)
    assert sequence_verdict("t", 0, ProducerSequence(kafka_id, 3), wrapped, 1) is None  # Kafka's int32 wrap


def test_idempotent_producer_across_a_broker_kill_writes_each_record_once(
    config: LlogConfig, conn: Connection
) -> None:
    """Two brokers; the idempotent producer's broker A is killed with SIGKILL while
    batches are in flight. librdkafka retries them through B once A's registration
    lease runs out; every record is in the log exactly once, in order."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    Topics(conn).create("once", 2)
    with kafka_broker(config, LLOG_SESSION_TTL_S="3") as a, kafka_broker(config, LLOG_SESSION_TTL_S="3"):
        producer = confluent_kafka.Producer({"bootstrap.servers": a.bootstrap, "enable.idempotence": True,
                                             "linger.ms": 20, "message.timeout.ms": 120_000})
        errors: list[object] = []
        total = 4000
        for i in range(total):
            producer.produce("once", value=str(i).encode(), partition=i % 2,
                             on_delivery=functools.partial(_note_error, errors))
            if i == 1000:
                assert producer.flush(30) == 0  # acknowledged by A; the client knows both brokers now
            if i == 2000:
                producer.poll(0.05)  # batches in flight to A as it dies
                a.http.kill()
            producer.poll(0)
        assert producer.flush(120) == 0
        assert errors == []
    reader = Reader(conn)
    for p in range(2):
        assert [int(r.value) for r in reader.scan("once", p, 0)] == list(range(p, total, 2))


def test_spark_reads_what_confluent_kafka_produced(kb: KafkaBroker, conn: Connection, config: LlogConfig,
                                                   spark: Any) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from tests.test_spark_batch import spark_options

    Topics(conn).create("to-spark", 2)
    producer = confluent_kafka.Producer({"bootstrap.servers": kb.bootstrap, "linger.ms": 5})
    sent = [(i % 2, None if i % 3 == 0 else f"k{i}".encode(), f"v{i}".encode(), 1_700_000_000_000 + i,
             [("n", str(i).encode())]) for i in range(40)]
    for p, k, v, ts, h in sent:
        producer.produce("to-spark", value=v, key=k, partition=p, timestamp=ts, headers=h)
    assert producer.flush(30) == 0
    rows = (spark.read.format("llog").options(**spark_options(config)).option("topic", "to-spark")
            .option("startingOffsets", "earliest").load()
            .select("partition", "offset", "key", "value", "timestamp", "headers").collect())
    got = sorted((r.partition, r.offset, r.key, r.value, int(r.timestamp.timestamp() * 1000),
                  [(h.key, bytes(h.value)) for h in r.headers]) for r in rows)
    offsets = {0: 0, 1: 0}
    want = []
    for p, k, v, ts, h in sent:
        want.append((p, offsets[p], k, v, ts, h))
        offsets[p] += 1
    assert [(p, o, None if k is None else bytes(k), bytes(v), ts, h) for p, o, k, v, ts, h in got] == sorted(want)


def test_tls_with_sasl(config: LlogConfig, conn: Connection, tmp_path: Path) -> None:
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    with kafka_broker(config, LLOG_KAFKA_TLS_CERT_FILE=str(cert), LLOG_KAFKA_TLS_KEY_FILE=str(key),
                      LLOG_BROKER_TOKEN="tok") as kbt:
        producer = KafkaProducer(bootstrap_servers=kbt.bootstrap, security_protocol="SASL_SSL", ssl_cafile=str(cert),
                                 sasl_mechanism="PLAIN", sasl_plain_username="u", sasl_plain_password="tok")
        assert producer.send("t", b"over tls", partition=1).get(timeout=30).offset == 0
        producer.close()
        with pytest.raises(KafkaError):  # plaintext to a TLS listener
            KafkaProducer(bootstrap_servers=kbt.bootstrap, security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                          sasl_plain_username="u", sasl_plain_password="tok", max_block_ms=5000,
                          request_timeout_ms=5000).send("t", b"no", partition=1).get(timeout=10)
    assert [r.value for r in Reader(conn).scan("t", 1, 0)] == [b"over tls"]


def test_a_busy_kafka_port_is_a_one_line_error(config: LlogConfig) -> None:
    from tests.conftest import config_env

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "llog", "broker", "--port", "0", "--kafka-port", str(port)],
                              env=config_env(config), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        f"llog: error: Kafka listener cannot listen on 127.0.0.1:{port}: Address already in use"], proc.stderr


def test_kafka_python_group_of_two_shares_the_partitions(kb: KafkaBroker, conn: Connection) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    producer = KafkaProducer(bootstrap_servers=kb.bootstrap)
    for i in range(400):
        producer.send("t", str(i).encode(), partition=i % 4)
    producer.flush()
    producer.close()
    seen: dict[str, list[tuple[int, int]]] = {"a": [], "b": []}
    assigned: dict[str, set[Any]] = {"a": set(), "b": set()}
    done = threading.Event()

    def shared() -> bool:
        """Both members hold part of the partitions, none twice: the generation of two."""
        a, b = assigned["a"], assigned["b"]
        return bool(a and b) and not a & b and len(a | b) == 4

    def member(name: str) -> None:
        consumer = KafkaConsumer("t", bootstrap_servers=kb.bootstrap, group_id="kp", auto_offset_reset="earliest",
                                 enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=500)
        try:
            while not done.is_set():
                batch = consumer.poll(timeout_ms=200)
                assigned[name] = set(consumer.assignment())
                if not shared():
                    # A member alone in the group (the other still starting, on a busy
                    # machine) reads what the generation of two will assign elsewhere:
                    # read it again from the committed offsets once the group is shared.
                    for tp in assigned[name]:
                        committed = consumer.committed(tp)
                        consumer.seek(tp, 0 if committed is None else committed)
                    continue
                for records in batch.values():
                    seen[name].extend((r.partition, r.offset) for r in records)
                    consumer.commit()
                if len(set(seen["a"]) | set(seen["b"])) == 400:
                    done.set()
        finally:
            consumer.close()

    threads = [threading.Thread(target=member, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert done.is_set()
    assert seen["a"] and seen["b"]  # both took part
    assert not set(seen["a"]) & set(seen["b"])
    assert set(seen["a"]) | set(seen["b"]) == {(p, o) for p in range(4) for o in range(100)}
    offsets = GroupOffsets(conn, "kp")
    assert [getattr(offsets.get("t", p), "offset", None) for p in range(4)] == [100] * 4


def test_admin_client_describes_configs_cluster_and_groups(kb: KafkaBroker, conn: Connection) -> None:
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient, ConfigResource

    Topics(conn).create("retained", 2, retention_ms=3_600_000)
    admin = AdminClient({"bootstrap.servers": kb.bootstrap})
    [(_, fut)] = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "retained")]).items()
    configs = fut.result(timeout=30)
    assert configs["retention.ms"].value == "3600000" and not configs["retention.ms"].is_default
    assert configs["retention.bytes"].value == "-1" and configs["retention.bytes"].is_default
    assert configs["cleanup.policy"].value == "delete" and not configs["cleanup.policy"].is_read_only
    assert configs["compression.type"].is_read_only
    [(_, fut)] = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "no-such-topic")]).items()
    with pytest.raises(Exception, match="UNKNOWN_TOPIC"):
        fut.result(timeout=30)
    cluster = admin.describe_cluster(request_timeout=30).result(timeout=30)
    ports = [n.port for n in cluster.nodes]
    assert len(ports) == kb.workers and int(kb.bootstrap.rsplit(":", 1)[1]) in ports
    # A consumer group, once joined, is listed and described with its member.
    consumer = Consumer({"bootstrap.servers": kb.bootstrap, "group.id": "admins", "auto.offset.reset": "earliest",
                         "client.id": "admin-test"})
    try:
        consumer.subscribe(["t"])
        wait_until(lambda: (consumer.poll(0.2), bool(consumer.assignment()))[1], 60, "an assignment")
        listed = admin.list_consumer_groups(request_timeout=30).result(timeout=30)
        assert "admins" in {g.group_id for g in listed.valid}
        [(_, fut)] = admin.describe_consumer_groups(["admins"], request_timeout=30).items()
        described = fut.result(timeout=30)
        assert described.state.name == "STABLE"
        [member] = described.members
        assert member.client_id == "admin-test"
        assert sorted(tp.partition for tp in member.assignment.topic_partitions) == [0, 1, 2, 3]
        assert all(isinstance(tp, TopicPartition) for tp in member.assignment.topic_partitions)
    finally:
        consumer.close()
