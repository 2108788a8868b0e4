"""Growing a topic (``Topics.add_partitions``, ``llog topics alter --partitions``,
Kafka's CreatePartitions through confluent-kafka's admin client and
``kafka-topics.sh --alter``), on the suite's real etcd and S3 servers: processes that
knew the old count write to and read from the new partitions; shrinking is refused and
changes nothing."""

from __future__ import annotations

import pytest

from llog.config import LlogConfig
from llog.connection import Connection
from llog.errors import InvalidInput
from llog.reader import Reader
from llog.topic.admin import Topics
from llog.writer import Writer
from tests import forked_llog, java_client
from tests.conftest import config_env
from tests.test_kafka import KafkaBroker, kb_fixture  # noqa: F401 (the fixture kb)

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewPartitions  # noqa: E402


def test_a_grown_topic_is_written_and_read_by_processes_that_knew_the_old_count(config: LlogConfig,
                                                                                conn: Connection) -> None:
    topics = Topics(conn)
    topics.create("grow", 2)
    with Connection(config) as other:
        assert other.topic("grow").partitions == 2  # cached before the growth
        assert topics.add_partitions("grow", 5).partitions == 5
        with Writer(other) as w:
            result = w.append("grow", 4, [b"in a new partition"])
        assert result.start_offset == 0
        with Reader(other) as r:
            assert [rec.value for rec in r.scan("grow", 4, 0)] == [b"in a new partition"]
    for n in (5, 3, 0):
        with pytest.raises(InvalidInput, match="partitions"):
            topics.add_partitions("grow", n)
    assert conn.topic("grow", refresh=True).partitions == 5


def test_the_cli_grows_a_topic(config: LlogConfig, conn: Connection) -> None:
    Topics(conn).create("cli-grow", 1)
    out = forked_llog.run(["topics", "alter", "cli-grow", "--partitions", "3"], config_env(config), timeout=60,
                          check=True)
    assert "3 partitions" in out.stdout
    bad = forked_llog.run(["topics", "alter", "cli-grow", "--partitions", "2"], config_env(config), timeout=60)
    assert bad.returncode != 0 and "only grows" in bad.stderr
    assert conn.topic("cli-grow", refresh=True).partitions == 3


def test_create_partitions_through_kafka(kb: KafkaBroker, conn: Connection) -> None:
    Topics(conn).create("kgrow", 2)
    kb.http.post("/produce", {"topic_partitions": [{"topic": "kgrow", "partition": 0, "records": ["warm"]}]})
    admin = AdminClient({"bootstrap.servers": kb.bootstrap})
    admin.create_partitions([NewPartitions("kgrow", 3)], validate_only=True)["kgrow"].result(timeout=30)
    assert conn.topic("kgrow", refresh=True).partitions == 2  # validated only
    admin.create_partitions([NewPartitions("kgrow", 4)])["kgrow"].result(timeout=30)
    assert conn.topic("kgrow", refresh=True).partitions == 4
    for ask, code in (("kgrow", confluent_kafka.KafkaError.INVALID_PARTITIONS),
                      ("nope", confluent_kafka.KafkaError.UNKNOWN_TOPIC_OR_PART)):
        with pytest.raises(confluent_kafka.KafkaException) as err:
            admin.create_partitions([NewPartitions(ask, 3)])[ask].result(timeout=30)
        assert err.value.args[0].code() == code
    assert conn.topic("kgrow", refresh=True).partitions == 4

    # The broker had the topic cached at 2 partitions: it finds partition 3 anyway.
    status, body = kb.http.post("/produce", {"topic_partitions": [
        {"topic": "kgrow", "partition": 3, "records": ["new"]}]})
    assert status == 200 and body["results"][0]["ok"], body
    producer = confluent_kafka.Producer({"bootstrap.servers": kb.bootstrap})
    producer.produce("kgrow", value=b"kafka", partition=3)
    assert producer.flush(30) == 0
    with Reader(conn) as r:
        assert [rec.value for rec in r.scan("kgrow", 3, 0)] == [b"new", b"kafka"]

    out = java_client.tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", kb.bootstrap, "--alter",
                           "--topic", "kgrow", "--partitions", "6")
    assert "Error" not in out
    described = java_client.tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", kb.bootstrap,
                                 "--describe", "--topic", "kgrow")
    assert "PartitionCount: 6" in described
