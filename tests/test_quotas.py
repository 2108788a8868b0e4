"""Client quotas (docs/security.md, "Quotas"): stored in etcd per entity as Kafka lays
them out, held by every broker through a watch. Real etcd."""

from __future__ import annotations

import struct

import pytest

from llog.config import LlogConfig
from llog.connection import Connection
from llog.errors import InvalidInput
from llog.quotas.cache import Quotas
from llog.quotas.entities import CONSUMER_BYTE_RATE, DEFAULT, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE, QuotaEntity
from llog.quotas.store import QuotaStore, entity_path, parse_entity_path
from tests.conftest import wait_until


@pytest.mark.fast
@pytest.mark.parametrize(("entity", "path"), [
    (QuotaEntity("alice", None), "users/alice"),
    (QuotaEntity("alice", "etl"), "users/alice/clients/etl"),
    (QuotaEntity(DEFAULT, None), "users/<default>"),
    (QuotaEntity(DEFAULT, DEFAULT), "users/<default>/clients/<default>"),
    (QuotaEntity(None, "a/b c"), "clients/a%2Fb%20c"),
    (QuotaEntity("<default>", None), "users/%3Cdefault%3E"),  # a user of that name is not the default
])
def test_entities_are_laid_out_as_kafka_did(entity: QuotaEntity, path: str) -> None:
    assert entity_path(entity) == path and parse_entity_path(path) == entity


def test_quotas_are_set_removed_and_checked(conn: Connection) -> None:
    store = QuotaStore(conn)
    alice, defaults = QuotaEntity("alice", None), QuotaEntity(DEFAULT, None)
    store.alter([(alice, {PRODUCER_BYTE_RATE: 1024, CONSUMER_BYTE_RATE: 2048}), (defaults, {REQUEST_PERCENTAGE: 50})])
    assert store.read_all() == ({alice: {PRODUCER_BYTE_RATE: 1024.0, CONSUMER_BYTE_RATE: 2048.0},
                                 defaults: {REQUEST_PERCENTAGE: 50.0}}, [])
    store.alter([(alice, {PRODUCER_BYTE_RATE: None})])
    assert store.read_all()[0][alice] == {CONSUMER_BYTE_RATE: 2048.0}
    store.alter([(alice, {CONSUMER_BYTE_RATE: None})])
    assert alice not in store.read_all()[0]  # nothing left: the key is gone
    for bad in ({"producer_byte_rate": 0}, {"producer_byte_rate": float("inf")}, {"bytes": 1},
                {"consumer_byte_rate": True}):
        with pytest.raises(InvalidInput):
            store.alter([(alice, {PRODUCER_BYTE_RATE: 1}), (defaults, bad)])
    assert store.read_all()[0] == {defaults: {REQUEST_PERCENTAGE: 50.0}}  # a refused change changes nothing
    conn.etcd.put(conn.keys.quota("users/bob/nonsense"), b"{}")
    assert store.read_all()[1] == [conn.keys.quota("users/bob/nonsense")]


def test_a_broker_holds_the_quotas_and_sees_each_change(conn: Connection) -> None:
    quotas = Quotas(conn)
    quotas.start()
    try:
        assert not quotas.any and quotas.limit("alice", "etl", PRODUCER_BYTE_RATE) is None
        QuotaStore(conn).alter([(QuotaEntity(DEFAULT, None), {PRODUCER_BYTE_RATE: 100.0})])
        wait_until(lambda: quotas.limit("alice", "etl", PRODUCER_BYTE_RATE) is not None, 10, "the quota")
        assert quotas.limit("alice", "etl", PRODUCER_BYTE_RATE) == (QuotaEntity(DEFAULT, None), 100.0)
        QuotaStore(conn).alter([(QuotaEntity("alice", "etl"), {PRODUCER_BYTE_RATE: 5.0})])
        wait_until(lambda: quotas.limit("alice", "etl", PRODUCER_BYTE_RATE) == (QuotaEntity("alice", "etl"), 5.0),
                   10, "the more specific quota")
        assert quotas.limit("bob", "etl", PRODUCER_BYTE_RATE) == (QuotaEntity(DEFAULT, None), 100.0)
        assert conn.metrics.quota_entities._value.get() == 2
    finally:
        quotas.close()


