"""Typed tables (issue 40): a table topic whose values carry a schema id gets the
decoded values as typed, nested columns beside the raw ones (spec §7.6). Records
produced by confluent-kafka's Avro and JSON Schema serializers through a real broker,
compacted and synced by llog, are queried with ``WHERE`` on a field by pyiceberg and
DuckDB; a compatible schema change adds a column with stable field ids; values that do
not decode keep their rows with the reason and never stall the table; Kafka consumers
still get the exact bytes."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from compactor import compact_once
from llog.config import LlogConfig
from llog.connection import Connection
from llog.reader import Reader
from llog.table import TableCatalog, sync_table
from llog.topic.admin import Topics
from tests import forked_llog
from tests.test_kafka import KafkaBroker, kafka_broker

sr = pytest.importorskip("confluent_kafka.schema_registry")
pytest.importorskip("pyiceberg")

CLICK_V1 = {"type": "record", "name": "Click", "namespace": "t", "fields": [
    {"name": "page", "type": "string"}, {"name": "ms", "type": "long"},
    {"name": "user", "type": {"type": "record", "name": "User", "fields": [
        {"name": "id", "type": "int"}, {"name": "tags", "type": {"type": "array", "items": "string"}}]}}]}
CLICK_V2 = {**CLICK_V1, "fields": [*CLICK_V1["fields"], {"name": "ref", "type": ["null", "string"], "default": None}]}


@pytest.fixture(name="tcfg")
def tcfg_fixture(config: LlogConfig, tmp_path: Path) -> LlogConfig:
    return replace(config, compact_min_age_ms=0, settle_after_ms=0,
                   iceberg_catalog_uri=f"sqlite:///{tmp_path / 'catalog.db'}")


@pytest.fixture(name="kb")
def kb_fixture(tcfg: LlogConfig) -> Iterator[KafkaBroker]:
    with kafka_broker(tcfg) as b:
        yield b


def _produce(kb: KafkaBroker, topic: str, values: list[bytes]) -> None:
    from confluent_kafka import Producer

    failed: list[Any] = []
    p = Producer({"bootstrap.servers": kb.bootstrap, "linger.ms": 5})
    for v in values:
        p.produce(topic, value=v, partition=0, on_delivery=lambda err, _msg: err and failed.append(err))
    assert p.flush(30) == 0 and not failed, failed[:3]


def _avro(kb: KafkaBroker, topic: str, schema: dict[str, Any], rows: list[dict[str, Any]]) -> list[bytes]:
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    ser = AvroSerializer(sr.SchemaRegistryClient({"url": kb.http.url}), json.dumps(schema))
    return [ser(r, SerializationContext(topic, MessageField.VALUE)) for r in rows]


def _compact_and_sync(conn: Connection, tables: TableCatalog, topic: str) -> None:
    while compact_once(conn, topic, 0).outcome == "compacted":
        pass
    sync_table(tables, topic)


def _click(i: int) -> dict[str, Any]:
    return {"page": f"/p{i % 10}", "ms": i, "user": {"id": i % 7, "tags": [f"t{i % 3}"]}}


def test_avro_values_become_typed_columns_that_evolve_and_keep_bad_rows(kb: KafkaBroker, tcfg: LlogConfig) -> None:
    topic = f"clicks{uuid.uuid4().hex[:6]}"
    with Connection(tcfg) as conn, TableCatalog(conn) as tables:
        Topics(conn).create(topic, 1, table="iceberg", value_schema="schema-id")
        good = _avro(kb, topic, CLICK_V1, [_click(i) for i in range(300)])
        bad = [b"not avro at all", b"\x00\x00\x00\x00\x63garbage", b"\x00" + (9999).to_bytes(4, "big") + b"x"]
        sent = good[:100] + bad + good[100:]
        _produce(kb, topic, sent)
        _compact_and_sync(conn, tables, topic)
        table = tables.table(topic)
        assert table is not None
        rows = table.scan(row_filter="fields.page == '/p3'", selected_fields=("offset", "fields")).to_arrow()
        assert sorted(r["ms"] for r in rows.column("fields").to_pylist()) == [i for i in range(300) if i % 10 == 3]
        errors = table.scan(row_filter="fields_error is not null").to_arrow()
        assert sorted(errors.column("offset").to_pylist()) == [100, 101, 102]
        assert all(e for e in errors.column("fields_error").to_pylist())
        # A compatible change: one more optional column, the earlier ones keep their ids.
        ids_before = {f.name: f.field_id for f in table.schema().find_field("fields").field_type.fields}
        v2 = _avro(kb, topic, CLICK_V2, [{**_click(i), "ref": f"r{i}"} for i in range(300, 350)])
        _produce(kb, topic, v2)
        _compact_and_sync(conn, tables, topic)
        table = tables.table(topic)
        assert table is not None
        fields = {f.name: f.field_id for f in table.schema().find_field("fields").field_type.fields}
        assert {k: fields[k] for k in ids_before} == ids_before and "ref" in fields
        everything = table.scan().to_arrow()
        assert everything.num_rows == 353
        refs = [r["ref"] for r in everything.column("fields").to_pylist() if r is not None]
        assert refs.count(None) == 300 and sorted(r for r in refs if r) == sorted(f"r{i}" for i in range(300, 350))
        hits = table.scan(row_filter="fields.user.id == 3").to_arrow().num_rows
        assert hits == sum(1 for i in range(350) if i % 7 == 3)
        # The raw bytes are what Kafka consumers and the SDK read, unchanged.
        with Reader(conn) as r:
            assert [x.value for x in r.scan(topic, 0)] == sent + v2


def test_json_schema_values_become_typed_columns(kb: KafkaBroker, tcfg: LlogConfig) -> None:
    from confluent_kafka.schema_registry.json_schema import JSONSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    schema = {"type": "object", "properties": {"id": {"type": "integer"}, "item": {"type": "string"},
                                               "price": {"type": "number"}, "extra": {}}}
    topic = f"orders{uuid.uuid4().hex[:6]}"
    with Connection(tcfg) as conn, TableCatalog(conn) as tables:
        Topics(conn).create(topic, 1, table="iceberg", value_schema="schema-id")
        ser = JSONSerializer(json.dumps(schema), sr.SchemaRegistryClient({"url": kb.http.url}))
        ctx = SerializationContext(topic, MessageField.VALUE)
        _produce(kb, topic, [ser({"id": i, "item": f"i{i}", "price": i / 2, "extra": {"n": i}}, ctx)
                             for i in range(100)])
        _compact_and_sync(conn, tables, topic)
        table = tables.table(topic)
        assert table is not None
        got = table.scan(row_filter="fields.price >= 40.0").to_arrow().column("fields").to_pylist()
        assert sorted(r["id"] for r in got) == list(range(80, 100))
        assert got[0]["extra"] == json.dumps({"n": got[0]["id"]}, separators=(",", ":"))


def test_latest_mode_on_a_file_store_duckdb_and_spark(file_config: LlogConfig, spark: Any) -> None:
    """Values without a prefix, decoded by the subject's latest schema; DuckDB reads the
    table's current files, Spark the table (``read_table``), each with a WHERE on a
    nested field; after a schema change Spark reads old and new files under the table's
    schema."""
    import io

    import duckdb
    import fastavro

    from llog.registry import SchemaRegistry
    from llog.writer import Writer

    cfg = replace(file_config, compact_min_age_ms=0, settle_after_ms=0)
    with Connection(cfg) as conn, TableCatalog(conn) as tables:
        Topics(conn).create("bare", 1, table="iceberg", value_schema="latest")
        SchemaRegistry(conn).register("bare-value", json.dumps(CLICK_V1))
        parsed = fastavro.parse_schema(CLICK_V1)

        def encode(row: dict[str, Any]) -> bytes:
            buf = io.BytesIO()
            fastavro.schemaless_writer(buf, parsed, row)
            return buf.getvalue()

        with Writer(conn) as w:
            w.append("bare", 0, [encode(_click(i)) for i in range(200)])
        _compact_and_sync(conn, tables, "bare")
        table = tables.table("bare")
        assert table is not None
        files = [t.file.file_path.removeprefix("file://") for t in table.scan().plan_files()]
        n = duckdb.sql(f"SELECT count(*) FROM read_parquet({files!r}) WHERE fields.user.id = 3 "
                       "AND fields.page = '/p3'").fetchall()
        assert n == [(sum(1 for i in range(200) if i % 7 == 3 and i % 10 == 3),)]
        SchemaRegistry(conn).register("bare-value", json.dumps(CLICK_V2))
        parsed = fastavro.parse_schema(CLICK_V2)
        with Writer(conn) as w:
            w.append("bare", 0, [encode({**_click(i), "ref": "x"}) for i in range(200, 250)])
        _compact_and_sync(conn, tables, "bare")
    from llog.spark import read_table

    opts = {"etcdEndpoints": ",".join(cfg.etcd_endpoints), "objectStore": cfg.object_store,
            "rootPrefix": cfg.root_prefix, "icebergCatalogUri": cfg.iceberg_catalog_uri or ""}
    df = read_table(spark, "bare", opts)
    assert df.where("fields.page = '/p3'").count() == 25
    assert df.where("fields.ref = 'x'").count() == 50 and df.where("fields.ref is null").count() == 200
    assert "fields_error" in df.columns and df.count() == 250



def test_a_type_change_iceberg_cannot_promote_stops_the_sync_and_says_why(file_config: LlogConfig) -> None:
    """Issue 56: JSON Schema's integer to number is a compatible change, but Iceberg does
    not promote long to double: the sync refuses the new files with a TableError that
    says why (pyiceberg's ValidationError, not a ValueError, once slipped past as a bare
    "sync failed") and the table keeps its rows."""
    from llog.errors import TableError
    from llog.registry import SchemaRegistry
    from llog.writer import Writer

    cfg = replace(file_config, compact_min_age_ms=0, settle_after_ms=0)
    with Connection(cfg) as conn, TableCatalog(conn) as tables:
        Topics(conn).create("widened", 1, table="iceberg", value_schema="latest")
        reg = SchemaRegistry(conn)
        for kind, value in (("integer", b'{"n": 7}'), ("number", b'{"n": 2.5}')):
            reg.register("widened-value", json.dumps({"type": "object", "properties": {"n": {"type": kind}}}),
                         "JSON")
            with Writer(conn) as w:
                w.append("widened", 0, [value])
            while compact_once(conn, "widened", 0).outcome == "compacted":
                pass
            if kind == "integer":
                sync_table(tables, "widened")
        with pytest.raises(TableError, match=r"cannot widen the table's schema .*long -> double.*retention"):
            sync_table(tables, "widened")
        table = tables.table("widened")
        assert table is not None
        assert table.scan().to_arrow().column("fields").to_pylist() == [{"n": 7}]

def test_references_recursion_and_logical_types_decode_into_columns(conn: Connection) -> None:
    """Named types from a reference, a recursive type (its JSON text), dotted names,
    uuid, time, decimal and a map: every row decodes; a bad row keeps its reason."""
    import io
    import uuid as uuidlib
    from datetime import time
    from decimal import Decimal

    import fastavro

    from llog.registry import Reference, SchemaRegistry
    from llog.registry.columns import ValueColumns

    reg = SchemaRegistry(conn)
    topic = f"refs{uuidlib.uuid4().hex[:6]}"
    address = {"type": "record", "name": "com.x.Address", "fields": [{"name": "city", "type": "string"}]}
    reg.register(f"{topic}-addr", json.dumps(address))
    node = {"type": "record", "name": "com.x.Node", "fields": [
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "at", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
        {"name": "home", "type": "com.x.Address"},
        {"name": "tags", "type": {"type": "map", "values": "int"}},
        {"name": "next", "type": ["null", "com.x.Node"], "default": None}]}
    rs = reg.register(f"{topic}-value", json.dumps(node), references=[Reference("com.x.Address", f"{topic}-addr", 1)])
    named: dict[str, Any] = {}
    fastavro.parse_schema(address, named_schemas=named)
    parsed = fastavro.parse_schema(node, named_schemas=named)

    def value(i: int) -> bytes:
        buf = io.BytesIO()
        row = {"id": str(uuidlib.UUID(int=i)), "at": time(0, 0, i), "price": Decimal(f"{i}.25"),
               "home": {"city": f"c{i}"}, "tags": {"k": i},
               "next": {"id": str(uuidlib.UUID(int=0)), "at": time(0), "price": Decimal("0.00"),
                        "home": {"city": "x"}, "tags": {}, "next": None} if i % 2 else None}
        fastavro.schemaless_writer(buf, parsed, row)
        return b"\x00" + rs.schema_id.to_bytes(4, "big") + buf.getvalue()

    typed, errors = ValueColumns(reg, topic, "schema-id").decode([value(i) for i in range(4)] + [b"\x00junk"])
    rows = typed.to_pylist()
    assert errors.to_pylist()[:4] == [None] * 4 and errors.to_pylist()[4]
    assert [r["home"]["city"] for r in rows[:4]] == ["c0", "c1", "c2", "c3"]
    assert rows[1]["price"] == Decimal("1.25") and rows[3]["tags"] == [("k", 3)]
    assert rows[0]["next"] is None and json.loads(rows[1]["next"])["home"] == {"city": "x"}
    assert rows[4] is None


def test_protobuf_values_become_typed_columns(kb: KafkaBroker, tcfg: LlogConfig, tmp_path: Path) -> None:
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext
    from google.protobuf.timestamp_pb2 import Timestamp

    from tests.test_schema_registry import _proto_class

    reading = _proto_class(tmp_path)
    topic = f"readings{uuid.uuid4().hex[:6]}"
    with Connection(tcfg) as conn, TableCatalog(conn) as tables:
        Topics(conn).create(topic, 1, table="iceberg", value_schema="schema-id")
        ser = ProtobufSerializer(reading, sr.SchemaRegistryClient({"url": kb.http.url}),
                                 {"use.deprecated.format": False})
        ctx = SerializationContext(topic, MessageField.VALUE)
        values = [ser(reading(sensor=f"s{i % 4}", value=i / 2, at=Timestamp(seconds=1_700_000_000 + i)), ctx)
                  for i in range(100)]
        _produce(kb, topic, values)
        _compact_and_sync(conn, tables, topic)
        table = tables.table(topic)
        assert table is not None
        got = table.scan(row_filter="fields.sensor == 's1'").to_arrow().column("fields").to_pylist()
        assert sorted(r["value"] for r in got) == [i / 2 for i in range(100) if i % 4 == 1]
        assert got[0]["at"].year == 2023


WKT_PROTO = """syntax = "proto3";
package wkt;
import "google/protobuf/any.proto";
import "google/protobuf/duration.proto";
import "google/protobuf/empty.proto";
import "google/protobuf/field_mask.proto";
import "google/protobuf/struct.proto";
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";
message Event {
  string id = 1;
  google.protobuf.Timestamp at = 2;
  google.protobuf.Duration took = 3;
  google.protobuf.Int64Value count = 4;
  google.protobuf.StringValue note = 5;
  google.protobuf.BoolValue flag = 6;
  google.protobuf.DoubleValue score = 7;
  google.protobuf.BytesValue blob = 8;
  google.protobuf.Struct attrs = 9;
  google.protobuf.Empty nothing = 10;
  google.protobuf.Any extra = 11;
  google.protobuf.FieldMask mask = 12;
}
"""


def _generated(tmp_path: Path, proto: str, module: str) -> Any:
    """``module`` (``x_pb2``) generated by protoc from ``proto`` text in ``tmp_path``."""
    import importlib
    import subprocess
    import sys

    name = module.removesuffix("_pb2") + ".proto"
    (tmp_path / name).write_text(proto)
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{tmp_path}", f"--python_out={tmp_path}", name],
                   check=True, capture_output=True)
    sys.path.insert(0, str(tmp_path))
    try:
        return importlib.import_module(module)
    finally:
        sys.path.remove(str(tmp_path))



def _pool_class(tmp_path: Path, proto: str, message: str) -> Any:
    """Message ``message`` of ``proto`` text, in a descriptor pool of its own: two
    versions of one message (one file name, one full name) live in one process, where
    protoc's generated modules would clash in the default pool."""
    import subprocess
    import sys

    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    d = tmp_path / f"pool{uuid.uuid4().hex[:6]}"
    d.mkdir()
    (d / "schema.proto").write_text(proto)
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{d}", f"--descriptor_set_out={d / 'set.pb'}",
                    "schema.proto"], check=True, capture_output=True)
    pool = descriptor_pool.DescriptorPool()
    for f in descriptor_pb2.FileDescriptorSet.FromString((d / "set.pb").read_bytes()).file:
        pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(message))


