"""Changing a topic's retention through Kafka's AlterConfigs and
IncrementalAlterConfigs (confluent-kafka's and kafka-python's admin clients), the SDK
(``Topics.set_retention``) and ``llog topics alter``, on the suite's real etcd and S3
servers; what cannot be altered is refused and changes nothing."""

from __future__ import annotations

import pytest

from llog.config import LlogConfig
from llog.connection import Connection
from llog.errors import InvalidInput
from llog.topic.admin import Topics
from tests import forked_llog
from tests.broker_harness import shared_conn_with_topic_t  # noqa: F401 (the fixture shared_conn)
from tests.conftest import config_env
from tests.test_kafka import KafkaBroker, _exchange, kb_fixture, shared_kb_fixture  # noqa: F401 (kb, shared_kb)

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)


def _retention(conn: Connection, topic: str) -> tuple[int | None, int | None]:
    meta = conn.topic(topic, refresh=True)
    return meta.retention_ms, meta.retention_bytes


def _incremental(admin: AdminClient, topic: str, *entries: tuple[str, str | None, AlterConfigOpType],
                 validate_only: bool = False) -> None:
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=op) for name, value, op in entries])
    admin.incremental_alter_configs([res], validate_only=validate_only)[res].result(timeout=30)


def _described(admin: AdminClient, topic: str) -> dict[str, str]:
    res = ConfigResource(ResourceType.TOPIC, topic)
    return {name: e.value for name, e in admin.describe_configs([res])[res].result(timeout=30).items()}


def test_incremental_alter_configs_sets_and_deletes_retention(kb: KafkaBroker, conn: Connection) -> None:
    Topics(conn).create("ret", 2, retention_bytes=10_000_000)
    admin = AdminClient({"bootstrap.servers": kb.bootstrap})
    _incremental(admin, "ret", ("retention.ms", "3600000", AlterConfigOpType.SET))
    assert _retention(conn, "ret") == (3_600_000, 10_000_000)  # the other limit kept
    assert _described(admin, "ret")["retention.ms"] == "3600000"
    _incremental(admin, "ret", ("retention.bytes", None, AlterConfigOpType.DELETE),
                 ("retention.ms", "-1", AlterConfigOpType.SET))
    assert _retention(conn, "ret") == (None, None)
    assert _described(admin, "ret")["retention.bytes"] == "-1"
    _incremental(admin, "ret", ("retention.ms", "60000", AlterConfigOpType.SET), validate_only=True)
    assert _retention(conn, "ret") == (None, None)  # validated, not applied


@pytest.mark.parametrize(("name", "value", "op", "why"), [
    ("retention.ms", "soon", AlterConfigOpType.SET, "not an integer"),
    ("retention.ms", "0", AlterConfigOpType.SET, "positive limit"),
    ("cleanup.policy", "shred", AlterConfigOpType.SET, "cleanup policy must be"),
    ("compression.type", "lz4", AlterConfigOpType.SET, "compression.type='lz4': compression.type is producer"),
    ("message.timestamp.type", "LogAppendTime", AlterConfigOpType.SET, "message.timestamp.type is CreateTime"),
    ("segment.size", "1024", AlterConfigOpType.SET, "unknown topic config 'segment.size'"),
    ("retention.ms", "1", AlterConfigOpType.APPEND, "SET the whole value"),
])
def test_what_cannot_be_altered_is_refused_and_nothing_changes(
    shared_kb: KafkaBroker, fixed: Connection, name: str, value: str, op: AlterConfigOpType, why: str,
) -> None:
    admin = AdminClient({"bootstrap.servers": shared_kb.bootstrap})
    with pytest.raises(confluent_kafka.KafkaException) as err:
        # A valid change beside the refused one: the resource is refused whole.
        _incremental(admin, "fixed", ("retention.bytes", "5000", AlterConfigOpType.SET), (name, value, op))
    assert err.value.args[0].code() == confluent_kafka.KafkaError.INVALID_CONFIG
    assert why in err.value.args[0].str()
    assert _retention(fixed, "fixed") == (86_400_000, None)


@pytest.fixture(scope="module")
def fixed(shared_conn: Connection) -> Connection:
    """``shared_conn`` with topic ``fixed`` (a day's retention), which every refused
    change must leave as it was."""
    Topics(shared_conn).create("fixed", 1, retention_ms=86_400_000)
    return shared_conn


#: The policies llog fixes for every topic (DescribeConfigs' read-only topic configs),
#: each with a value llog does not use.
FIXED = {"compression.type": "lz4", "min.insync.replicas": "2", "max.message.bytes": "1048588",
         "message.timestamp.type": "LogAppendTime"}