@pytest.mark.fast
def test_kafkas_quota_filters() -> None:
    from llog.kafka.handlers.quotas import MATCH_DEFAULT, MATCH_EXACT, MATCH_SPECIFIED, entity_of, matches

    alice, alice_etl = QuotaEntity("alice", None), QuotaEntity("alice", "etl")
    default_user, default_client = QuotaEntity(DEFAULT, None), QuotaEntity(None, DEFAULT)
    every = [alice, alice_etl, default_user, default_client]

    def found(components: list[tuple[str, int, str | None]], strict: bool = False) -> list[QuotaEntity]:
        return [e for e in every if matches(e, components, strict)]

    assert found([]) == every and found([], strict=True) == []
    assert found([("user", MATCH_EXACT, "alice")]) == [alice, alice_etl]
    assert found([("user", MATCH_EXACT, "alice")], strict=True) == [alice]
    assert found([("user", MATCH_DEFAULT, None)]) == [default_user]
    assert found([("user", MATCH_SPECIFIED, None)]) == [alice, alice_etl]
    assert found([("client-id", MATCH_SPECIFIED, None)]) == [alice_etl]
    assert found([("client-id", MATCH_DEFAULT, None)]) == [default_client]
    assert entity_of([("user", "alice"), ("client-id", None)]) == QuotaEntity("alice", DEFAULT)
    for bad in ([("ip", "10.0.0.1")], [("user", "a"), ("user", "b")], []):
        with pytest.raises(InvalidInput):
            entity_of(bad)


def test_kafka_configs_sets_describes_and_removes_quotas(config: LlogConfig, conn: Connection) -> None:
    """Kafka's own ``kafka-configs.sh`` (ConfigCommand) against a broker."""
    from tests import java_client
    from tests.test_kafka import kafka_broker

    configs = "kafka.admin.ConfigCommand"
    with kafka_broker(config) as kb:
        b = ("--bootstrap-server", kb.bootstrap)
        java_client.tool(configs, *b, "--alter", "--add-config",
                         "producer_byte_rate=1048576,consumer_byte_rate=2097152",
                         "--entity-type", "users", "--entity-name", "alice")
        java_client.tool(configs, *b, "--alter", "--add-config", "request_percentage=50",
                         "--entity-type", "users", "--entity-default",
                         "--entity-type", "clients", "--entity-name", "etl")
        java_client.tool(configs, *b, "--alter", "--add-config", "producer_byte_rate=512",
                         "--entity-type", "clients", "--entity-default")
        held, _ = QuotaStore(conn).read_all()
        assert held == {QuotaEntity("alice", None): {PRODUCER_BYTE_RATE: 1048576.0, CONSUMER_BYTE_RATE: 2097152.0},
                        QuotaEntity(DEFAULT, "etl"): {REQUEST_PERCENTAGE: 50.0},
                        QuotaEntity(None, DEFAULT): {PRODUCER_BYTE_RATE: 512.0}}
        # A users' describe asks for SCRAM credentials too (none here), which a broker
        # that authenticates nobody answers as Kafka without an authorizer does.
        described = java_client.tool(configs, *b, "--describe", "--entity-type", "users", "--entity-name", "alice")
        assert "Quota configs for user-principal 'alice' are consumer_byte_rate=2097152.0, " \
               "producer_byte_rate=1048576.0" in described
        assert "request_percentage=50.0" in java_client.tool(
            configs, *b, "--describe", "--entity-type", "users", "--entity-default", "--entity-type", "clients")
        refused = java_client.tool(configs, *b, "--alter", "--add-config", "producer_byte_rate=-1",
                                   "--entity-type", "users", "--entity-name", "alice", check=False)
        assert "InvalidRequestException" in refused and "must be a number > 0" in refused
        java_client.tool(configs, *b, "--alter", "--delete-config", "producer_byte_rate",
                         "--entity-type", "users", "--entity-name", "alice")
        assert QuotaStore(conn).read_all()[0][QuotaEntity("alice", None)] == {CONSUMER_BYTE_RATE: 2097152.0}


