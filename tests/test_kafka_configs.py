"""Changing a topic's retention through Kafka's AlterConfigs and
IncrementalAlterConfigs (confluent-kafka's and kafka-python's admin clients), the SDK
(``Topics.set_retention``) and ``llog topics alter``, on the suite's real etcd and S3
servers; what cannot be altered is refused and changes nothing."""

from __future__ import annotations

import subprocess
import sys

import pytest

from llog.config import LlogConfig
from llog.connection import Connection
from llog.errors import InvalidInput
from llog.topics import Topics
from tests.conftest import config_env
from tests.test_kafka import KafkaBroker, _exchange, kb_fixture  # noqa: F401 (the fixture kb)

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
    ("compression.type", "lz4", AlterConfigOpType.SET, "for every llog topic"),
    ("segment.bytes", "1024", AlterConfigOpType.SET, "unknown topic config"),
    ("retention.ms", "1", AlterConfigOpType.APPEND, "SET the whole value"),
])
def test_what_cannot_be_altered_is_refused_and_nothing_changes(
    kb: KafkaBroker, conn: Connection, name: str, value: str, op: AlterConfigOpType, why: str,
) -> None:
    Topics(conn).create("fixed", 1, retention_ms=86_400_000)
    admin = AdminClient({"bootstrap.servers": kb.bootstrap})
    with pytest.raises(confluent_kafka.KafkaException) as err:
        # A valid change beside the refused one: the resource is refused whole.
        _incremental(admin, "fixed", ("retention.bytes", "5000", AlterConfigOpType.SET), (name, value, op))
    assert err.value.args[0].code() == confluent_kafka.KafkaError.INVALID_CONFIG
    assert why in err.value.args[0].str()
    assert _retention(conn, "fixed") == (86_400_000, None)


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
    out = subprocess.run([sys.executable, "-m", "llog", "topics", "alter", "cli-ret", "--retention-ms", "60000"],
                         env=config_env(config), capture_output=True, text=True, timeout=60, check=True)
    assert "60000 ms" in out.stdout and "1000000 bytes" in out.stdout
    assert _retention(conn, "cli-ret") == (60_000, 1_000_000)
    subprocess.run([sys.executable, "-m", "llog", "topics", "alter", "cli-ret", "--retention-bytes", "none"],
                   env=config_env(config), capture_output=True, text=True, timeout=60, check=True)
    assert _retention(conn, "cli-ret") == (60_000, None)
    bad = subprocess.run([sys.executable, "-m", "llog", "topics", "alter", "cli-ret", "--retention-ms", "-5"],
                         env=config_env(config), capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "positive integer" in bad.stderr
    assert _retention(conn, "cli-ret") == (60_000, None)
