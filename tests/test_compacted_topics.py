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
from pathlib import Path
from typing import Any

import pytest

import llog
from compactor import compact_once
from compactor.retention import apply_retention
from llog import Record
from llog.errors import InvalidInput, KeyRequired
from llog.groups import Consumer
from llog.producer import BatchingProducer
from llog.state.control import read_control
from llog.topic.admin import parse_cleanup_policy
from tests import forked_llog
from tests.conftest import config_env
from tests.test_kafka import KafkaBroker, kafka_broker, kb_fixture  # noqa: F401 (the fixture kb)

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
    with pytest.raises(InvalidInput, match="not supported for it yet"):
        llog.Topics(conn).set_compacted_format("cmp", "parquet")


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
        out = forked_llog.run([*args], env, timeout=120)
        assert out.returncode == 0, out.stderr
        return out.stdout

    assert "cleanup.policy compact" in cli("topics", "create", "clip", "--cleanup-policy", "compact")
    assert json.loads(cli("topics", "describe", "clip", "--json"))["cleanup_policy"] == "compact"
    out = cli("topics", "alter", "clip", "--cleanup-policy", "compact,delete", "--retention-ms", "60000")
    assert "cleanup.policy compact,delete, retention 60000 ms" in out
    assert json.loads(cli("topics", "describe", "clip", "--json"))["cleanup_policy"] == "compact,delete"


# -- key compaction (spec §10.2) --------------------------------------------------------


def _compact_all(conn: llog.Connection, topic: str, partition: int = 0) -> None:
    while compact_once(conn, topic, partition).outcome == "compacted":
        pass


def _clean(conn: llog.Connection, topic: str, partition: int = 0) -> Any:
    from compactor import Compactor

    with Compactor(conn) as c:
        return c.clean_once(topic, partition)




def test_key_compaction_keeps_the_latest_record_per_key_at_its_offset(kconn: llog.Connection) -> None:
    conn = kconn
    llog.Topics(conn).create("kv", 1, cleanup_policy="compact", delete_retention_ms=0)
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    offset = 0
    with llog.Writer(conn) as w:
        for round_ in range(6):
            recs = [Record(f"v{round_}.{k}".encode(), key=f"k{k}".encode()) for k in range(10)]
            if round_ == 5:
                recs[3] = Record(None, key=b"k3")  # a tombstone: k3 deleted
            w.append("kv", 0, recs)
            for r in recs:
                assert r.key is not None
                latest[r.key] = (offset, r.value)
                offset += 1
    _compact_all(conn, "kv")
    res = _clean(conn, "kv")
    assert res.outcome == "cleaned" and res.removed > 0 and res.keys == 10

    def read() -> list[tuple[int, bytes | None, bytes | None]]:
        with llog.Reader(conn) as r:
            return [(c.offset, c.key, c.value) for c in r.scan("kv", 0)]

    got = read()
    assert {k: (o, v) for o, k, v in got} == latest  # each key's last record, at its own offset
    assert len(got) == 10
    # The tombstone stays through the pass that first saw it ...
    assert (latest[b"k3"][1]) is None and any(k == b"k3" for _, k, _ in got)
    # ... and goes in a later one once delete.retention.ms (0 here) has passed.
    res = _clean(conn, "kv")
    assert res.outcome == "cleaned" and res.removed == 1
    assert [k for _, k, _ in read()] == [k for _, k, _ in got if k != b"k3"]
    assert _clean(conn, "kv").outcome == "idle"


def _write_versions(conn: llog.Connection, topic: str, keys: int, rounds: int) -> dict[bytes, tuple[int, bytes]]:
    """``rounds`` appends each updating every key; the latest ``(offset, value)`` per key."""
    latest: dict[bytes, tuple[int, bytes]] = {}
    with llog.Writer(conn) as w:
        for round_ in range(rounds):
            res = w.append(topic, 0, [Record(f"v{round_}.{k}".encode(), key=f"k{k}".encode()) for k in range(keys)])
            for k in range(keys):
                latest[f"k{k}".encode()] = (res.start_offset + k, f"v{round_}.{k}".encode())
    return latest


def _latest_read(conn: llog.Connection, topic: str) -> dict[bytes | None, tuple[int, bytes | None]]:
    with llog.Reader(conn) as r:
        got = [(c.key, (c.offset, c.value)) for c in r.scan(topic, 0)]
    offsets = [o for _, (o, _) in got]
    assert offsets == sorted(set(offsets))  # each offset once, in order
    return dict(got)


class _Crash(Exception):
    pass


@pytest.mark.parametrize("point", ["after_put", "after_record", "after_WRITING_COMPACTED_INDEX",
                                   "after_DELETING_OLD", "after_UPDATING_CURSOR"])
