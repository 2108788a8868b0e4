"""Apache Kafka's own command-line tools (``kafka-tools`` 4.1, the classes behind
``kafka-topics.sh``, ``kafka-console-producer.sh``, ``kafka-console-consumer.sh``,
``kafka-consumer-groups.sh``, ``kafka-get-offsets.sh``, ``kafka-configs.sh``,
``kafka-transactions.sh``, the verifiable producer and consumer and the producer perf
test) against the Kafka listener,
on the suite's real etcd and S3 servers, checked against what llog's SDK sees."""

from __future__ import annotations

from llog.connection import Connection
from llog.groups.offsets import GroupOffsets
from llog.reader import Reader
from tests import java_client
from tests.test_kafka import KafkaBroker, kb_fixture  # noqa: F401 (the fixture kb)

TOPICS = "org.apache.kafka.tools.TopicCommand"
PRODUCER = "org.apache.kafka.tools.ConsoleProducer"
CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
OFFSETS = "org.apache.kafka.tools.GetOffsetShell"
CONFIGS = "kafka.admin.ConfigCommand"
TRANSACTIONS = "org.apache.kafka.tools.TransactionsCommand"


def _table(out: str, first_columns: tuple[str, ...] = ("GROUP", "TOPIC")) -> list[list[str]]:
    """The rows under a tool's header line (the one whose first column is one of
    ``first_columns``)."""
    lines = [line.split() for line in out.splitlines() if line.strip()]
    start = next(i for i, cols in enumerate(lines) if cols[0] in first_columns)
    return lines[start + 1:]


def test_topics_producer_consumer_and_offsets(kb: KafkaBroker, conn: Connection) -> None:
    b = kb.bootstrap
    assert "Created topic tools." in java_client.tool(TOPICS, "--bootstrap-server", b, "--create", "--topic", "tools",
                                                      "--partitions", "3")
    assert conn.topic("tools", refresh=True).partitions == 3
    assert "tools" in java_client.tool(TOPICS, "--bootstrap-server", b, "--list").split()
    described = java_client.tool(TOPICS, "--bootstrap-server", b, "--describe", "--topic", "tools")
    assert "PartitionCount: 3" in described
    assert sum("Partition:" in line for line in described.splitlines()) == 3

    lines = [f"key-{i}:value-{i}" for i in range(60)]
    java_client.tool(PRODUCER, "--bootstrap-server", b, "--topic", "tools", "--property", "parse.key=true",
                     "--property", "key.separator=:", stdin="\n".join(lines) + "\n")
    with Reader(conn) as r:
        stored = {(rec.key, rec.value) for p in range(3) for rec in r.scan("tools", p, 0)}
    assert stored == {(f"key-{i}".encode(), f"value-{i}".encode()) for i in range(60)}

    ends = java_client.tool(OFFSETS, "--bootstrap-server", b, "--topic", "tools").split()
    with Reader(conn) as r:
        assert sorted(ends) == sorted(f"tools:{p}:{r.high_watermark('tools', p)[1]}" for p in range(3))
    assert sum(int(e.rsplit(":", 1)[1]) for e in ends) == 60

    consumed = java_client.tool(CONSUMER, "--bootstrap-server", b, "--topic", "tools", "--from-beginning",
                                "--group", "tools-readers", "--max-messages", "60", "--timeout-ms", "30000",
                                "--property", "print.key=true", "--property", "key.separator=:")
    assert sorted(consumed.split()) == sorted(lines)