def test_protobuf_fields_with_presence_are_null_while_unset(tmp_path: Path) -> None:
    """Issue 56: a oneof's members other than the one set, and a proto3 ``optional``
    left unset, read null, not their type's default (0 or ""): a column tells a value
    from none. A plain proto3 scalar has no presence: unset, it reads its default."""
    from llog.registry import protobuf_messages

    m = _pool_class(tmp_path, """syntax = "proto3";
package p;
message M { oneof c { string s = 1; int64 i = 2; } optional string o = 3; string plain = 4; M next = 5; }
""", "p.M")
    assert protobuf_messages.shape(m(s="x")) == {"s": "x", "i": None, "o": None, "plain": "", "next": None}
    assert protobuf_messages.shape(m(i=0, o="")) == {"s": None, "i": 0, "o": "", "plain": "", "next": None}


def test_json_refs_resolve_to_columns_and_the_broker_s_check_follows_them(conn: Connection) -> None:
    """Issue 56: a JSON Schema's ``$ref``s, local (``#/definitions/X``, ``#/$defs/X``)
    and to another subject's schema (the reference's name, with or without a ``#/…``
    fragment), become typed columns, and values check against them (the broker's
    ``value_validation``) as confluent-kafka's serializer checks them; a recursive
    ``$ref`` is the value's JSON text."""
    from llog.registry import Reference, SchemaRegistry
    from llog.registry.columns import ValueColumns
    from llog.registry.validation import ValueValidator

    reg = SchemaRegistry(conn)
    topic = f"jrefs{uuid.uuid4().hex[:6]}"
    point = {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
             "$defs": {"Label": {"type": "object", "properties": {"text": {"type": "string"}}}}}
    reg.register(f"{topic}-point", json.dumps(point), "JSON")
    row = {"type": "object", "definitions": {"Old": {"type": "integer"}},
           "$defs": {"Node": {"type": "object", "properties": {"v": {"type": "integer"}, "next": {
               "$ref": "#/$defs/Node"}}}},
           "properties": {"old": {"$ref": "#/definitions/Old"}, "node": {"$ref": "#/$defs/Node"},
                          "at": {"$ref": "point.json"}, "label": {"$ref": "point.json#/$defs/Label"},
                          "self": {"$ref": "#"}}}
    rs = reg.register(f"{topic}-value", json.dumps(row), "JSON", [Reference("point.json", f"{topic}-point", 1)])
    columns = ValueColumns(reg, topic, "schema-id")
    assert {f.name: str(f.type) for f in columns.arrow_type} == {
        "old": "int64", "node": "struct<v: int64, next: string>", "at": "struct<x: int64, y: int64>",
        "label": "struct<text: string>", "self": "string"}
    value = {"old": 1, "node": {"v": 2, "next": {"v": 3}}, "at": {"x": 4, "y": 5}, "label": {"text": "t"},
             "self": {"old": 6}}
    prefix = b"\x00" + rs.schema_id.to_bytes(4, "big")
    typed, errors = columns.decode([prefix + json.dumps(value).encode()])
    assert errors.to_pylist() == [None]
    assert typed.to_pylist() == [{"old": 1, "node": {"v": 2, "next": '{"v":3}'}, "at": {"x": 4, "y": 5},
                                  "label": {"text": "t"}, "self": '{"old":6}'}]
    bad = [{"at": {"x": "4"}}, {"label": {"text": 1}}, {"node": {"next": {"v": "no"}}}, {"old": "no"}]
    assert [i for i, _ in ValueValidator(reg).problems(topic, "schema-id", [
        prefix + json.dumps(v).encode() for v in [value, *bad]])] == [1, 2, 3, 4]

