"""Produced values checked against their topic's schema (``value_validation``, spec
§14.1) on a real broker, through confluent-kafka's idempotent producer and the HTTP
API: ``refuse`` refuses a batch with a bad value whole (Kafka's INVALID_RECORD) and
stores nothing of it; ``dlq`` moves 1 % malformed values to ``{topic}~dlq`` with the
reason, keeps every offset (the value null, a header naming the dead-letter topic), and
the topic's table keeps up."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from llog.config import LlogConfig
from llog.connection import Connection
from llog.reader import Reader
from llog.table import TableCatalog
from llog.topic.admin import Topics
from tests.test_kafka import KafkaBroker
from tests.test_typed_tables import _compact_and_sync, kb_fixture, tcfg_fixture  # noqa: F401 (fixtures kb, tcfg)

sr = pytest.importorskip("confluent_kafka.schema_registry")

CLICK = {"type": "record", "name": "Click", "fields": [{"name": "page", "type": "string"},
                                                      {"name": "ms", "type": "long"}]}


def _encoded(kb: KafkaBroker, topic: str, n: int) -> list[bytes]:
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    ser = AvroSerializer(sr.SchemaRegistryClient({"url": kb.http.url}), json.dumps(CLICK))
    ctx = SerializationContext(topic, MessageField.VALUE)
    return [ser({"page": f"/p{i % 5}", "ms": i}, ctx) for i in range(n)]


def _produce(kb: KafkaBroker, topic: str, values: list[bytes], **conf: Any) -> list[Any]:
    """Send ``values`` to partition 0 one batch per call of flush; the delivery errors."""
    from confluent_kafka import Producer

    errors: list[Any] = []
    p = Producer({"bootstrap.servers": kb.bootstrap, "linger.ms": 5, **conf})
    for v in values:
        p.produce(topic, value=v, partition=0, on_delivery=lambda err, _m: err and errors.append(err))
    assert p.flush(30) == 0
    return errors


def test_refuse_refuses_a_batch_with_a_bad_value_and_stores_nothing_of_it(kb: KafkaBroker, tcfg: LlogConfig) -> None:
    topic = f"strict{uuid.uuid4().hex[:6]}"
    with Connection(tcfg) as conn:
        Topics(conn).create(topic, 1, value_schema="schema-id", value_validation="refuse")
        good = _encoded(kb, topic, 10)
        assert _produce(kb, topic, good) == []
        errors = _produce(kb, topic, [b"plain text, no schema id"], retries=0)
        assert [e.code() for e in errors] and all(e.name() == "INVALID_RECORD" for e in errors)
        status, body = kb.http.request("POST", "/produce", {"topic_partitions": [
            {"topic": topic, "partition": 0, "records": [{"value": "aGk="}]}]})
        assert status == 409 and body["results"][0]["error_type"] == "SchemaViolation", body  # a refusal
        assert "subject" in body["results"][0]["error"]
        with Reader(conn) as r:
            assert [x.value for x in r.scan(topic, 0)] == good
        assert kb.http.metric("llog_schema_refusals_total", validation="refuse") >= 2


def test_dlq_moves_one_percent_malformed_values_and_the_table_keeps_up(kb: KafkaBroker, tcfg: LlogConfig) -> None:
    topic = f"events{uuid.uuid4().hex[:6]}"
    with Connection(tcfg) as conn, TableCatalog(conn) as tables:
        Topics(conn).create(topic, 1, table="iceberg", value_schema="schema-id", value_validation="dlq")
        good = _encoded(kb, topic, 1980)
        bad = [f"malformed {i}".encode() for i in range(20)]
        sent = [*good]
        for i, b in enumerate(bad):
            sent.insert(i * 100 + 50, b)
        assert _produce(kb, topic, sent, **{"enable.idempotence": True}) == []
        with Reader(conn) as r:
            main = list(r.scan(topic, 0))
            letters = list(r.scan(f"{topic}~dlq", 0))
        assert [x.offset for x in main] == list(range(2000))  # every offset kept
        moved = [x for x in main if x.value is None]
        assert [x.offset for x in moved] == [i * 100 + 50 for i in range(20)]
        assert all(dict(x.headers)["llog.dlq"] == f"{topic}~dlq".encode() for x in moved)
        assert [x.value for x in main if x.value is not None] == good
        assert sorted(x.value for x in letters) == sorted(bad)  # at least once; here once
        for x in letters:
            h = dict(x.headers)
            assert h["llog.dlq.topic"] == topic.encode() and h["llog.dlq.partition"] == b"0"
            assert b"schema id" in h["llog.dlq.reason"]
        _compact_and_sync(conn, tables, topic)
        table = tables.table(topic)
        assert table is not None
        rows = table.scan().to_arrow()
        assert rows.num_rows == 2000
        assert table.scan(row_filter="fields.page == '/p2'").to_arrow().num_rows == 396
        assert table.scan(row_filter="fields_error is not null").to_arrow().num_rows == 0
        assert kb.http.metric("llog_schema_refusals_total", validation="dlq") == 20
        # The dead letters of a table topic form a table too: the values and their reasons.
        dlq = f"{topic}~dlq"
        assert conn.topic(dlq, refresh=True).table == "iceberg"
        _compact_and_sync(conn, tables, dlq)
        dead = tables.table(dlq)
        assert dead is not None
        letters_rows = dead.scan().to_arrow()
        assert sorted(letters_rows.column("value").to_pylist()) == sorted(bad)
        reasons = [dict((h["key"], h["value"]) for h in hs)["llog.dlq.reason"]
                   for hs in letters_rows.column("headers").to_pylist()]
        assert all(b"schema id" in r for r in reasons)
