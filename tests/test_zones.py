"""Zones (docs/zones.md): brokers register the zone they run in, Metadata sends a
client that names its zone (``llog_zone=``/``ws_az=``/``diskless_az=`` in its client
id) to the brokers of that zone, a consumer naming its ``client.rack`` is sent to one
by Fetch's ``preferred_read_replica`` (KIP-392), and peer reads stay within a zone.
Real brokers, real kafka-python, librdkafka and Java clients."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from llog.broker.directory import serving
from llog.cli.doctor import diagnose
from llog.config import LlogConfig
from llog.connection import Connection
from llog.kafka.registry import BrokerNode
from llog.kafka.zones import preferred_replica, zone_in_client_id
from llog.local_ports import free_port
from llog.reader import Reader
from llog.topic.admin import Topics
from llog.version import __version__
from tests import java_client
from tests.broker_harness import BrokerProcess, broker_process
from tests.conftest import ProxiedS3, wait_until
from tests.test_kafka import KafkaBroker, kafka_broker

PARTITIONS = 12


@pytest.mark.parametrize(("client_id", "zone"), [
    ("llog_zone=b", "b"), ("orders-7,llog_zone=us-east-1a", "us-east-1a"), ("ws_az=use1-az2", "use1-az2"),
    ("warpstream_session=x,ws_az=b,y", "b"), ("app diskless_az=c", "c"), ("rdkafka", None), ("", None),
    ("my_llog_zone=b", None), ("llog_zone=", None), ("xws_az=b", None), ("a;llog_zone=eu-west-1c;b", "eu-west-1c"),
])
def test_the_zone_a_client_id_names(client_id: str, zone: str | None) -> None:
    assert zone_in_client_id(client_id) == zone


def test_a_client_is_served_by_its_zone_and_by_everyone_when_its_zone_has_nobody() -> None:
    nodes = [BrokerNode(0, "h", 1, zone="a"), BrokerNode(1, "h", 2, zone="b"), BrokerNode(2, "h", 3, zone="b")]
    assert serving(nodes, "b") == nodes[1:]
    assert serving(nodes, "c") == nodes and serving(nodes, None) == nodes
    assert preferred_replica(nodes, nodes[1], "b", "t", 0) == -1  # already in its zone
    assert preferred_replica(nodes, nodes[0], "b", "t", 0) in (1, 2)
    assert preferred_replica(nodes, nodes[0], "c", "t", 0) == -1  # nobody there: stay


def test_a_zone_name_is_checked() -> None:
    from llog.errors import ConfigError

    assert LlogConfig.from_env({"LLOG_ZONE": "us-east-1a"}).zone == "us-east-1a"
    assert LlogConfig.from_env({"LLOG_ZONE": ""}).zone is None
    with pytest.raises(ConfigError, match="zone"):
        LlogConfig(zone="a b")


@contextlib.contextmanager
def _zoned(cfg: LlogConfig, zones: tuple[str, ...]) -> Iterator[list[KafkaBroker]]:
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(kafka_broker(cfg, "--zone", z)) for z in zones]


def _kafka_python_view(bootstrap: str, client_id: str) -> tuple[dict[int, str | None], set[int]]:
    return _kafka_python_view_of(bootstrap, client_id, "z")


def _kafka_python_view_of(bootstrap: str, client_id: str, topic: str) -> tuple[dict[int, str | None], set[int]]:
    """kafka-python's view through ``client_id``: each broker's rack (DescribeCluster),
    and ``topic``'s partitions' leaders (Metadata; created on first use where the
    brokers do that)."""
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id=client_id)
    try:
        (described,) = admin.describe_topics([topic])
        leaders = {p["leader_id"] for p in described["partitions"]}
        racks: dict[int, str | None] = {}

        def listed() -> bool:  # DescribeCluster's list may be a second older than Metadata's
            racks.update((b["broker_id"], b["rack"]) for b in admin.describe_cluster()["brokers"])
            return leaders <= racks.keys()

        wait_until(listed, 10, f"DescribeCluster to list the leaders {leaders}")
        return racks, leaders
    finally:
        admin.close()


def _librdkafka_leaders(bootstrap: str, client_id: str) -> set[int]:
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": bootstrap, "client.id": client_id}).list_topics("z", timeout=30)
    return {p.leader for p in md.topics["z"].partitions.values()}


def test_metadata_leads_a_client_of_a_zone_to_that_zones_brokers_while_it_has_one(
    config: LlogConfig, conn: Connection,
) -> None:
    Topics(conn).create("z", PARTITIONS)
    with _zoned(config, ("a", "b", "b")) as brokers:
        with kafka_broker(config, "--zone", "c") as c:
            bootstrap = brokers[0].bootstrap
            racks, anywhere = _kafka_python_view(bootstrap, "app")
            assert sorted(str(r) for r in racks.values()) == ["a", "b", "b", "c"]  # Metadata's and DescribeCluster's
            assert len({racks[n] for n in anywhere}) > 1  # no zone named: every zone leads some
            for zone in ("a", "b", "c"):
                _, leaders = _kafka_python_view(bootstrap, f"orders-1,llog_zone={zone}")
                assert {racks[n] for n in leaders} == {zone}
            in_b = _librdkafka_leaders(c.bootstrap, "ws_az=b")
            assert {racks[n] for n in in_b} == {"b"} and len(in_b) == 2  # spread over the zone's two brokers
            assert {racks[n] for n in _librdkafka_leaders(bootstrap, "diskless_az=c")} == {"c"}
            doctor = {f.detail for f in diagnose(conn) if f.check == "zones"}
            assert doctor == {"brokers by zone: a 1, b 2, c 1"}
        # Zone c's broker gone: a client of zone c is served by the others. (It is still
        # listed, leading nothing, until its registration expires, as after a kill:
        # librdkafka retires a broker gone from the list, and can wait forever on it as
        # a coordinator; kafka-python may pick it for Metadata and be refused meanwhile.)
        leading = {racks[n] for n in _librdkafka_leaders(bootstrap, "llog_zone=c")}
        assert "c" not in leading and len(leading) > 1


def test_producers_naming_their_zone_produce_only_to_its_brokers(
    config: LlogConfig, conn: Connection, tmp_path: Path,
) -> None:
    """librdkafka through ``client.id``, and the Java producer (``kafka-console-producer``)
    through a ``client.id`` in its properties: every Produce request reaches a broker
    of the producer's zone, and every record is stored; a transactional producer's
    coordinator is a broker of its zone too."""
    from confluent_kafka import Producer

    Topics(conn).create("z", PARTITIONS)
    with _zoned(config, ("a", "b", "c")) as (a, b, c):
        p = Producer({"bootstrap.servers": a.bootstrap, "client.id": "clicks,llog_zone=c", "linger.ms": 5})
        for i in range(120):
            p.produce("z", value=b"rd-%d" % i, partition=i % PARTITIONS)
        assert p.flush(60) == 0
        # A transactional producer's coordinator is found in its zone too.
        tx = Producer({"bootstrap.servers": a.bootstrap, "client.id": "llog_zone=c", "transactional.id": "zoned-tx"})
        tx.init_transactions(30)
        tx.begin_transaction()
        for i in range(10):
            tx.produce("z", value=b"tx-%d" % i, partition=i)
        tx.commit_transaction(30)
        ended = {z: x.http.metric("llog_kafka_requests_total", api="EndTxn") for z, x in zip("abc", (a, b, c),
                                                                                            strict=True)}
        assert ended == {"a": 0, "b": 0, "c": 1}
        props = tmp_path / "producer.properties"
        props.write_text("client.id=orders,llog_zone=b\n")
        java_client.tool("org.apache.kafka.tools.ConsoleProducer", "--bootstrap-server", a.bootstrap, "--topic", "z",
                         "--producer.config", str(props), stdin="".join(f"java-{i}\n" for i in range(30)))
        produced = {z: x.http.metric("llog_kafka_requests_total", api="Produce")
                    for z, x in zip("abc", (a, b, c), strict=True)}
    assert produced["a"] == 0 and produced["b"] > 0 and produced["c"] > 0, produced
    with Reader(conn) as r:
        values = sorted(rec.value for part in range(PARTITIONS) for rec in r.scan("z", part, 0))
    assert values == sorted([b"rd-%d" % i for i in range(120)] + [b"java-%d" % i for i in range(30)]
                            + [b"tx-%d" % i for i in range(10)])


def test_a_client_on_a_zone_listener_is_served_by_that_zones_brokers_on_their_listeners_for_it(
    config: LlogConfig, conn: Connection, tmp_path: Path,
) -> None:
    """Each broker serves a Kafka port per client zone (AZ-aware listeners): a client
    that bootstraps from zone b's listener of any broker, naming no zone itself, is in
    zone b: Metadata's leaders are zone b's brokers and every broker's address is its
    listener for zone b, so the client stays there (kafka-python, librdkafka, the Java
    producer). The listener wins over a client id naming another zone."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    Topics(conn).create("z", PARTITIONS)
    ports = {b: {z: free_port() for z in "ab"} for b in "ab"}
    with contextlib.ExitStack() as stack:
        brokers = {b: stack.enter_context(kafka_broker(
            config, "--zone", b, *(f"--kafka-zone-listener={z}={p}" for z, p in ports[b].items()))) for b in "ab"}
        for zone, other in (("b", "a"), ("a", "b")):
            on_zone = f"127.0.0.1:{ports[other][zone]}"  # the other broker's listener for this zone
            racks, leaders = _kafka_python_view_of(on_zone, "app", "z")
            assert {racks[n] for n in leaders} == {zone}
            md = AdminClient({"bootstrap.servers": on_zone, "client.id": f"llog_zone={other}"}).list_topics("z", 30)
            assert {p.leader for p in md.topics["z"].partitions.values()} == leaders  # the listener wins
            assert sorted(b.port for b in md.brokers.values()) == sorted(ports[b][zone] for b in "ab")
        on_b = f"127.0.0.1:{ports['a']['b']}"
        produced = {b: x.http.metric("llog_kafka_requests_total", api="Produce") for b, x in brokers.items()}
        p = Producer({"bootstrap.servers": on_b, "linger.ms": 5})
        for i in range(60):
            p.produce("z", value=b"rd-%d" % i, partition=i % PARTITIONS)
        assert p.flush(60) == 0
        java_client.tool("org.apache.kafka.tools.ConsoleProducer", "--bootstrap-server", on_b, "--topic", "z",
                         stdin="".join(f"java-{i}\n" for i in range(30)))
        produced = {b: x.http.metric("llog_kafka_requests_total", api="Produce") - produced[b]
                    for b, x in brokers.items()}
    assert produced["a"] == 0 and produced["b"] > 0, produced
    with Reader(conn) as r:
        values = sorted(rec.value for part in range(PARTITIONS) for rec in r.scan("z", part, 0))
    assert values == sorted([b"rd-%d" % i for i in range(60)] + [b"java-%d" % i for i in range(30)])