def test_a_reset_or_the_same_value_of_a_fixed_policy_succeeds_and_changes_nothing(
    kb: KafkaBroker, conn: Connection,
) -> None:
    """What MirrorMaker 2's config sync sends: every config of the source topic, those at
    their default there as DELETE."""
    Topics(conn).create("resets", 1, retention_ms=86_400_000)
    admin = AdminClient({"bootstrap.servers": kb.bootstrap})
    before, meta = _described(admin, "resets"), conn.topic("resets", refresh=True)
    for name in FIXED:
        _incremental(admin, "resets", (name, None, AlterConfigOpType.DELETE))
        _incremental(admin, "resets", (name, before[name], AlterConfigOpType.SET))
    # Kafka's local-log tuning: accepted without effect, as CreateTopics takes it.
    _incremental(admin, "resets", ("segment.bytes", "1048576", AlterConfigOpType.SET),
                 ("segment.ms", None, AlterConfigOpType.DELETE))
    assert _described(admin, "resets") == before
    assert conn.topic("resets", refresh=True) == meta
    for name, other in FIXED.items():
        with pytest.raises(confluent_kafka.KafkaException) as err:
            _incremental(admin, "resets", (name, other, AlterConfigOpType.SET))
        assert err.value.args[0].code() == confluent_kafka.KafkaError.INVALID_CONFIG
        assert f"{name} is {before[name]} for every llog topic" in err.value.args[0].str()
    assert conn.topic("resets", refresh=True) == meta


def test_a_reset_beside_a_retention_change_applies_the_change(kb: KafkaBroker, conn: Connection) -> None:
    Topics(conn).create("mixed", 1)
    admin = AdminClient({"bootstrap.servers": kb.bootstrap})
    _incremental(admin, "mixed", ("compression.type", None, AlterConfigOpType.DELETE),
                 ("retention.ms", "7200000", AlterConfigOpType.SET),
                 ("segment.bytes", None, AlterConfigOpType.DELETE))
    assert _retention(conn, "mixed") == (7_200_000, None)
    assert _described(admin, "mixed")["retention.ms"] == "7200000"
    # validate_only by the same rule: a real change of a fixed policy is refused, the
    # rest would be applied but is not.
    with pytest.raises(confluent_kafka.KafkaException, match=r"compression\.type"):
        _incremental(admin, "mixed", ("compression.type", "zstd", AlterConfigOpType.SET),
                     ("retention.ms", "60000", AlterConfigOpType.SET), validate_only=True)
    _incremental(admin, "mixed", ("compression.type", None, AlterConfigOpType.DELETE),
                 ("retention.ms", "60000", AlterConfigOpType.SET), validate_only=True)
    assert _retention(conn, "mixed") == (7_200_000, None)


def test_alter_configs_takes_fixed_policies_by_the_same_rule(kb: KafkaBroker, conn: Connection) -> None:
    """The legacy AlterConfigs: a fixed policy at its own value (or left out: reset)
    and local-log tuning are accepted; another value refuses the whole set."""
    from kafka.protocol.admin import AlterConfigsRequest, AlterConfigsResponse

    Topics(conn).create("legacy", 1, retention_bytes=2_000_000)
    R = AlterConfigsRequest[1]

    def alter(validate_only: bool, **configs: str) -> tuple[int, str | None]:
        req = R(resources=[R.AlterConfigsResource(resource_type=2, resource_name="legacy", configs=[
            R.AlterConfigsResource.AlterableConfig(name=k.replace("_", "."), value=v) for k, v in configs.items()])],
            validate_only=validate_only)
        [got] = _exchange(kb.bootstrap, req, AlterConfigsResponse).responses
        return got.error_code, got.error_message

    code, message = alter(False, compression_type="lz4", retention_ms="60000")
    assert code == confluent_kafka.KafkaError.INVALID_CONFIG and message is not None
    assert "compression.type='lz4'" in message
    assert alter(True, compression_type="producer", retention_ms="60000") == (0, None)
    assert _retention(conn, "legacy") == (None, 2_000_000)  # validated, not applied
    assert alter(False, compression_type="producer", segment_bytes="1024", retention_ms="60000") == (0, None)
    assert _retention(conn, "legacy") == (60_000, None)  # retention.bytes, left out, is back to none