def test_key_compaction_killed_at_every_step_loses_and_duplicates_nothing(kconn: llog.Connection, point: str) -> None:
    from compactor import Compactor, StageEvent

    conn = kconn
    llog.Topics(conn).create("kc", 1, cleanup_policy="compact")
    latest = _write_versions(conn, "kc", 8, 5)
    _compact_all(conn, "kc")

    def crash(ev: StageEvent) -> None:
        if ev.point == point and ev.record.replaces is not None:
            raise _Crash(point)

    with Compactor(conn, hook=crash) as c, pytest.raises(_Crash):
        c.clean_once("kc", 0)
    # In between, a reader sees every key's latest record, each offset once.
    seen = _latest_read(conn, "kc")
    assert seen == latest
    res = _clean(conn, "kc")  # a fresh compactor finishes the record, then its own pass
    assert res.outcome == "cleaned"
    with llog.Reader(conn) as r:
        assert {c.key: (c.offset, c.value) for c in r.scan("kc", 0)} == latest
        assert len(list(r.scan("kc", 0))) == len(latest)
    assert conn.etcd.get(conn.keys.compaction("kc", 0)) is None


def test_a_small_key_map_cleans_in_several_passes(config: llog.LlogConfig) -> None:
    cfg = replace(config, compact_min_age_ms=0, settle_after_ms=0, compact_min_dirty_ratio=0.0,
                  compact_target_bytes=1024, compact_key_map_entries=3)
    with llog.Connection(cfg) as conn:
        llog.Topics(conn).create("small", 1, cleanup_policy="compact")
        latest = _write_versions(conn, "small", 10, 4)
        _compact_all(conn, "small")
        passes = 0
        while (res := _clean(conn, "small")).outcome == "cleaned" and passes < 50:
            assert res.keys <= 10  # a whole entry's keys at least, never more than the map holds after it
            passes += 1
        assert passes > 1
        assert _latest_read(conn, "small") == latest


def test_records_newer_than_the_compaction_lag_stay(kconn: llog.Connection) -> None:
    conn = kconn
    llog.Topics(conn).create("lag", 1, cleanup_policy="compact", min_compaction_lag_ms=3_600_000)
    _write_versions(conn, "lag", 5, 3)
    _compact_all(conn, "lag")
    assert _clean(conn, "lag").outcome == "idle"  # every record is newer than an hour
    with llog.Reader(conn) as r:
        assert len(list(r.scan("lag", 0))) == 15


def test_consumers_read_past_the_gaps(kconn: llog.Connection, kb: KafkaBroker) -> None:
    conn = kconn
    llog.Topics(conn).create("gaps", 1, cleanup_policy="compact")
    latest = _write_versions(conn, "gaps", 4, 30)  # the first 116 offsets become gaps
    _compact_all(conn, "gaps")
    assert _clean(conn, "gaps").outcome == "cleaned"
    want = sorted((o, k, v) for k, (o, v) in latest.items())
    # The SDK's group consumer, 5 records a poll: its position passes the gaps.
    got: list[tuple[int, bytes | None, bytes | None]] = []
    with Consumer(conn, "gap-readers", ["gaps"]) as consumer:
        for _ in range(50):
            got += [(r.offset, r.key, r.value) for r in consumer.poll(max_records=5, timeout_s=0.2)]
            if len(got) >= len(want):
                break
    assert got == want
    # A Kafka consumer gets the same records at the same offsets.
    kc = confluent_kafka.Consumer({"bootstrap.servers": kb.bootstrap, "group.id": "gap-kafka",
                                   "auto.offset.reset": "earliest", "enable.auto.commit": False})
    kc.assign([confluent_kafka.TopicPartition("gaps", 0, 0)])
    fetched: list[tuple[int, bytes | None, bytes | None]] = []
    while len(fetched) < len(want):
        m = kc.poll(10)
        assert m is not None and m.error() is None
        fetched.append((m.offset(), m.key(), m.value()))
    kc.close()
    assert fetched == want