def test_each_worker_of_a_broker_serves_the_zone_listeners_on_its_own_ports(config: LlogConfig) -> None:
    """With ``--workers 2`` each worker is a Kafka node of its own, listening for zone a
    on the zone's port + its index; Metadata through either names both."""
    from confluent_kafka.admin import AdminClient

    port = free_port(span=2)  # worker i listens on port + i
    with kafka_broker(config, "--workers", "2", "--zone", "a", f"--kafka-zone-listener=a={port}"):
        for p in (port, port + 1):
            brokers = AdminClient({"bootstrap.servers": f"127.0.0.1:{p}"}).list_topics(timeout=30).brokers
            assert sorted(b.port for b in brokers.values()) == [port, port + 1]


def test_zone_listeners_are_checked() -> None:
    from llog.errors import ConfigError

    cfg = LlogConfig.from_env({"LLOG_KAFKA_PORT": "9092", "LLOG_KAFKA_ZONE_LISTENERS": "a=19092, b=0"})
    assert cfg.kafka_zone_listeners == ("a=19092", "b=0")
    for bad in ("a", "a=x", "a b=1", "a=70000"):
        with pytest.raises(ConfigError, match="kafka_zone_listeners"):
            LlogConfig(kafka_port=9092, kafka_zone_listeners=(bad,))
    with pytest.raises(ConfigError, match="need a Kafka listener"):
        LlogConfig(kafka_zone_listeners=("a=1",))
    out = subprocess.run([sys.executable, "-m", "llog", "broker", "--kafka-port", "0", "--kafka-zone-listener", "a:1"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "not a zone name" in out.stderr


def _leader_zone(bootstrap: str) -> str:
    racks, (leader,) = _kafka_python_view(bootstrap, "app")
    return str(racks[leader])


@pytest.mark.parametrize("client", ["librdkafka", "java"])
def test_a_consumer_naming_its_rack_is_sent_to_a_broker_of_its_zone(
    config: LlogConfig, conn: Connection, tmp_path: Path, client: str,
) -> None:
    """KIP-392: the partition's leader (for a client naming no zone) is in another zone
    than the consumer's ``client.rack``; its Fetch answer names a broker of the
    consumer's zone (``preferred_read_replica``), which serves every later fetch."""
    Topics(conn).create("z", 1)
    with _zoned(config, ("a", "b", "c")) as brokers:
        by_zone = dict(zip("abc", brokers, strict=True))
        leader_zone = _leader_zone(brokers[0].bootstrap)
        rack = "a" if leader_zone != "a" else "b"
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": brokers[0].bootstrap})
        for i in range(50):
            p.produce("z", value=b"%d" % i, partition=0)
        assert p.flush(60) == 0
        fetches = {z: b.http.metric("llog_kafka_requests_total", api="Fetch") for z, b in by_zone.items()}
        if client == "librdkafka":
            got = _librdkafka_consume(brokers[0].bootstrap, rack, 50)
        else:
            props = tmp_path / "consumer.properties"
            props.write_text(f"client.rack={rack}\n")
            out = java_client.tool("org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server",
                                   brokers[0].bootstrap, "--topic", "z", "--from-beginning", "--max-messages", "50",
                                   "--timeout-ms", "30000", "--consumer.config", str(props))
            got = out.split()
        served = {z: b.http.metric("llog_kafka_requests_total", api="Fetch") - fetches[z] for z, b in by_zone.items()}
    assert sorted(got, key=int) == [str(i) for i in range(50)]
    assert served[rack] > 0 and served[leader_zone] >= 1, served  # asked the leader once, then its own zone


def _librdkafka_consume(bootstrap: str, rack: str, n: int) -> list[str]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "zoned", "client.rack": rack,
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition("z", 0, 0)])
    got: list[str] = []
    try:
        while len(got) < n:
            msgs = consumer.consume(n, timeout=30)
            assert msgs, f"consumed {len(got)} of {n}"
            got += [m.value().decode() for m in msgs if m.error() is None]
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize(("zones", "peer_read"), [(("a", "a"), True), (("a", "b"), False)],
                         ids=["same-zone", "other-zone"])