def test_protobuf_well_known_types_are_typed_by_servers_that_never_imported_them(
    file_config: LlogConfig, tmp_path: Path
) -> None:
    """Issue 56: the broker (checking values, ``value_validation=refuse``) and the
    compactor (typing columns) run in processes of their own, so nothing imported here
    can stand in for a well-known file they miss."""
    from datetime import datetime, timezone

    import duckdb
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext
    from google.protobuf import any_pb2, duration_pb2, field_mask_pb2, struct_pb2, timestamp_pb2, wrappers_pb2

    from tests.conftest import config_env

    tcfg = replace(file_config, compact_min_age_ms=0, settle_after_ms=0,
                   iceberg_catalog_uri=f"sqlite:///{tmp_path / 'catalog.db'}")
    event = _generated(tmp_path, WKT_PROTO, "wkt_event_pb2").Event
    topic = f"events{uuid.uuid4().hex[:6]}"

    def make(i: int) -> Any:
        e = event(id=f"e{i}", at=timestamp_pb2.Timestamp(seconds=1_700_000_000 + i, nanos=5_000),
                  took=duration_pb2.Duration(seconds=i, nanos=250_000_000),
                  mask=field_mask_pb2.FieldMask(paths=["a.b", "c"]))
        if i % 2 == 0:  # wrappers set on even rows only: null on odd ones
            e.count.CopyFrom(wrappers_pb2.Int64Value(value=i * 1000))
            e.note.CopyFrom(wrappers_pb2.StringValue(value=f"n{i}"))
            e.flag.CopyFrom(wrappers_pb2.BoolValue(value=i % 4 == 0))
            e.score.CopyFrom(wrappers_pb2.DoubleValue(value=i / 8))
            e.blob.CopyFrom(wrappers_pb2.BytesValue(value=b"\x00\x01"))
        e.attrs.CopyFrom(struct_pb2.Struct(fields={"k": struct_pb2.Value(string_value=f"v{i}")}))
        e.nothing.SetInParent()
        e.extra.CopyFrom(any_pb2.Any(type_url="type.googleapis.com/x.Y", value=b"\x08\x01"))
        return e

    with kafka_broker(tcfg) as kb, Connection(tcfg) as conn, TableCatalog(conn) as tables:
        Topics(conn).create(topic, 1, table="iceberg", value_schema="schema-id", value_validation="refuse")
        ser = ProtobufSerializer(event, sr.SchemaRegistryClient({"url": kb.http.url}),
                                 {"use.deprecated.format": False})
        ctx = SerializationContext(topic, MessageField.VALUE)
        _produce(kb, topic, [ser(make(i), ctx) for i in range(40)])  # refuse: a refusal fails the produce
        done = forked_llog.run(["compact", topic, "--min-age-ms", "0"],
                               {**config_env(tcfg), "LLOG_SETTLE_AFTER_MS": "0"})
        assert done.returncode == 0 and "no typed columns" not in done.stderr, done.stderr
        sync_table(tables, topic)
        table = tables.table(topic)
        assert table is not None
        arrow = table.scan().to_arrow()
        assert arrow.column("fields_error").null_count == 40
        rows = sorted(arrow.column("fields").to_pylist(), key=lambda r: int(r["id"][1:]))
        types = {f.name: str(f.type) for f in arrow.schema.field("fields").type}
        files = [t.file.file_path for t in table.scan().plan_files()]
    assert types == {
        "id": "string", "at": "timestamp[us, tz=UTC]", "took": "struct<seconds: int64, nanos: int64>",
        "count": "int64", "note": "string", "flag": "bool", "score": "double", "blob": "binary",  # wrappers: scalars
        "attrs": "string", "nothing": "string",  # Struct as its JSON text, Empty as "{}"
        "extra": "struct<type_url: string, value: binary>", "mask": "struct<paths: list<element: string>>",
    }
    assert [r["id"] for r in rows] == [f"e{i}" for i in range(40)]
    for i, r in enumerate(rows):
        assert r["at"] == datetime.fromtimestamp(1_700_000_000 + i, timezone.utc).replace(microsecond=5)
        assert r["took"] == {"seconds": i, "nanos": 250_000_000}
        assert r["count"] == (i * 1000 if i % 2 == 0 else None)
        assert r["note"] == (f"n{i}" if i % 2 == 0 else None)
        assert r["flag"] == (i % 4 == 0 if i % 2 == 0 else None)
        assert r["blob"] == (b"\x00\x01" if i % 2 == 0 else None)
        assert json.loads(r["attrs"]) == {"k": f"v{i}"}
        assert r["nothing"] == "{}"
        assert r["extra"] == {"type_url": "type.googleapis.com/x.Y", "value": b"\x08\x01"}
        assert r["mask"] == {"paths": ["a.b", "c"]}
    paths = [f.removeprefix("file://") for f in files]
    got = duckdb.sql(f"SELECT fields.id, fields.count, fields.took.seconds FROM read_parquet({paths!r}) "
                     "WHERE fields.count IS NOT NULL ORDER BY fields.took.seconds").fetchall()
    assert got == [(f"e{i}", i * 1000, i) for i in range(0, 40, 2)]