def test_llog_quotas(config: LlogConfig, conn: Connection) -> None:
    from tests.test_cli import llog_cli

    assert "set: user 'alice': producer_byte_rate=5242880" in llog_cli(
        config, "quotas", "set", "--user", "alice", "producer_byte_rate=5242880").stdout
    llog_cli(config, "quotas", "set", "--default-user", "--client-id", "etl", "request_percentage=25")
    listed = llog_cli(config, "quotas", "list").stdout.splitlines()
    assert listed == ["users/<default>/clients/etl\trequest_percentage=25",
                      "users/alice\tproducer_byte_rate=5242880"]
    bad = llog_cli(config, "quotas", "set", "--user", "alice", "producer_byte_rate", ok=False)
    assert bad.returncode != 0 and "not KIND=VALUE" in bad.stderr
    bad = llog_cli(config, "quotas", "set", "producer_byte_rate=1", ok=False)
    assert bad.returncode != 0 and "--user" in bad.stderr
    llog_cli(config, "quotas", "remove", "--user", "alice")
    assert QuotaStore(conn).read_all()[0] == {QuotaEntity(DEFAULT, "etl"): {REQUEST_PERCENTAGE: 25.0}}


def test_a_producer_over_its_quota_is_throttled_and_loses_nothing(config: LlogConfig, conn: Connection) -> None:
    """librdkafka sees ``throttle_time_ms`` (its throttle callback) and delivers every
    record; a client id without a quota is never throttled."""
    from confluent_kafka import Consumer, Producer

    from llog.topic.admin import Topics
    from tests.test_kafka import kafka_broker

    Topics(conn).create("q", 2)
    # 300 KiB against 100 KiB/s: over within the first second, delivered at the quota.
    QuotaStore(conn).alter([(QuotaEntity(None, "noisy"), {PRODUCER_BYTE_RATE: 100 * 1024})])
    with kafka_broker(config) as kb:
        throttles: dict[str, list[int]] = {"noisy": [], "quiet": []}
        failed: list[object] = []
        for client in ("noisy", "quiet"):
            p = Producer({"bootstrap.servers": kb.bootstrap, "client.id": client, "linger.ms": 5,
                          "throttle_cb": lambda e, c=client: throttles[c].append(e.throttle_time)})
            for i in range(300):
                p.produce("q", value=b"x" * 1024, key=str(i).encode(),
                          on_delivery=lambda err, _m: failed.append(err) if err else None)
                p.poll(0)
            assert p.flush(120) == 0 and failed == []
            p.poll(0.5)  # throttle events are served by poll
        assert throttles["noisy"] and max(throttles["noisy"]) > 0
        assert throttles["quiet"] == []
        assert kb.http.metric("llog_quota_throttles_total", listener="kafka", api="Produce") > 0
        c = Consumer({"bootstrap.servers": kb.bootstrap, "group.id": "q", "auto.offset.reset": "earliest"})
        c.subscribe(["q"])
        got = 0
        while got < 600:
            msgs = c.consume(500, timeout=10)
            assert msgs, f"only {got} of 600 records"
            got += len(msgs)
        c.close()
        assert got == 600


