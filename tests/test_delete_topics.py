"""Deleting a topic (Kafka's DeleteTopics) through the SDK, the CLI, confluent-kafka's
and kafka-python's admin clients and ``kafka-topics.sh --delete``, on the suite's real
etcd and S3 servers: every key of the topic and every group's offsets for it go in one
step, a topic created again under the name starts empty, writers and group commits
that still know the old topic are fenced by the topic guard (nothing is written under
a deleted topic, nor into its successor), and vacuum removes the data objects."""

from __future__ import annotations

import subprocess
from contextlib import ExitStack
from dataclasses import replace

import pytest

import llog
from compactor import compact_once
from compactor.vacuum import vacuum
from llog.errors import ClaimLost, UnknownTopic
from llog.groups.offsets import GroupOffsets
from llog.state.keys import prefix_range_end
from tests import forked_llog, java_client
from tests.conftest import config_env
from tests.test_kafka import KafkaBroker, kb_fixture  # noqa: F401 (the fixture kb)


def _keys_under(conn: llog.Connection, topic: str) -> list[str]:
    prefix = conn.keys.topic_prefix(topic)
    return conn.etcd.keys(prefix, prefix_range_end(prefix))


def _offset_keys(conn: llog.Connection, group: str) -> list[str]:
    prefix = conn.keys.group_offset_prefix(group)
    return conn.etcd.keys(prefix, prefix_range_end(prefix))


def test_delete_removes_every_key_and_offset_and_a_new_topic_starts_empty(config: llog.LlogConfig) -> None:
    with llog.Connection(replace(config, compact_min_age_ms=0, settle_after_ms=0)) as conn:
        topics = llog.Topics(conn)
        topics.create("gone", 2)
        topics.create("kept", 1)
        with llog.Writer(conn) as w:
            for i in range(5):
                w.append("gone", i % 2, [b"g%d" % i])
                w.append("kept", 0, [b"k%d" % i])
        compact_once(conn, "gone", 0)
        offsets = GroupOffsets(conn, "readers")
        offsets.commit("gone", 0, 2)
        offsets.commit("kept", 0, 3)
        assert _keys_under(conn, "gone")
        deleted = topics.delete("gone")
        assert deleted.name == "gone" and deleted.partitions == 2
        assert _keys_under(conn, "gone") == []
        assert [k.rsplit("/", 2)[-2] for k in _offset_keys(conn, "readers")] == ["kept"]
        with pytest.raises(UnknownTopic):
            topics.get("gone")
        with pytest.raises(UnknownTopic):
            topics.delete("gone")
        assert [m.name for m in topics.list()] == ["kept"]
        # The name is free: a new topic of another shape starts at offset 0, empty.
        topics.create("gone", 3)
        with llog.Writer(conn) as w:
            assert w.append("gone", 0, [b"new"]).start_offset == 0
        with llog.Reader(conn) as r:
            assert [c.value for c in r.scan("gone", 0, 0)] == [b"new"]
            assert r.high_watermark("gone", 1) == (0, 0)
            assert [c.value for c in r.scan("kept", 0, 0)] == [b"k%d" % i for i in range(5)]
        assert offsets.get("gone", 0) is None


