"""Compacted topics (Kafka's ``cleanup.policy``) and tombstones (null values), on the
suite's real etcd and S3 servers and a real Kafka listener: the policy is set and
changed through the SDK, the CLI and Kafka's admin APIs; a compacted topic refuses
records without a key from every producer and changes nothing then; retention applies
only with ``delete``; a null value stays null through every reader and through
compaction into both compacted formats."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

import llog
from compactor import compact_once
from compactor.retention import apply_retention
from llog import Record
from llog.control import read_control
from llog.errors import InvalidInput, KeyRequired
from llog.producer import BatchingProducer
from llog.topics import parse_cleanup_policy
from tests.conftest import config_env
from tests.test_kafka import KafkaBroker, kb_fixture  # noqa: F401 (the fixture kb)

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)


@pytest.fixture
def cconn(config: llog.LlogConfig) -> Iterator[llog.Connection]:
    with llog.Connection(replace(config, compact_min_age_ms=0, settle_after_ms=0)) as c:
        yield c


def test_cleanup_policy_words_are_kafkas() -> None:
    assert parse_cleanup_policy(None) is None
    assert parse_cleanup_policy("delete") is None  # the default, stored as no value
    assert parse_cleanup_policy("compact") == "compact"
    assert parse_cleanup_policy("delete, compact") == "compact,delete"
    assert parse_cleanup_policy("compact,delete,compact") == "compact,delete"
    for bad in ("", "Compact", "compact;delete", "keep", 1):
        with pytest.raises(InvalidInput, match="cleanup policy"):
            parse_cleanup_policy(bad)


def test_a_compacted_topic_refuses_keyless_records_and_keeps_tombstones(cconn: llog.Connection) -> None:
    conn = cconn
    meta = llog.Topics(conn).create("cmp", 1, cleanup_policy="compact")
    assert meta.compacted and not meta.retained
    with llog.Writer(conn) as w:
        with pytest.raises(KeyRequired, match="cmp/0 is a compacted topic"):
            w.append("cmp", 0, [Record(b"a", key=b"k"), Record(b"b")])
        assert read_control(conn, "cmp", 0).control.next_offset == 0  # nothing written
        w.append("cmp", 0, [Record(b"v1", key=b"k1"), Record(None, key=b"k2"), Record(b"", key=b"k3")])
    with BatchingProducer(conn) as prod:
        with pytest.raises(KeyRequired):
            prod.send("cmp", 0, b"no key")  # refused at the send, nothing buffered
        with pytest.raises(KeyRequired):
            prod.send_group("cmp", 0, [Record(b"x", key=b"k"), b"bare bytes"])
        assert prod.send("cmp", 0, None, key=b"k1").result(timeout=30) == 3  # a tombstone

    def values() -> list[tuple[bytes | None, bytes | None]]:
        with llog.Reader(conn) as r:
            return [(c.key, c.value) for c in r.scan("cmp", 0)]

    want = [(b"k1", b"v1"), (b"k2", None), (b"k3", b""), (b"k1", None)]
    assert values() == want
    assert compact_once(conn, "cmp", 0).outcome == "compacted"
    assert values() == want  # the tombstones stay null in the compacted body
    llog.Topics(conn).set_compacted_format("cmp", "parquet")
    with llog.Writer(conn) as w:
        w.append("cmp", 0, [Record(None, key=b"k3"), Record(b"v2", key=b"k2")])
    assert compact_once(conn, "cmp", 0).outcome == "compacted"
    assert values() == [*want, (b"k3", None), (b"k2", b"v2")]


def test_turning_compaction_on_and_off_changes_what_is_accepted(cconn: llog.Connection) -> None:
    conn = cconn
    topics = llog.Topics(conn)
    topics.create("flip", 1)
    with llog.Writer(conn) as w:
        w.append("flip", 0, [b"keyless before"])
        assert topics.set_cleanup_policy("flip", "compact,delete").cleanup_policy == "compact,delete"
        with pytest.raises(KeyRequired):
            w.append("flip", 0, [b"keyless after"])
        topics.set_cleanup_policy("flip", "delete")
        w.append("flip", 0, [b"keyless again"])
    with llog.Reader(conn) as r:
        assert [c.value for c in r.scan("flip", 0)] == [b"keyless before", b"keyless again"]


def test_retention_applies_only_with_the_delete_policy(cconn: llog.Connection) -> None:
    conn = cconn
    for name, policy in (("keep", "compact"), ("drop", "compact,delete")):
        llog.Topics(conn).create(name, 1, retention_bytes=1, cleanup_policy=policy)
        with llog.Writer(conn) as w:
            for i in range(4):
                w.append(name, 0, [Record(b"v%d" % i, key=b"k")])
    assert apply_retention(conn, "keep", 0).new_start == 0  # compact only: no retention
    assert apply_retention(conn, "drop", 0).new_start > 0


def _described(admin: AdminClient, topic: str) -> dict[str, str]:
    res = ConfigResource(ResourceType.TOPIC, topic)
    return {name: e.value for name, e in admin.describe_configs([res])[res].result(timeout=30).items()}


def test_kafka_clients_create_alter_and_produce_to_compacted_topics(kb: KafkaBroker, conn: llog.Connection) -> None:
    admin = AdminClient({"bootstrap.servers": kb.bootstrap})
    futures = admin.create_topics([NewTopic("kc", 1, 1, config={"cleanup.policy": "compact"}),
                                   NewTopic("kbad", 1, 1, config={"cleanup.policy": "shred"})])
    futures["kc"].result(timeout=30)
    with pytest.raises(confluent_kafka.KafkaException, match="cleanup"):
        futures["kbad"].result(timeout=30)
    assert conn.topic("kc", refresh=True).cleanup_policy == "compact"
    with pytest.raises(llog.UnknownTopic):
        conn.topic("kbad", refresh=True)
    assert _described(admin, "kc")["cleanup.policy"] == "compact"

    errors: list[tuple[bytes | None, str]] = []

    def report(err: object, msg: object) -> None:
        if err is not None:
            errors.append((msg.key(), err.name()))  # type: ignore[attr-defined]

    producer = confluent_kafka.Producer({"bootstrap.servers": kb.bootstrap, "linger.ms": 0,
                                         "enable.idempotence": False, "retries": 0})
    producer.produce("kc", value=b"v1", key=b"k1", partition=0, on_delivery=report)
    producer.flush(30)
    producer.produce("kc", value=b"no key", partition=0, on_delivery=report)
    producer.flush(30)
    producer.produce("kc", value=None, key=b"k1", partition=0, on_delivery=report)
    producer.flush(30)
    assert errors == [(None, "INVALID_RECORD")]
    assert read_control(conn, "kc", 0).control.next_offset == 2  # the keyless one changed nothing

    consumer = confluent_kafka.Consumer({"bootstrap.servers": kb.bootstrap, "group.id": "kc-reader",
                                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.assign([confluent_kafka.TopicPartition("kc", 0, 0)])
    got: list[tuple[int, bytes | None, bytes | None]] = []
    while len(got) < 2:
        m = consumer.poll(10)
        assert m is not None and m.error() is None
        got.append((m.offset(), m.key(), m.value()))
    consumer.close()
    assert got == [(0, b"k1", b"v1"), (1, b"k1", None)]  # the tombstone is null to Kafka clients

    res = ConfigResource(ResourceType.TOPIC, "kc", incremental_configs=[
        ConfigEntry("cleanup.policy", "delete,compact", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(timeout=30)
    assert conn.topic("kc", refresh=True).cleanup_policy == "compact,delete"
    res = ConfigResource(ResourceType.TOPIC, "kc", incremental_configs=[
        ConfigEntry("cleanup.policy", None, incremental_operation=AlterConfigOpType.DELETE)])
    admin.incremental_alter_configs([res])[res].result(timeout=30)
    assert conn.topic("kc", refresh=True).cleanup_policy is None
    assert _described(admin, "kc")["cleanup.policy"] == "delete"


def test_http_produce_and_consume_carry_tombstones(kb: KafkaBroker, conn: llog.Connection) -> None:
    llog.Topics(conn).create("ht", 1, cleanup_policy="compact")
    def produce(*records: dict[str, str | None]) -> tuple[int, dict[str, Any]]:
        body = {"topic_partitions": [{"topic": "ht", "partition": 0, "records": list(records)}]}
        status, resp = kb.http.request("POST", "/produce", body)
        return status, resp

    status, resp = produce({"key": "a", "value": "1"}, {"key": "a", "value": None})
    assert status == 200, resp
    status, resp = produce({"value": "keyless"})
    assert status == 409  # a per-partition refusal, as for every write refused
    assert [(r["ok"], r["error_type"]) for r in resp["results"]] == [(False, "KeyRequired")]
    status, resp = kb.http.request("POST", "/consume", {"topic_partitions": [
        {"topic": "ht", "partition": 0, "fetch_offset": 0}], "max_wait_ms": 0})
    assert status == 200
    assert [(r["key"], r["value"]) for r in resp["topic_partitions"][0]["records"]] == [("a", "1"), ("a", None)]


def test_cli_sets_and_shows_the_cleanup_policy(config: llog.LlogConfig) -> None:
    env = config_env(config)

    def cli(*args: str) -> str:
        out = subprocess.run([sys.executable, "-m", "llog", *args], env=env, capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0, out.stderr
        return out.stdout

    assert "cleanup.policy compact" in cli("topics", "create", "clip", "--cleanup-policy", "compact")
    assert json.loads(cli("topics", "describe", "clip", "--json"))["cleanup_policy"] == "compact"
    out = cli("topics", "alter", "clip", "--cleanup-policy", "compact,delete", "--retention-ms", "60000")
    assert "cleanup.policy compact,delete, retention 60000 ms" in out
    assert json.loads(cli("topics", "describe", "clip", "--json"))["cleanup_policy"] == "compact,delete"