def test_a_million_records_over_ten_thousand_keys_compact_to_the_latest_of_each(
    config: llog.LlogConfig, spark: Any
) -> None:
    """The acceptance run: 1,000,000 records (100 rounds over 10,000 keys, the last
    round's every tenth key a tombstone), compacted, then key-compacted by compactor
    processes SIGKILLed at every step in turn and one that finishes; every reader then
    gets exactly each live key's latest record at its offset (Kafka's clients through a
    broker of one process and one of two workers: the log is made once for both), and
    the tombstones go once delete.retention.ms (0 here) has passed."""
    import json as _json

    from tests import java_client

    cfg = replace(config, compact_min_age_ms=0, settle_after_ms=0, compact_min_dirty_ratio=0.0)
    keys, rounds = 10_000, 100
    with llog.Connection(cfg) as conn:
        llog.Topics(conn).create("million", 1, cleanup_policy="compact", delete_retention_ms=0)
        latest: dict[bytes, tuple[int, bytes | None]] = {}
        with llog.Writer(conn) as w:
            for r in range(rounds):
                recs = [Record(None if r == rounds - 1 and k % 10 == 0 else b"%d.%d" % (r, k), key=b"k%d" % k)
                        for k in range(keys)]
                res = w.append("million", 0, recs)
                latest.update((rec.key or b"", (res.start_offset + i, rec.value)) for i, rec in enumerate(recs))
        _compact_all(conn, "million")
        env = {**config_env(cfg), "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
        worker = [sys.executable, str(Path(__file__).parent / "workers" / "cleaner_kill.py"), "million", "0"]
        for point in ("after_put", "after_record", "after_WRITING_COMPACTED_INDEX", "after_DELETING_OLD",
                      "after_UPDATING_CURSOR"):
            out = subprocess.run([*worker, point], env=env, capture_output=True, text=True, timeout=300)
            assert out.returncode == -9, (point, out.stderr[-2000:])
        done = subprocess.run([*worker, "none"], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        result = _json.loads(done.stdout)
        print(f"key compaction of 1,000,000 records / 10,000 keys: {result}")
        live = {k: v for k, v in latest.items()}
        assert _latest_read(conn, "million") == live  # tombstones kept by the pass that met them
        assert sum(v is None for _, v in live.values()) == 1000
        # A second pass: the tombstones are past delete.retention.ms (0) and go.
        assert _clean(conn, "million").removed == 1000
        live = {k: v for k, v in latest.items() if v[1] is not None}
        assert _latest_read(conn, "million") == live
    want = sorted((o, k.decode(), (v or b"").decode()) for k, (o, v) in live.items())
    for workers in ("1", "2"):
        with kafka_broker(config, "--workers", workers) as kb:
            # librdkafka, through Kafka Fetch.
            kc = confluent_kafka.Consumer({"bootstrap.servers": kb.bootstrap, "group.id": f"million-rd-{workers}",
                                           "auto.offset.reset": "earliest", "enable.auto.commit": False})
            kc.assign([confluent_kafka.TopicPartition("million", 0, 0)])
            fetched = []
            while len(fetched) < len(want):
                m = kc.poll(10)
                assert m is not None and m.error() is None
                fetched.append((m.offset(), m.key().decode(), m.value().decode()))
            kc.close()
            assert fetched == want, workers
            # The Java client.
            lines = java_client.run("consume", kb.bootstrap, "million", f"million-java-{workers}", str(len(want)))
            got = sorted((int(o), k, v) for _, _, o, k, v, *_ in (line.split(" ") for line in lines
                                                                    if line.startswith("record ")))
            assert got == want, workers
    # Spark, through llog's source.
    from tests.test_spark_batch import spark_options

    df = spark.read.format("llog").options(**spark_options(cfg)).option("topic", "million").load()  # type: ignore[attr-defined]
    rows = sorted((r.offset, bytes(r.key).decode(), bytes(r.value).decode()) for r in df.collect())
    assert rows == want


def test_a_deleted_key_stays_deleted_when_whole_files_lose_every_record(config: llog.LlogConfig) -> None:
    """Every record of an early file is superseded: the file is swapped out with the next
    one instead of keeping a stale record, which would be the key's value again once its
    tombstone expired; the partition's last record stays whatever it is."""
    cfg = replace(config, compact_min_age_ms=0, settle_after_ms=0, compact_min_dirty_ratio=0.0,
                  compact_target_bytes=1)  # one compacted file per append, one group per file
    with llog.Connection(cfg) as conn:
        llog.Topics(conn).create("resurrect", 1, cleanup_policy="compact", delete_retention_ms=0)
        with llog.Writer(conn) as w:
            w.append("resurrect", 0, [Record(b"old", key=b"a")])
            w.append("resurrect", 0, [Record(None, key=b"a")])  # a deleted
            w.append("resurrect", 0, [Record(b"v", key=b"b")])
            w.append("resurrect", 0, [Record(None, key=b"b")])  # the last record: a tombstone
        _compact_all(conn, "resurrect")
        assert _clean(conn, "resurrect").outcome == "cleaned"
        assert _latest_read(conn, "resurrect") == {b"a": (1, None), b"b": (3, None)}
        assert _clean(conn, "resurrect").removed == 1  # a's tombstone expired; b's is the last record
        assert _latest_read(conn, "resurrect") == {b"b": (3, None)}