def test_offsets_of_groups_beyond_the_deleting_transaction_go_too(
    config: llog.LlogConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    import llog.topic.deletion

    monkeypatch.setattr(llog.topic.deletion, "OFFSET_RANGES_PER_DELETE", 1)  # one group in the transaction, two after
    with llog.Connection(config) as conn:
        llog.Topics(conn).create("many", 1)
        with llog.Writer(conn) as w:
            w.append("many", 0, [b"a", b"b"])
        for g in ("ga", "gb", "gc"):
            GroupOffsets(conn, g).commit("many", 0, 1)
        llog.Topics(conn).delete("many")
        assert [_offset_keys(conn, g) for g in ("ga", "gb", "gc")] == [[], [], []]


@pytest.mark.parametrize("recreate", [False, True], ids=["deleted", "deleted-and-created-again"])
def test_a_writer_that_knew_the_old_topic_writes_nothing_under_it(config: llog.LlogConfig, recreate: bool) -> None:
    with ExitStack() as stack:
        admin, *conns = (stack.enter_context(llog.Connection(config)) for _ in range(4))
        llog.Topics(admin).create("fenced", 6)
        warm, cold, combined = (stack.enter_context(llog.Writer(c)) for c in conns)
        # warm: partition 0's state cached, so its next commit needs no read (its CAS
        # fails on the deleted control key); cold: knows the topic, but partition 5 was
        # never written (its control key is absent before and after the deletion, so
        # only the topic guard stops the commit); combined: a blob over partitions 0-3
        # commits in one transaction (W2').
        warm.append("fenced", 0, [b"before"])
        cold.append("fenced", 0, [b"before"])
        combined.append_shared([llog.AppendGroup("fenced", p, [b"before"]) for p in range(4)])
        llog.Topics(admin).delete("fenced")
        if recreate:
            llog.Topics(admin).create("fenced", 6)
        with pytest.raises(UnknownTopic):
            warm.append("fenced", 0, [b"after"])
        with pytest.raises(UnknownTopic):
            cold.append("fenced", 5, [b"after"])
        results = combined.append_shared([llog.AppendGroup("fenced", p, [b"after"]) for p in range(4)])
        assert all(isinstance(r, llog.AppendFailure) and isinstance(r.error, UnknownTopic) for r in results), results
        # Nothing written under the old topic, nor into the new one.
        assert [k for k in _keys_under(admin, "fenced") if not k.endswith("/meta/topic")] == []
        if recreate:  # the writers read the definition again: appends go to the new topic
            assert warm.append("fenced", 0, [b"new"]).start_offset == 0
            assert combined.append("fenced", 1, [b"new"]).start_offset == 0
        else:
            assert _keys_under(admin, "fenced") == []


def test_a_blob_staged_for_the_old_topic_never_commits_into_the_new_one(config: llog.LlogConfig) -> None:
    with llog.Connection(config) as conn, llog.Connection(config) as admin:
        llog.Topics(admin).create("staged", 8)
        with llog.Writer(conn) as w:
            w.append_shared([llog.AppendGroup("staged", p, [b"warm"]) for p in (0, 5)])
            staged = w.stage_shared([llog.AppendGroup("staged", p, [b"old"]) for p in (0, 5)])  # PUT, not committed
            llog.Topics(admin).delete("staged")
            llog.Topics(admin).create("staged", 1)
            conn.topic("staged", refresh=True)  # the writer's connection already knows the new topic
            outcomes = w.commit_staged(staged)
        assert all(isinstance(o, llog.AppendFailure) and isinstance(o.error, UnknownTopic) for o in outcomes)
        assert [k for k in _keys_under(admin, "staged") if not k.endswith("/meta/topic")] == []


def test_a_producer_batch_fails_only_the_deleted_topics_groups(config: llog.LlogConfig) -> None:
    from llog.producer import BatchingProducer

    # One linger window (60 s, ended by flush) holds both topics' sends in one batch.
    with llog.Connection(replace(config, batch_max_delay_ms=60_000)) as conn:
        topics = llog.Topics(conn)
        topics.create("bx", 1)
        topics.create("by", 1)
        with BatchingProducer(conn) as prod:
            doomed = prod.send("bx", 0, b"x")
            kept = prod.send("by", 0, b"y")
            topics.delete("bx")  # after send() checked it, before the batch is encoded
            prod.flush(60)
            with pytest.raises(UnknownTopic):
                doomed.result(timeout=60)
            assert kept.result(timeout=60) == 0


def test_a_group_commit_that_knew_the_old_topic_is_refused(config: llog.LlogConfig) -> None:
    with llog.Connection(config) as conn, llog.Connection(config) as admin:
        llog.Topics(admin).create("gc", 1)
        with llog.Writer(admin) as w:
            w.append("gc", 0, [b"a", b"b"])
        offsets = GroupOffsets(conn, "g")
        offsets.commit("gc", 0, 1)  # conn now caches the topic
        llog.Topics(admin).delete("gc")
        llog.Topics(admin).create("gc", 1)
        with llog.Writer(admin) as w:
            w.append("gc", 0, [b"x", b"y"])
        with pytest.raises(UnknownTopic):
            offsets.commit("gc", 0, 2)
        assert _offset_keys(admin, "g") == []
        assert offsets.commit("gc", 0, 2).offset == 2  # against the new topic, re-read


@pytest.mark.parametrize("point", ["after_put", "after_record", "after_WRITING_COMPACTED_INDEX"])
def test_a_compaction_in_flight_writes_nothing_under_a_deleted_topic(config: llog.LlogConfig, point: str) -> None:
    from compactor.stages import StageEvent

    cfg = replace(config, compact_min_age_ms=0, settle_after_ms=0)
    with llog.Connection(cfg) as conn, llog.Connection(cfg) as admin:
        llog.Topics(admin).create("cgone", 1)
        with llog.Writer(admin) as w:
            for i in range(6):
                w.append("cgone", 0, [b"c%d" % i])

        def delete_at(event: StageEvent) -> None:
            if event.point == point:
                llog.Topics(admin).delete("cgone")

        with pytest.raises((UnknownTopic, ClaimLost)):
            while compact_once(conn, "cgone", 0, hook=delete_at).outcome == "compacted":
                pass
        assert _keys_under(admin, "cgone") == []


def test_vacuum_removes_a_deleted_topics_objects(config: llog.LlogConfig) -> None:
    with llog.Connection(replace(config, compact_min_age_ms=0, settle_after_ms=0)) as conn:
        topics = llog.Topics(conn)
        topics.create("vac", 1)
        topics.create("stays", 1)
        with llog.Writer(conn) as w:
            for i in range(4):
                w.append("vac", 0, [b"v%d" % i])
            w.append("stays", 0, [b"s"])
        compact_once(conn, "vac", 0)
        compacted = [o.key for o in conn.store.list(conn.keys.topic_prefix("vac"))]
        assert compacted
        before = {o.key for o in conn.store.list(conn.keys.all_prefix())}
        topics.delete("vac")
        report = vacuum(conn, grace_s=0)
        assert set(compacted) <= set(report.deleted)
        after = {o.key for o in conn.store.list(conn.keys.all_prefix())}
        assert after == before - set(report.deleted)
        with llog.Reader(conn) as r:  # the blob "stays" shares is kept
            assert [c.value for c in r.scan("stays", 0, 0)] == [b"s"]


def test_the_cli_deletes_a_topic(config: llog.LlogConfig, conn: llog.Connection) -> None:
    llog.Topics(conn).create("cli-gone", 2)

    def run() -> subprocess.CompletedProcess[str]:
        return forked_llog.run(["topics", "delete", "cli-gone"], config_env(conn.config))

    first = run()
    assert first.returncode == 0 and "deleted topic cli-gone (2 partitions)" in first.stdout, first.stderr
    again = run()
    assert again.returncode != 0 and "unknown topic 'cli-gone'" in again.stderr


def test_kafka_admin_clients_and_kafka_topics_delete(kb: KafkaBroker, conn: llog.Connection) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient
    from kafka.admin import KafkaAdminClient

    topics = llog.Topics(conn)
    for name in ("ck", "kp", "jt"):
        topics.create(name, 2)
    admin = AdminClient({"bootstrap.servers": kb.bootstrap})
    futures = admin.delete_topics(["ck", "nope"], operation_timeout=30)
    futures["ck"].result(timeout=30)
    with pytest.raises(confluent_kafka.KafkaException, match="UNKNOWN_TOPIC_OR_PART"):
        futures["nope"].result(timeout=30)
    kp = KafkaAdminClient(bootstrap_servers=kb.bootstrap)
    try:
        kp.delete_topics(["kp"])
    finally:
        kp.close()
    out = java_client.tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", kb.bootstrap,
                           "--delete", "--topic", "jt")
    assert "rror" not in out, out
    assert not {"ck", "kp", "jt"} & {m.name for m in topics.list()}
    listed = java_client.tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", kb.bootstrap, "--list")
    assert not {"ck", "kp", "jt"} & set(listed.split())