def test_consumer_groups_list_describe_reset_and_delete(kb: KafkaBroker, conn: Connection) -> None:
    b = kb.bootstrap
    java_client.tool(TOPICS, "--bootstrap-server", b, "--create", "--topic", "grouped", "--partitions", "2")
    # Keyed, so both partitions hold records (21 and 19): to read all 40 the consumer
    # must then know both partitions' positions, and commits both when it closes. Unkeyed,
    # the sticky partitioner put all 40 in one partition, and whether the consumer had
    # looked up the empty one's position before its 40th record was a race (r25).
    java_client.tool(PRODUCER, "--bootstrap-server", b, "--topic", "grouped",
                     "--property", "parse.key=true", "--property", "key.separator=:",
                     stdin="".join(f"k{i}:v{i}\n" for i in range(40)))
    java_client.tool(CONSUMER, "--bootstrap-server", b, "--topic", "grouped", "--from-beginning", "--group", "g",
                     "--max-messages", "40", "--timeout-ms", "30000")
    with Reader(conn) as r:
        ends = {p: r.high_watermark("grouped", p)[1] for p in range(2)}
    assert ends == {0: 21, 1: 19}

    assert "g" in java_client.tool(GROUPS, "--bootstrap-server", b, "--list").split()
    rows = _table(java_client.tool(GROUPS, "--bootstrap-server", b, "--describe", "--group", "g"))
    # GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG ...: read to the end, no lag
    assert sorted((int(r[2]), int(r[3]), int(r[4]), int(r[5])) for r in rows) == [
        (p, ends[p], ends[p], 0) for p in range(2)]

    java_client.tool(GROUPS, "--bootstrap-server", b, "--group", "g", "--topic", "grouped", "--reset-offsets",
                     "--to-earliest", "--execute")
    offsets = GroupOffsets(conn, "g")
    assert [c.offset if (c := offsets.get("grouped", p)) else None for p in range(2)] == [0, 0]

    deleted = java_client.tool(GROUPS, "--bootstrap-server", b, "--group", "g", "--topic", "grouped:0",
                               "--delete-offsets")
    assert ["grouped", "0", "Successful"] in _table(deleted)
    assert offsets.get("grouped", 0) is None and offsets.get("grouped", 1) is not None

    assert "was successful" in java_client.tool(GROUPS, "--bootstrap-server", b, "--delete", "--group", "g")
    assert offsets.all() == []
    assert "g" not in java_client.tool(GROUPS, "--bootstrap-server", b, "--list").split()
    again = java_client.tool(GROUPS, "--bootstrap-server", b, "--delete", "--group", "g", check=False)
    assert "GroupIdNotFoundException" in again