def test_a_broker_asks_only_peers_of_its_zone_for_a_blob(
    s3_proxy: ProxiedS3, zones: tuple[str, str], peer_read: bool,
) -> None:
    """Records produced on broker A, consumed on broker B: in A's zone B reads the blob
    from A (no GET); in another zone it reads the object store and never asks A."""
    cfg = s3_proxy.config
    with Connection(cfg) as conn:
        Topics(conn).create("w", 1)
    with broker_process(cfg, LLOG_ZONE=zones[0]) as a, broker_process(cfg, LLOG_ZONE=zones[1]) as b:
        assert b.post("/consume", {"topic_partitions": [
            {"topic": "w", "partition": 0, "fetch_offset": 0}], "max_wait_ms": 0})[0] == 200  # B watches w/0
        gets = s3_proxy.proxy.requests().get("GET", 0)
        assert a.post("/produce", {"topic_partitions": [{"topic": "w", "partition": 0, "records": ["eA=="]}]})[0] == 200
        status, got = b.post("/consume", {"topic_partitions": [
            {"topic": "w", "partition": 0, "fetch_offset": 0}], "max_wait_ms": 10_000})
        assert status == 200 and [r["value"] for r in got["topic_partitions"][0]["records"]] == ["eA=="]
        assert s3_proxy.proxy.requests().get("GET", 0) - gets == (0 if peer_read else 1)
        assert b.metric("llog_read_peer_requests_total", outcome="hit") == (1 if peer_read else 0)
        assert b.metric("llog_read_peer_requests_total", outcome="other_zone") == (0 if peer_read else 1)
        assert b.metric("llog_zone", zone=zones[1]) == 1