def test_create_topics_takes_configs_by_the_same_rule(kb: KafkaBroker, conn: Connection) -> None:
    from confluent_kafka.admin import NewTopic

    admin = AdminClient({"bootstrap.servers": kb.bootstrap})
    made = NewTopic("made-cfg", 1, 1, config={"segment.bytes": "1048576", "compression.type": "producer",
                                              "retention.ms": "3600000", "message.timestamp.type": "CreateTime"})
    refused = NewTopic("made-lz4", 1, 1, config={"compression.type": "lz4"})
    unknown = NewTopic("made-unknown", 1, 1, config={"segment.size": "1"})
    futures = admin.create_topics([made, refused, unknown], request_timeout=30)
    futures["made-cfg"].result(timeout=30)
    assert _retention(conn, "made-cfg") == (3_600_000, None)
    for name, why in (("made-lz4", "compression.type='lz4'"), ("made-unknown", "unknown topic config")):
        with pytest.raises(confluent_kafka.KafkaException) as err:
            futures[name].result(timeout=30)
        assert err.value.args[0].code() == confluent_kafka.KafkaError.INVALID_CONFIG
        assert why in err.value.args[0].str()
    assert "made-lz4" not in admin.list_topics(timeout=30).topics


def test_unknown_topic_and_broker_resources_are_refused(kb: KafkaBroker) -> None:
    admin = AdminClient({"bootstrap.servers": kb.bootstrap})
    with pytest.raises(confluent_kafka.KafkaException) as err:
        _incremental(admin, "nope", ("retention.ms", "1000", AlterConfigOpType.SET))
    assert err.value.args[0].code() == confluent_kafka.KafkaError.UNKNOWN_TOPIC_OR_PART
    res = ConfigResource(ResourceType.BROKER, "0", incremental_configs=[
        ConfigEntry("log.retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(confluent_kafka.KafkaException) as err:
        admin.incremental_alter_configs([res])[res].result(timeout=30)
    assert err.value.args[0].code() == confluent_kafka.KafkaError.INVALID_REQUEST


def test_alter_configs_replaces_the_whole_configuration(kb: KafkaBroker, conn: Connection) -> None:
    from kafka.protocol.admin import AlterConfigsRequest, AlterConfigsResponse

    Topics(conn).create("whole", 1, retention_ms=1_000_000, retention_bytes=2_000_000)
    R = AlterConfigsRequest[1]
    req = R(resources=[R.AlterConfigsResource(resource_type=2, resource_name="whole", configs=[
        R.AlterConfigsResource.AlterableConfig(name="retention.bytes", value="3000000")])], validate_only=False)
    got = _exchange(kb.bootstrap, req, AlterConfigsResponse)
    assert [r.error_code for r in got.responses] == [0]
    # As in Kafka: the retention.ms it did not name went back to its default (none).
    assert _retention(conn, "whole") == (None, 3_000_000)


def test_kafka_python_alter_configs_keeps_what_it_does_not_name(kb: KafkaBroker, conn: Connection) -> None:
    """kafka-python's non-incremental alter_configs reads the topic's modified,
    alterable configs first (DescribeConfigs: retention is not read-only) and sends
    them along, so only the one it names changes."""
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource as KpResource
    from kafka.admin import ConfigResourceType

    Topics(conn).create("merged", 1, retention_ms=1_000_000, retention_bytes=2_000_000)
    admin = KafkaAdminClient(bootstrap_servers=kb.bootstrap)
    try:
        admin.alter_configs([KpResource(ConfigResourceType.TOPIC, "merged", configs={"retention.bytes": "3000000"})],
                            incremental=False)
    finally:
        admin.close()
    assert _retention(conn, "merged") == (1_000_000, 3_000_000)


def test_sdk_and_cli_change_retention(config: LlogConfig, conn: Connection) -> None:
    topics = Topics(conn)
    topics.create("cli-ret", 1)
    assert topics.set_retention("cli-ret", retention_bytes=1_000_000).retention_bytes == 1_000_000
    with pytest.raises(InvalidInput, match="retention_ms"):
        topics.set_retention("cli-ret", retention_ms=0)
    out = forked_llog.run(["topics", "alter", "cli-ret", "--retention-ms", "60000"], config_env(config), timeout=60,
                          check=True)
    assert "60000 ms" in out.stdout and "1000000 bytes" in out.stdout
    assert _retention(conn, "cli-ret") == (60_000, 1_000_000)
    forked_llog.run(["topics", "alter", "cli-ret", "--retention-bytes", "none"], config_env(config), timeout=60,
                    check=True)
    assert _retention(conn, "cli-ret") == (60_000, None)
    bad = forked_llog.run(["topics", "alter", "cli-ret", "--retention-ms", "-5"], config_env(config), timeout=60)
    assert bad.returncode != 0 and "positive integer" in bad.stderr
    assert _retention(conn, "cli-ret") == (60_000, None)