def test_a_group_with_live_members_is_not_deleted(kb: KafkaBroker, conn: Connection) -> None:
    """DeleteGroups refuses while a member is in the group (Kafka's NON_EMPTY_GROUP),
    and OffsetDelete too (GROUP_SUBSCRIBED_TO_TOPIC); the member's offsets stay."""
    from kafka import KafkaConsumer, TopicPartition

    java_client.tool(TOPICS, "--bootstrap-server", kb.bootstrap, "--create", "--topic", "busy", "--partitions", "1")
    consumer = KafkaConsumer("busy", bootstrap_servers=kb.bootstrap, group_id="busy-group",
                             auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        while not consumer.assignment():
            consumer.poll(timeout_ms=200)
        # Its position is known once the earliest offset is looked up (after the
        # assignment): committing before then commits nothing.
        assert consumer.position(TopicPartition("busy", 0)) == 0
        consumer.commit()
        out = java_client.tool(GROUPS, "--bootstrap-server", kb.bootstrap, "--delete", "--group", "busy-group",
                               check=False)
        assert "GroupNotEmptyException" in out
        out = java_client.tool(GROUPS, "--bootstrap-server", kb.bootstrap, "--group", "busy-group", "--topic",
                               "busy", "--delete-offsets", check=False)
        assert "GroupSubscribedToTopicException" in out
        assert GroupOffsets(conn, "busy-group").get("busy", 0) is not None
    finally:
        consumer.close()


def test_kafka_configs_alters_retention_and_the_cleanup_policy(kb: KafkaBroker, conn: Connection) -> None:
    b = kb.bootstrap
    java_client.tool(TOPICS, "--bootstrap-server", b, "--create", "--topic", "cfg", "--partitions", "1")
    topic = ("--bootstrap-server", b, "--entity-type", "topics", "--entity-name", "cfg")
    java_client.tool(CONFIGS, *topic, "--alter", "--add-config", "retention.ms=3600000,retention.bytes=5000000")
    meta = conn.topic("cfg", refresh=True)
    assert (meta.retention_ms, meta.retention_bytes) == (3_600_000, 5_000_000)
    assert "retention.ms=3600000" in java_client.tool(CONFIGS, *topic, "--describe")
    java_client.tool(CONFIGS, *topic, "--alter", "--delete-config", "retention.ms")
    meta = conn.topic("cfg", refresh=True)
    assert (meta.retention_ms, meta.retention_bytes) == (None, 5_000_000)
    refused = java_client.tool(CONFIGS, *topic, "--alter", "--add-config", "compression.type=lz4", check=False)
    assert "InvalidConfigurationException" in refused and "compression.type is producer" in refused
    # A fixed policy at llog's own value and Kafka's local-log tuning are accepted
    # without effect, beside a change that is made.
    java_client.tool(CONFIGS, *topic, "--alter", "--add-config",
                     "compression.type=producer,segment.bytes=1048576,retention.ms=7200000")
    assert conn.topic("cfg", refresh=True).retention_ms == 7_200_000
    every = java_client.tool(CONFIGS, *topic, "--describe", "--all")
    assert "cleanup.policy=delete" in every and "retention.bytes=5000000" in every
    # A list value goes in brackets on kafka-configs' command line.
    java_client.tool(CONFIGS, *topic, "--alter", "--add-config", "cleanup.policy=[compact,delete]")
    assert conn.topic("cfg", refresh=True).cleanup_policy == "compact,delete"
    assert "cleanup.policy=compact,delete" in java_client.tool(CONFIGS, *topic, "--describe")


def test_kafka_transactions_describes_a_partitions_idempotent_producers(kb: KafkaBroker, conn: Connection) -> None:
    import confluent_kafka

    java_client.tool(TOPICS, "--bootstrap-server", kb.bootstrap, "--create", "--topic", "idem", "--partitions", "2")
    producer = confluent_kafka.Producer({"bootstrap.servers": kb.bootstrap, "enable.idempotence": True})
    for i in range(7):
        producer.produce("idem", value=b"%d" % i, partition=0)
    assert producer.flush(30) == 0
    out = java_client.tool(TRANSACTIONS, "--bootstrap-server", kb.bootstrap, "describe-producers", "--topic", "idem",
                           "--partition", "0")
    rows = _table(out, ("ProducerId",))
    assert len(rows) == 1
    _pid, epoch, coordinator_epoch, last_sequence, _ts, txn_start = rows[0]
    assert (epoch, coordinator_epoch, last_sequence, txn_start) == ("0", "-1", "6", "None")
    empty = java_client.tool(TRANSACTIONS, "--bootstrap-server", kb.bootstrap, "describe-producers", "--topic", "idem",
                             "--partition", "1")
    assert _table(empty, ("ProducerId",)) == []



def test_verifiable_producer_consumer_and_producer_perf_test(kb: KafkaBroker, conn: Connection) -> None:
    """kafka-verifiable-producer/-consumer (the tools Kafka's own system tests check
    delivery with) and kafka-producer-perf-test, acks=all."""
    import json

    b = kb.bootstrap
    java_client.tool(TOPICS, "--bootstrap-server", b, "--create", "--topic", "verified", "--partitions", "2")
    produced = [json.loads(line) for line in java_client.tool(
        "org.apache.kafka.tools.VerifiableProducer", "--bootstrap-server", b, "--topic", "verified",
        "--max-messages", "300", "--acks", "-1").splitlines() if line.startswith("{")]
    acked = [e for e in produced if e["name"] == "producer_send_success"]
    assert sorted(int(e["value"]) for e in acked) == list(range(300))
    assert len({(e["partition"], e["offset"]) for e in acked}) == 300  # no two share an offset
    consumed = [json.loads(line) for line in java_client.tool(
        "org.apache.kafka.tools.VerifiableConsumer", "--bootstrap-server", b, "--topic", "verified",
        "--group-id", "verifiers", "--max-messages", "300").splitlines() if line.startswith("{")]
    assert sum(e["count"] for e in consumed if e["name"] == "records_consumed") == 300
    commits = [e for e in consumed if e["name"] == "offsets_committed"]
    assert commits and all(e["success"] for e in commits)
    perf = java_client.tool("org.apache.kafka.tools.ProducerPerformance", "--topic", "verified", "--num-records",
                            "2000", "--record-size", "100", "--throughput", "-1", "--producer-props",
                            f"bootstrap.servers={b}", "acks=all")
    assert "2000 records sent" in perf
    with Reader(conn) as r:
        assert sum(r.high_watermark("verified", p)[1] for p in range(2)) == 2300