def test_an_http_client_of_a_zone_finds_that_zones_brokers(config: LlogConfig) -> None:
    """``GET /brokers``: a client naming zone b (``Llog-Zone`` header or ``zone=``) is
    given zone b's brokers while it has one, every broker otherwise; each answer names
    its broker's zone, and a request naming another zone is counted. Two workers of one
    broker are listed once."""
    with broker_process(config, "--zone", "a") as a, broker_process(config, "--zone", "b") as b, \
            broker_process(config, "--zone", "b", "--workers", "2") as b2:
        def listed(path: str, via: BrokerProcess = a, **headers: str) -> tuple[str | None, list[str]]:
            status, answer_headers, got = via.exchange("GET", path, headers=headers)
            assert status == 200, got
            assert answer_headers["llog-zone"] == ("a" if via is a else "b")  # the answering broker's
            return got["zone"], sorted(x["url"] for x in got["brokers"])

        everyone = sorted([a.url, b.url, b2.url])
        assert listed("/brokers") == (None, everyone)
        assert listed("/brokers", **{"Llog-Zone": "b"}) == ("b", sorted([b.url, b2.url]))
        assert listed("/brokers?zone=a", via=b) == ("a", [a.url])
        assert listed("/brokers?zone=a", **{"Llog-Zone": "b"}) == ("b", sorted([b.url, b2.url]))  # the header wins
        assert listed("/brokers?zone=c") == ("c", everyone)  # nobody in c: everyone
        status, got = a.request("GET", "/brokers?zone=not%20a%20zone")
        assert status == 400 and got["field"] == "zone"
        status, got = a.request("GET", "/brokers", headers={"Llog-Zone": "b c"})
        assert status == 400 and got["field"] == "Llog-Zone"
        status, got = a.request("GET", "/brokers?zones=a")
        assert status == 400 and "zones" in got["error"]
        status, headers, _ = b.exchange("GET", "/health", headers={"Llog-Zone": "a"})
        assert headers["llog-zone"] == "b" and b.metric("llog_http_other_zone_requests_total", route="/health") == 1
        b.exchange("GET", "/health", headers={"Llog-Zone": "b"})
        assert b.metric("llog_http_other_zone_requests_total", route="/health") == 1
        entries = a.request("GET", "/brokers?zone=b")[1]["brokers"]
        assert {e["zone"] for e in entries} == {"b"}
    # b's brokers stopped (their registrations revoked): a client of b is served by a.
    with broker_process(config, "--zone", "a") as again:
        listed = again.request("GET", "/brokers?zone=b")[1]["brokers"]
        assert listed == [{"url": again.url, "zone": "a", "version": __version__}]


