"""Kafka's DeleteRecords through the SDK, the CLI, confluent-kafka's admin client and
``kafka-delete-records.sh``, on the suite's real etcd and S3 servers: the log start
moves at once (reads below it are out of range), also to an offset inside a stored
append, which compaction then compacts from; the compactor's next pass deletes the
index keys wholly below it; bad offsets change nothing."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

import llog
from compactor import compact_once
from compactor.retention import apply_retention
from llog.errors import InvalidInput, OffsetOutOfRange
from llog.state.control import read_control
from tests import forked_llog, java_client
from tests.conftest import config_env
from tests.test_kafka import KafkaBroker, kb_fixture  # noqa: F401 (the fixture kb)

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient  # noqa: E402


def _ends(conn: llog.Connection, topic: str) -> list[int]:
    k = conn.keys
    return [k.end_offset_of(x) for x in conn.etcd.keys(k.index_prefix(topic, 0), k.index_range_end(topic, 0))]


def test_the_log_start_moves_inside_an_append_and_compaction_goes_on(config: llog.LlogConfig) -> None:
    with llog.Connection(replace(config, compact_min_age_ms=0, settle_after_ms=0)) as conn:
        topics = llog.Topics(conn)
        topics.create("dr", 1)
        with llog.Writer(conn) as w:
            for i in range(10):
                w.append("dr", 0, [b"%d.%d" % (i, j) for j in range(3)])
        assert topics.delete_records("dr", 0, 7) == 7  # inside the append [6, 8]
        assert topics.delete_records("dr", 0, 4) == 7  # below the log start: nothing changes
        with pytest.raises(InvalidInput, match="next offset is 30"):
            topics.delete_records("dr", 0, 31)
        with llog.Reader(conn) as r:
            with pytest.raises(OffsetOutOfRange):
                r.read("dr", 0, 6)
            assert [c.value for c in r.scan("dr", 0, 7, 9)] == [b"2.1", b"2.2"]
            assert r.high_watermark("dr", 0) == (7, 30)
        # Compaction starts at the log start, inside the append it holds.
        res = compact_once(conn, "dr", 0)
        assert res.record is not None and res.record.start_offset == 7
        while compact_once(conn, "dr", 0).outcome == "compacted":
            pass
        # The next retention pass deletes the keys wholly below the log start.
        assert _ends(conn, "dr")[:2] == [2, 5]
        assert apply_retention(conn, "dr", 0).index_keys == 2
        assert all(end >= 7 for end in _ends(conn, "dr"))
        with llog.Reader(conn) as r:
            assert [c.offset for c in r.scan("dr", 0, 7)] == list(range(7, 30))
        assert topics.delete_records("dr", 0) == 30  # everything
        assert read_control(conn, "dr", 0).control.log_start_offset == 30


def test_kafka_clients_and_the_cli_delete_records(kb: KafkaBroker, conn: llog.Connection, tmp_path: Path) -> None:
    llog.Topics(conn).create("kdr", 2)
    with llog.Writer(conn) as w:
        for p in range(2):
            w.append("kdr", p, [b"r%d" % i for i in range(20)])
    admin = AdminClient({"bootstrap.servers": kb.bootstrap})
    futures = admin.delete_records([confluent_kafka.TopicPartition("kdr", 0, 5),
                                    confluent_kafka.TopicPartition("kdr", 1, 99)])
    assert futures[confluent_kafka.TopicPartition("kdr", 0, 5)].result(timeout=30).low_watermark == 5
    with pytest.raises(confluent_kafka.KafkaException, match="OFFSET_OUT_OF_RANGE"):
        futures[confluent_kafka.TopicPartition("kdr", 1, 99)].result(timeout=30)
    assert read_control(conn, "kdr", 1).control.log_start_offset == 0  # refused: unchanged
    offsets = tmp_path / "offsets.json"
    offsets.write_text(json.dumps({"version": 1, "partitions": [{"topic": "kdr", "partition": 1, "offset": 12}]}))
    out = java_client.tool("org.apache.kafka.tools.DeleteRecordsCommand", "--bootstrap-server", kb.bootstrap,
                           "--offset-json-file", str(offsets))
    assert "low_watermark: 12" in out
    cli = forked_llog.run(["topics", "delete-records", "kdr", "0", "--before", "9"], config_env(conn.config))
    assert cli.returncode == 0 and "log start offset 9" in cli.stdout, cli.stderr
    with llog.Reader(conn) as r:
        assert [r.high_watermark("kdr", p) for p in range(2)] == [(9, 20), (12, 20)]


def test_key_compaction_starts_at_a_log_start_moved_inside_an_entry(config: llog.LlogConfig) -> None:
    from compactor import Compactor

    cfg = replace(config, compact_min_age_ms=0, settle_after_ms=0, compact_min_dirty_ratio=0.0)
    with llog.Connection(cfg) as conn:
        topics = llog.Topics(conn)
        topics.create("drk", 1, cleanup_policy="compact")
        with llog.Writer(conn) as w:
            for i in range(4):
                w.append("drk", 0, [llog.Record(b"%d.%d" % (i, k), key=b"k%d" % k) for k in range(5)])
        while compact_once(conn, "drk", 0).outcome == "compacted":
            pass
        topics.delete_records("drk", 0, 3)  # inside the compacted entry
        with Compactor(conn) as c:
            assert c.clean_once("drk", 0).outcome == "cleaned"
        with llog.Reader(conn) as r:
            got = {c.key: (c.offset, c.value) for c in r.scan("drk", 0, 3)}
        assert got == {b"k%d" % k: (15 + k, b"3.%d" % k) for k in range(5)}
