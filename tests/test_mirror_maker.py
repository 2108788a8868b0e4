"""MirrorMaker 2 (Apache Kafka's ``connect-mirror`` 4.1, dedicated mode) mirroring a
topic of Apache Kafka itself into llog through the Kafka listener, on the suite's real
etcd and S3 servers: its periodic topic-config sync, which sends every config of the
source topic and resets those at their default there (``compression.type``,
``segment.bytes``, ...), is accepted, so a ``retention.ms`` change on the source
reaches llog's topic, and MirrorMaker logs no refused sync."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from llog.config import LlogConfig
from llog.connection import Connection
from tests import java_client
from tests.apache_kafka import apache_kafka, stop
from tests.conftest import wait_until
from tests.test_kafka import kafka_broker

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

MIRROR_MAKER = "org.apache.kafka.connect.mirror.MirrorMaker"
SYNC_S = 2  # sync.topic.configs.interval.seconds


def _topic_config(admin: AdminClient, topic: str, name: str) -> str | None:
    res = ConfigResource(ResourceType.TOPIC, topic)
    try:
        return str(admin.describe_configs([res])[res].result(timeout=30)[name].value)
    except confluent_kafka.KafkaException:  # not created yet
        return None


def _syncs(lines: list[str]) -> list[int]:
    """Where MirrorMaker logged the end of a topic-config sync (see below)."""
    return [i for i, line in enumerate(lines) if "Could not alter configuration of topic src.orders" in line]


def test_a_retention_change_on_the_source_reaches_llog(config: LlogConfig, conn: Connection, tmp_path: Path) -> None:
    classpath = java_client.classpath()
    with apache_kafka(tmp_path, classpath, heap="512m") as (source, _), kafka_broker(config) as kb:
        src = AdminClient({"bootstrap.servers": source})
        src.create_topics([NewTopic("orders", 2, 1)])["orders"].result(timeout=60)
        props, log = tmp_path / "mm2.properties", tmp_path / "mm2.log"
        props.write_text("\n".join([
            "clusters=src,llog", f"src.bootstrap.servers={source}", f"llog.bootstrap.servers={kb.bootstrap}",
            "src->llog.enabled=true", "src->llog.topics=orders", "llog->src.enabled=false",
            f"sync.topic.configs.interval.seconds={SYNC_S}", "sync.topic.acls.enabled=false",
            "emit.heartbeats.enabled=false",
            "replication.factor=1", "offset-syncs.topic.replication.factor=1",
            "checkpoints.topic.replication.factor=1", "heartbeats.topic.replication.factor=1",
            "config.storage.replication.factor=1", "offset.storage.replication.factor=1",
            "status.storage.replication.factor=1", "",
        ]))
        mm2 = java_client.start(str(props), main_class=MIRROR_MAKER, stdout=subprocess.DEVNULL,
                                stderr=log.open("w"))
        try:
            llog = AdminClient({"bootstrap.servers": kb.bootstrap})

            def mirrored(value: str) -> bool:
                assert mm2.poll() is None, f"MirrorMaker exited ({mm2.returncode}):\n{log.read_text()[-4000:]}"
                return _topic_config(llog, "src.orders", "retention.ms") == value

            # MirrorMaker creates the topic on llog (DefaultReplicationPolicy: src.orders).
            wait_until(lambda: mirrored("-1"), 300, "MirrorMaker to create src.orders on llog")
            res = ConfigResource(ResourceType.TOPIC, "orders", incremental_configs=[
                ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)])
            src.incremental_alter_configs([res])[res].result(timeout=60)
            wait_until(lambda: mirrored("3600000"), 300, "the retention change to reach llog")
            assert conn.topic("src.orders", refresh=True).retention_ms == 3_600_000
            # One more sync, all of them checked below before a stop's own complaints.
            seen = len(_syncs(log.read_text().splitlines()))
            wait_until(lambda: len(_syncs(log.read_text().splitlines())) > seen, 300, "one more config sync")
            logged = log.read_text()
        finally:
            stop(mm2)
    # MirrorMaker 4.1 logs "Could not alter configuration of topic src.orders." after
    # every sync, followed by the exception when there is one (KAFKA-20017: the warning
    # on success is its bug); a refused sync is that line with llog's
    # InvalidConfigurationException under it.
    lines = logged.splitlines()
    refused = [lines[i + 1] for i in _syncs(lines) if i + 1 < len(lines) and "Exception" in lines[i + 1]]
    assert not refused and "InvalidConfigurationException" not in logged, logged[-4000:]