def test_delete_topics_v6_by_the_id_metadata_gave(kb: KafkaBroker, conn: llog.Connection) -> None:
    import uuid

    from kafka.protocol.admin import DeleteTopicsRequest, DeleteTopicsResponse
    from kafka.protocol.metadata import MetadataRequest, MetadataResponse

    from tests.test_kafka import _exchange

    llog.Topics(conn).create("byid", 2)
    meta = _exchange(kb.bootstrap, MetadataRequest[12](topics=[MetadataRequest[12].MetadataRequestTopic(
        name="byid", topic_id=uuid.UUID(int=0))], allow_auto_topic_creation=False,
        include_topic_authorized_operations=False), MetadataResponse)
    [topic_id] = [t.topic_id for t in meta.topics if t.name == "byid"]
    assert topic_id != uuid.UUID(int=0)
    R = DeleteTopicsRequest[6]
    resp = _exchange(kb.bootstrap, R(topics=[R.DeleteTopicState(name=None, topic_id=topic_id),
                                             R.DeleteTopicState(name=None, topic_id=uuid.uuid4())],
                                     timeout_ms=30_000), DeleteTopicsResponse)
    assert [(r.name, r.topic_id, r.error_code) for r in resp.responses] == [
        ("byid", topic_id, 0), (None, resp.responses[1].topic_id, 100)]  # 100: UNKNOWN_TOPIC_ID
    with pytest.raises(UnknownTopic):
        llog.Topics(conn).get("byid")
    llog.Topics(conn).create("byid", 2)  # created again: another id
    again = _exchange(kb.bootstrap, MetadataRequest[12](topics=[MetadataRequest[12].MetadataRequestTopic(
        name="byid", topic_id=uuid.UUID(int=0))], allow_auto_topic_creation=False,
        include_topic_authorized_operations=False), MetadataResponse)
    assert [t.topic_id for t in again.topics if t.name == "byid"] != [topic_id]