def test_a_broker_without_a_zone_is_listed_without_one_and_names_none(config: LlogConfig) -> None:
    with broker_process(config) as b:
        status, headers, got = b.exchange("GET", "/brokers", headers={"Llog-Zone": "a"})
        assert status == 200 and got == {"zone": "a", "brokers": [{"url": b.url, "version": __version__}]}
        assert "llog-zone" not in headers
        assert b.metric("llog_http_other_zone_requests_total", route="/brokers") == 0


def test_the_advertised_url_is_the_one_listed(config: LlogConfig) -> None:
    from llog.errors import ConfigError

    for bad in ("broker-7:8443", "ftp://broker-7", "http://broker-7/api", "http://"):
        with pytest.raises(ConfigError, match="http_advertised_url"):
            LlogConfig(http_advertised_url=bad)
    with broker_process(config, LLOG_HTTP_ADVERTISED_URL="https://broker-7.zone-a.example:8443") as b:
        assert b.request("GET", "/brokers")[1]["brokers"] == [{"url": "https://broker-7.zone-a.example:8443",
                                                                "version": __version__}]


def test_dev_up_starts_a_broker_per_zone(tmp_path: Path) -> None:
    """``llog dev up --zones a,b``: a broker per zone, each registered with its zone, and
    Metadata answering a client of zone b with zone b's broker."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "llog", "dev", "up", "--broker-port", "0", "--kafka-port", "0", "--zones", "a,b",
         "--dir", str(tmp_path / "stack")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        zones: dict[str, str] = {}
        while len(zones) < 2:
            line = proc.stdout.readline()
            assert line, f"dev up ended early: {proc.stderr.read() if proc.stderr else ''}"
            if line.startswith("# zone "):
                zones[line.split()[2].rstrip(":")] = line.split("Kafka ")[1].split()[0]
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": zones["a"], "client.id": "llog_zone=b"})
        producer.produce("made", value=b"on first use")
        assert producer.flush(60) == 0
        racks, leaders = _kafka_python_view_of(zones["a"], "llog_zone=b", "made")
        assert sorted(str(r) for r in racks.values()) == ["a", "b"] and {racks[n] for n in leaders} == {"b"}
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