def test_a_throttled_client_has_nothing_handled_until_its_wait_is_over(config: LlogConfig, conn: Connection) -> None:
    """KIP-219's muted channel: a produce that takes its client over its quota is handled
    and answered at once with ``throttle_time_ms``; the client's next request on that
    connection, and one on another connection under the same client id, are read and
    handled only once the wait is over, while another client's goes through meanwhile.
    (The wait, ~10 s here, is far longer than a produce takes, so the log's state at
    the other client's answer tells which were handled.)"""
    import socket

    from kafka.protocol.producer import ProduceRequest, ProduceResponse

    from llog.reader import Reader
    from llog.topic.admin import Topics
    from tests.kafka_crafted import exchange, plain_batch, read_exactly
    from tests.test_kafka import kafka_broker

    Topics(conn).create("m", 1)
    QuotaStore(conn).alter([(QuotaEntity(None, "muted"), {PRODUCER_BYTE_RATE: 10_000})])
    P = ProduceRequest[9]

    def produce(*values: bytes) -> P:
        return P(transactional_id=None, acks=-1, timeout_ms=30000, topic_data=[P.TopicProduceData(
            name="m", partition_data=[P.TopicProduceData.PartitionProduceData(index=0, records=plain_batch(
                list(values)))])])

    def answer(frame: bytes) -> tuple[int, int]:
        [topic] = ProduceResponse[9].decode(frame, version=9, header=True).responses
        [part] = topic.partition_responses
        return part.error_code, ProduceResponse[9].decode(frame, version=9, header=True).throttle_time_ms

    def log() -> list[bytes]:
        with Reader(conn) as r:
            return [rec.value or b"" for rec in r.scan("m", 0)]

    with kafka_broker(config) as kb:
        wait_until(lambda: kb.http.metric("llog_quota_entities") == 1, 10, "the broker to hold the quota")
        host, port = kb.bootstrap.rsplit(":", 1)
        one, two, quiet = (socket.create_connection((host, int(port)), timeout=60) for _ in range(3))
        with one, two, quiet:
            # 100 KB against 10 KB/s: the client is over by ~9 s once this one is read.
            error, throttle_ms = answer(exchange(one, produce(b"x" * 100_000), 1, "muted"))
            assert error == 0 and throttle_ms > 5_000
            for sock, value, correlation in ((one, b"second", 2), (two, b"third", 1)):
                request = produce(value)
                request.with_header(correlation_id=correlation, client_id="muted")
                sock.sendall(request.encode(header=True, framed=True))
            assert answer(exchange(quiet, produce(b"quiet"), 1, "quiet")) == (0, 0)
            assert log()[1:] == [b"quiet"]  # neither of the muted client's requests handled yet
            for sock in (one, two):
                assert answer(read_exactly(sock, struct.unpack(">i", read_exactly(sock, 4))[0]))[0] == 0
        assert sorted(log()[1:]) == [b"quiet", b"second", b"third"]
        assert kb.http.metric("llog_quota_throttles_total", listener="kafka", api="Produce") >= 1


def test_an_http_client_over_its_quota_gets_429_with_retry_after(config: LlogConfig, conn: Connection) -> None:
    from llog.topic.admin import Topics
    from tests.broker_harness import broker_process

    Topics(conn).create("h", 1)
    QuotaStore(conn).alter([(QuotaEntity(None, "noisy"), {PRODUCER_BYTE_RATE: 10_000})])
    body = {"topic_partitions": [{"topic": "h", "partition": 0, "records": ["x" * 4000]}]}
    with broker_process(config) as b:
        wait_until(lambda: b.metric("llog_quota_entities") == 1, 10, "the broker to hold the quota")
        statuses = []
        for _ in range(40):
            status, headers, got = b.exchange("POST", "/produce", body, headers={"Llog-Client-Id": "noisy"})
            statuses.append(status)
            if status == 429:
                assert int(headers["retry-after"]) >= 1 and got["error_type"] == "QuotaExceeded"
                break
        assert statuses[-1] == 429 and set(statuses[:-1]) == {200}
        # A refused request did nothing; another client id is not held back.
        appended = sum(1 for s in statuses if s == 200)
        assert b.post("/produce", body, headers={"Llog-Client-Id": "quiet"})[0] == 200
        status, got = b.post("/consume", {"topic_partitions": [{"topic": "h", "partition": 0, "fetch_offset": 0}],
                                          "max_wait_ms": 0})
        assert status == 200 and len(got["topic_partitions"][0]["records"]) == appended + 1
        assert b.metric("llog_quota_throttles_total", listener="http", api="/produce") == 1


def test_the_java_producer_reports_the_throttling_and_delivers_everything(config: LlogConfig, conn: Connection) -> None:
    from llog.topic.admin import Topics
    from tests import java_client
    from tests.test_kafka import kafka_broker

    Topics(conn).create("j", 2)
    QuotaStore(conn).alter([(QuotaEntity(None, "java-noisy"), {PRODUCER_BYTE_RATE: 40 * 1024})])
    with kafka_broker(config) as kb:
        lines = java_client.run("throttled", kb.bootstrap, "j", "600", "java-noisy")
    assert "acked 600" in lines
    throttle = next(float(line.split()[1]) for line in lines if line.startswith("throttle-time-max"))
    assert throttle > 0
