"""The schema-feature matrix of docs/schema-registry.md (issue 56): for each feature of
Avro, JSON Schema and Protobuf, is its schema registered and checked by llog's registry,
do records round-trip through Confluent's serializers and a broker, what column does it
become in the topic's Iceberg table, and do pyiceberg, DuckDB and Spark (``read_table``)
read back the value that was sent.

One wide schema per format carries every feature as a field. Its records go through a
broker and ``llog compact`` in processes of their own (never this one, which built the
schemas: an import here cannot hide one missing in a server), into a table read once
per engine; each cell of the matrix is then one test case over what was read
(tests/schema_matrix.py names them, ``make matrix`` renders the table).
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from llog.config import LlogConfig
from llog.connection import Connection
from llog.table import TableCatalog, sync_table
from llog.topic.admin import Topics
from tests.conftest import Servers, config_env
from tests.test_kafka import KafkaBroker, kafka_broker
from tests.test_typed_tables import _generated

sr = pytest.importorskip("confluent_kafka.schema_registry")
pytest.importorskip("pyiceberg")

ROWS = 3
UTC = dt.timezone.utc
T = dt.datetime(2026, 11, 28, 12, 30, 15, 123000, tzinfo=UTC)


@dataclass(frozen=True)
class Feature:
    """One row: a field of the format's wide schema, the value every record carries in
    it, the column the table gets and the value engines read back."""

    fmt: str
    name: str
    #: Avro: the field's type; JSON Schema: the property's schema; Protobuf: the field's
    #: declaration (``{n}`` for its number).
    schema: Any
    #: What the record carries (Protobuf: a function that sets it on the message).
    value: Any
    #: The field's Arrow type in the table, as pyarrow prints it.
    column: str
    #: The value read back, as pyiceberg gives it.
    read: Any
    #: Where llog cannot type a feature: what it does instead (docs' fallback note).
    fallback: str = ""
    #: The value the serializer's round trip gives back, where it differs from ``value``.
    echoed: Any = field(default=None)
    #: Spark's ``read_table`` leaves the column out (the fallback).
    spark_absent: bool = False
    #: An evolution's row: the topic of its format's schema changes, and the value
    #: each record reads back (before the change, then after), in place of ``read``.
    evolution: tuple[Any, ...] = ()

    @property
    def id(self) -> str:
        return f"{self.fmt}:{self.name}"

    @property
    def topic(self) -> str:
        return f"{self.fmt}-evolution" if self.evolution else self.fmt

    def expected(self) -> list[Any]:
        return list(self.evolution) if self.evolution else [self.read] * ROWS

    @property
    def column_name(self) -> str:
        if self.evolution:
            return _EVOLUTION_FIELDS[self.name]
        return "f_" + "".join(c if c.isalnum() else "_" for c in self.name)


def _avro(name: str, schema: Any, value: Any, column: str, read: Any = None, **kw: Any) -> Feature:
    return Feature("avro", name, schema, value, column, value if read is None else read, **kw)


AVRO = [
    _avro("boolean", "boolean", True, "bool"),
    _avro("int", "int", -7, "int64"),
    _avro("long", "long", 2**40, "int64"),
    _avro("float", "float", 1.5, "double"),
    _avro("double", "double", 2.25, "double"),
    _avro("bytes", "bytes", b"\x00\xff", "binary"),
    _avro("string", "string", "héllo", "string"),
    _avro("record in a record", {"type": "record", "name": "Outer", "fields": [
        {"name": "inner", "type": {"type": "record", "name": "Inner", "fields": [{"name": "x", "type": "int"}]}}]},
        {"inner": {"x": 3}}, "struct<inner: struct<x: int64>>"),
    _avro("array", {"type": "array", "items": "string"}, ["a", "b"], "list<element: string>"),
    _avro("map", {"type": "map", "values": "long"}, {"k": 1}, "map<string, int64>", [("k", 1)]),
    _avro("enum", {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}, "GREEN", "string"),
    _avro("fixed", {"type": "fixed", "name": "F4", "size": 4}, b"abcd", "binary"),
    _avro("union with null", ["null", "string"], "x", "string"),
    _avro("union without null", ["int", "string"], "x", "string", '"x"',
          fallback="a union of several types: its value's JSON text"),
    _avro("decimal", {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}, Decimal("12.34"),
          "decimal128(9, 2)"),
    _avro("uuid", {"type": "string", "logicalType": "uuid"}, "0d9f7d2c-1c0e-4c53-9a6b-8a8b0f0e5e0a", "string",
          fallback="the UUID's text (Iceberg's uuid type is not used)"),
    _avro("date", {"type": "int", "logicalType": "date"}, dt.date(2026, 11, 28), "date32[day]"),
    _avro("time-millis", {"type": "int", "logicalType": "time-millis"}, dt.time(12, 30, 15, 123000), "time64[us]",
          spark_absent=True, fallback="Spark has no time-of-day type: `read_table` leaves the column out"),
    _avro("time-micros", {"type": "long", "logicalType": "time-micros"}, dt.time(12, 30, 15, 123456), "time64[us]",
          spark_absent=True, fallback="Spark has no time-of-day type: `read_table` leaves the column out"),
    _avro("timestamp-millis", {"type": "long", "logicalType": "timestamp-millis"}, T, "timestamp[us, tz=UTC]"),
    _avro("timestamp-micros", {"type": "long", "logicalType": "timestamp-micros"}, T, "timestamp[us, tz=UTC]"),
    _avro("local-timestamp-micros", {"type": "long", "logicalType": "local-timestamp-micros"},
          T.replace(tzinfo=None), "timestamp[us]"),
]


#: Avro's schema changes, one topic: v1 records, compacted and synced, then v2 records.
#: Each field here is (v1 field or None, v2 field or None, v1 value, v2 value).
AVRO_CHANGES: dict[str, tuple[Any, Any, Any, Any]] = {
    "f_added": (None, {"type": ["null", "string"], "default": None}, None, "a"),
    "f_gone": ({"type": ["null", "string"], "default": None}, None, "g", None),
    "f_narrow": ({"type": "int"}, {"type": "long"}, 7, 2**40),
    "f_old": ({"type": "string"}, None, "o", None),
    "f_new": (None, {"type": "string", "aliases": ["f_old"]}, None, "n"),
}
_EVOLVED = "Iceberg keeps every column it had: the table's schema only widens"
AVRO_EVOLUTION = [
    _avro("evolution: add an optional field", None, None, "string", evolution=(None,) * ROWS + ("a",) * ROWS,
          fallback="a new column, null in the rows written before"),
    _avro("evolution: remove an optional field", None, None, "string", evolution=("g",) * ROWS + (None,) * ROWS,
          fallback=f"the column stays, null in the rows written after ({_EVOLVED})"),
    _avro("evolution: widen int to long", None, None, "int64", evolution=(7,) * ROWS + (2**40,) * ROWS),
    _avro("evolution: rename with an alias", None, None, "string", evolution=(None,) * ROWS + ("n",) * ROWS,
          fallback="the new name is a new column; rows compacted before the change keep the old one "
                   f"({_EVOLVED}; rows compacted after it read the old field under the new name)"),
]
_EVOLUTION_FIELDS = dict(zip((f.name for f in AVRO_EVOLUTION), ("f_added", "f_gone", "f_narrow", "f_new"),
                             strict=True))


def _avro_version(v: int) -> dict[str, Any]:
    return {"type": "record", "name": "Evolving", "namespace": "feat", "fields": [
        {"name": name, **spec[v]} for name, spec in AVRO_CHANGES.items() if spec[v] is not None]}


def _json(name: str, schema: Any, value: Any, column: str, read: Any = None, **kw: Any) -> Feature:
    return Feature("json", name, schema, value, column, value if read is None else read, **kw)


JSON = [
    _json("integer", {"type": "integer"}, 42, "int64"),
    _json("number", {"type": "number"}, 2.5, "double"),
    _json("boolean", {"type": "boolean"}, True, "bool"),
    _json("string", {"type": "string"}, "héllo", "string"),
    _json("nullable", {"type": ["null", "string"]}, "x", "string"),
    _json("object", {"type": "object", "properties": {"a": {"type": "integer"}, "b": {
        "type": "object", "properties": {"c": {"type": "string"}}}}}, {"a": 1, "b": {"c": "d"}},
        "struct<a: int64, b: struct<c: string>>"),
    _json("array", {"type": "array", "items": {"type": "integer"}}, [1, 2], "list<element: int64>"),
    _json("$ref (local)", {"$ref": "#/definitions/Point"}, {"x": 1, "y": 2}, "string", '{"x":1,"y":2}',
          fallback="its JSON text"),
    _json("oneOf", {"oneOf": [{"type": "integer"}, {"type": "string"}]}, "s", "string", "s",
          fallback="a string as itself, any other value as its JSON text"),
    _json("anyOf", {"anyOf": [{"type": "integer"}, {"type": "string"}]}, 5, "string", "5",
          fallback="a string as itself, any other value as its JSON text"),
    _json("format date-time", {"type": "string", "format": "date-time"}, "2026-11-28T12:30:15Z", "string",
          fallback="the string as sent"),
    _json("format date", {"type": "string", "format": "date"}, "2026-11-28", "string",
          fallback="the string as sent"),
    _json("format uuid", {"type": "string", "format": "uuid"}, "0d9f7d2c-1c0e-4c53-9a6b-8a8b0f0e5e0a", "string",
          fallback="the string as sent"),
    _json("additionalProperties", {"type": "object", "properties": {"a": {"type": "integer"}},
                                   "additionalProperties": {"type": "string"}},
          {"a": 1, "extra": "x"}, "struct<a: int64>", {"a": 1},
          fallback="the declared properties as columns; the others only in the raw value"),
]


def _proto(name: str, decl: str, set_: Callable[[Any], None], column: str, read: Any, **kw: Any) -> Feature:
    return Feature("protobuf", name, decl, set_, column, read, **kw)


def _set(attr: str, value: Any) -> Callable[[Any], None]:
    def set_(msg: Any) -> None:
        setattr(msg, attr, value)
    return set_


def _copy(attr: str, make: Callable[[], Any]) -> Callable[[Any], None]:
    def set_(msg: Any) -> None:
        getattr(msg, attr).CopyFrom(make())
    return set_


def _wkt(module: str, name: str) -> Any:
    import importlib

    return getattr(importlib.import_module(f"google.protobuf.{module}"), name)


PROTOBUF = [
    _proto("int32, int64, sint64, uint32", "int32 {f} = {n};", _set("f_int32__int64__sint64__uint32", -5), "int64",
           -5),
    _proto("double", "double {f} = {n};", _set("f_double", 2.25), "double", 2.25),
    _proto("float", "float {f} = {n};", _set("f_float", 1.5), "double", 1.5),
    _proto("bool", "bool {f} = {n};", _set("f_bool", True), "bool", True),
    _proto("string", "string {f} = {n};", _set("f_string", "héllo"), "string", "héllo"),
    _proto("bytes", "bytes {f} = {n};", _set("f_bytes", b"\x00\xff"), "binary", b"\x00\xff"),
    _proto("nested message", "Inner {f} = {n};", _copy("f_nested_message", lambda: _MSGS["Inner"](x=3, y="z")),
           "struct<x: int64, y: string>", {"x": 3, "y": "z"}),
    _proto("repeated", "repeated string {f} = {n};", lambda m: m.f_repeated.extend(["a", "b"]),
           "list<element: string>", ["a", "b"]),
    _proto("map", "map<string, int64> {f} = {n};", lambda m: m.f_map.update({"k": 1}),
           "map<string, int64>", [("k", 1)]),
    _proto("enum", "Color {f} = {n};", _set("f_enum", 1), "string", "GREEN"),
    _proto("oneof", "oneof {f}_choice {{ string {f} = {n}; int64 {f}_i = 100; }}", _set("f_oneof", "s"),
           "string", "s", fallback="each member its own nullable column"),
    _proto("Timestamp", "google.protobuf.Timestamp {f} = {n};",
           _copy("f_Timestamp", lambda: _wkt("timestamp_pb2", "Timestamp")(seconds=int(T.timestamp()),
                                                                           nanos=123_000_000)),
           "timestamp[us, tz=UTC]", T),
    _proto("Duration", "google.protobuf.Duration {f} = {n};",
           _copy("f_Duration", lambda: _wkt("duration_pb2", "Duration")(seconds=3, nanos=5)),
           "struct<seconds: int64, nanos: int64>", {"seconds": 3, "nanos": 5},
           fallback="a struct of seconds and nanos (Iceberg has no interval type)"),
    _proto("wrappers", "google.protobuf.Int64Value {f} = {n};",
           _copy("f_wrappers", lambda: _wkt("wrappers_pb2", "Int64Value")(value=9)), "int64", 9),
    _proto("Struct", "google.protobuf.Struct {f} = {n};",
           _copy("f_Struct", lambda: _wkt("struct_pb2", "Struct")(fields={
               "k": _wkt("struct_pb2", "Value")(string_value="v")})), "string", '{"k": "v"}',
           fallback="its JSON text (schemaless)"),
    _proto("Any", "google.protobuf.Any {f} = {n};",
           _copy("f_Any", lambda: _wkt("any_pb2", "Any")(type_url="type.googleapis.com/x.Y", value=b"\x08\x01")),
           "struct<type_url: string, value: binary>", {"type_url": "type.googleapis.com/x.Y", "value": b"\x08\x01"},
           fallback="a struct of its type URL and bytes"),
    _proto("Empty", "google.protobuf.Empty {f} = {n};", lambda m: m.f_Empty.SetInParent(), "string", "{}",
           fallback="the text {}"),
    _proto("FieldMask", "google.protobuf.FieldMask {f} = {n};",
           _copy("f_FieldMask", lambda: _wkt("field_mask_pb2", "FieldMask")(paths=["a.b"])),
           "struct<paths: list<element: string>>", {"paths": ["a.b"]}),
    _proto("import from another subject", "shared.Money {f} = {n};",
           _copy("f_import_from_another_subject", lambda: _MSGS["Money"](currency="EUR", cents=250)),
           "struct<currency: string, cents: int64>", {"currency": "EUR", "cents": 250}),
]

FEATURES = [*AVRO, *AVRO_EVOLUTION, *JSON, *PROTOBUF]
#: Protobuf message classes generated for the run (``Row``, ``Inner``, ``Money``).
_MSGS: dict[str, Any] = {}

SHARED_PROTO = """syntax = "proto3";
package shared;
message Money { string currency = 1; int64 cents = 2; }
"""


def _proto_text() -> str:
    fields = "\n".join("  " + f.schema.format(f=f.column_name, n=i + 1) for i, f in enumerate(PROTOBUF))
    imports = "\n".join(f'import "google/protobuf/{n}.proto";' for n in (
        "any", "duration", "empty", "field_mask", "struct", "timestamp", "wrappers"))
    return f"""syntax = "proto3";
package feat;
{imports}
import "shared_money.proto";
message Row {{
{fields}
}}
message Inner {{ int32 x = 1; string y = 2; }}
enum Color {{ RED = 0; GREEN = 1; }}
"""


def _avro_schema() -> dict[str, Any]:
    return {"type": "record", "name": "Row", "namespace": "feat",
            "fields": [{"name": f.column_name, "type": f.schema} for f in AVRO]}


def _json_schema() -> dict[str, Any]:
    return {"type": "object", "definitions": {"Point": {"type": "object", "properties": {
        "x": {"type": "integer"}, "y": {"type": "integer"}}}},
        "properties": {f.column_name: f.schema for f in JSON}}


@dataclass
class Read:
    """What one format's topic gave: the registry's answers, the round trip, the
    table's column types and each engine's rows."""

    registered: bool = False
    compatible: bool = False
    echoed: list[dict[str, Any]] = field(default_factory=list)
    types: dict[str, str] = field(default_factory=dict)
    pyiceberg: list[dict[str, Any]] = field(default_factory=list)
    duckdb: list[dict[str, Any]] = field(default_factory=list)
    spark: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str | None] = field(default_factory=list)


def _serde(fmt: str, client: Any, tmp: Path) -> tuple[Any, Any, list[Any]]:
    """The format's serializer, deserializer and the records to send."""
    conf = {"use.deprecated.format": False} if fmt == "protobuf" else {}
    if fmt == "avro":
        from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer

        text = json.dumps(_avro_schema())
        records = [{f.column_name: f.value for f in AVRO} for _ in range(ROWS)]
        return AvroSerializer(client, text), AvroDeserializer(client), records
    if fmt == "json":
        from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer

        text = json.dumps(_json_schema())
        records = [{f.column_name: f.value for f in JSON} for _ in range(ROWS)]
        return JSONSerializer(text, client), JSONDeserializer(text), records
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer

    _generated(tmp, SHARED_PROTO, "shared_money_pb2")
    sys.path.insert(0, str(tmp))  # the row's module imports shared_money_pb2
    try:
        module = _generated(tmp, _proto_text(), "feat_row_pb2")
    finally:
        sys.path.remove(str(tmp))
    _MSGS.update(Row=module.Row, Inner=module.Inner, Money=sys.modules["shared_money_pb2"].Money)
    records = []
    for _ in range(ROWS):
        msg = module.Row()
        for f in PROTOBUF:
            f.value(msg)
        records.append(msg)
    return ProtobufSerializer(module.Row, client, conf), ProtobufDeserializer(module.Row, conf), records


@pytest.fixture(name="matrix_config", scope="module")
def matrix_config_fixture(servers: Servers, tmp_path_factory: pytest.TempPathFactory) -> LlogConfig:
    tmp = tmp_path_factory.mktemp("schema-matrix")
    return LlogConfig(etcd_endpoints=(servers.etcd_endpoint,), object_store=f"file://{tmp / 'objects'}",
                      root_prefix=f"m{uuid.uuid4().hex[:10]}", compact_min_age_ms=0, settle_after_ms=0,
                      iceberg_catalog_uri=f"sqlite:///{tmp / 'catalog.db'}")


@pytest.fixture(name="reads", scope="module")
def reads_fixture(matrix_config: LlogConfig, tmp_path_factory: pytest.TempPathFactory,
                  spark: Any) -> Iterator[dict[str, Read]]:
    """Each format's wide topic (and Avro's changing one), produced, compacted, synced
    and read by every engine."""
    import duckdb
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from llog.spark import read_table

    reads: dict[str, Read] = {}
    cfg = matrix_config
    opts = {"etcdEndpoints": ",".join(cfg.etcd_endpoints), "objectStore": cfg.object_store,
            "rootPrefix": cfg.root_prefix, "icebergCatalogUri": cfg.iceberg_catalog_uri or ""}
    with kafka_broker(cfg) as kb, Connection(cfg) as conn, TableCatalog(conn) as tables:
        client = sr.SchemaRegistryClient({"url": kb.http.url})

        def read_back(topic: str, versions: list[tuple[Any, Any, list[Any]]], whole: bool) -> Read:
            """Each version's records sent, read back, compacted and synced in turn; the
            table read by every engine."""
            got = Read()
            Topics(conn).create(topic, 1, table="iceberg", value_schema="schema-id")
            ctx = SerializationContext(topic, MessageField.VALUE)
            for ser, de, records in versions:
                _send(kb, Producer, topic, [ser(r, ctx) for r in records])  # the serializer registers
                # Protobuf: the messages compared whole (an Any of an unknown type has no dict form).
                sent = _consume(kb, Consumer, topic, len(got.echoed) + len(records))[len(got.echoed):]
                got.echoed += [{"": de(v, ctx) == r} if whole else dict(de(v, ctx))
                               for v, r in zip(sent, records, strict=True)]
                _compact(cfg, topic)
                sync_table(tables, topic)
            latest = client.get_latest_version(f"{topic}-value")
            got.registered = latest.version == len(versions)
            got.compatible = client.test_compatibility(f"{topic}-value", latest.schema) is True
            table = tables.table(topic)
            assert table is not None
            arrow = table.scan().to_arrow().sort_by("offset")
            # pyiceberg reads several files with Arrow's large types: the same column type.
            got.types = {f.name: str(f.type).replace("large_", "") for f in arrow.schema.field("fields").type}
            got.pyiceberg = arrow.column("fields").to_pylist()
            got.errors = arrow.column("fields_error").to_pylist()
            files = [t.file.file_path.removeprefix("file://") for t in table.scan().plan_files()]
            rel = duckdb.sql(f"SELECT fields FROM read_parquet({files!r}, union_by_name = true) ORDER BY \"offset\"")
            got.duckdb = [row[0] for row in rel.fetchall()]
            got.spark = [r["fields"].asDict(recursive=True)
                         for r in read_table(spark, topic, opts).orderBy("offset").collect()]
            return got

        for fmt in ("avro", "json", "protobuf"):
            reads[fmt] = read_back(f"feat-{fmt}", [_serde(fmt, client, tmp_path_factory.mktemp(fmt))],
                                   fmt == "protobuf")
        from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer

        reads["avro-evolution"] = read_back("feat-avro-evolution", [
            (AvroSerializer(client, json.dumps(_avro_version(v))), AvroDeserializer(client),
             [{name: spec[2 + v] for name, spec in AVRO_CHANGES.items() if spec[v] is not None}] * ROWS)
            for v in (0, 1)], False)
    yield reads


def _send(kb: KafkaBroker, producer: Any, topic: str, values: list[bytes]) -> None:
    failed: list[Any] = []
    p = producer({"bootstrap.servers": kb.bootstrap, "linger.ms": 5})
    for v in values:
        p.produce(topic, value=v, partition=0, on_delivery=lambda err, _m: err and failed.append(err))
    assert p.flush(30) == 0 and not failed, failed[:3]


def _consume(kb: KafkaBroker, consumer: Any, topic: str, n: int) -> list[bytes]:
    """The topic's first ``n`` values, through the broker."""
    c = consumer({"bootstrap.servers": kb.bootstrap, "group.id": f"g{uuid.uuid4().hex[:6]}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    out: list[bytes] = []
    try:
        while len(out) < n:
            msg = c.poll(10)
            assert msg is not None and msg.error() is None, msg and msg.error()
            out.append(msg.value())
    finally:
        c.close()
    return out


def _compact(cfg: LlogConfig, topic: str) -> None:
    """``llog compact`` in a process of its own: the compactor types the columns."""
    done = subprocess.run([sys.executable, "-m", "llog", "compact", topic, "--min-age-ms", "0"],
                          env={**config_env(cfg), "LLOG_SETTLE_AFTER_MS": "0"}, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and "no typed columns" not in done.stderr, done.stderr


# -- normalising what engines give ----------------------------------------------------

def norm(v: Any) -> Any:
    """One shape for a value whichever engine read it: maps as dicts, instants as UTC
    ISO text, bytes as hex, decimals as text."""
    if hasattr(v, "asDict"):
        v = v.asDict(recursive=True)
    if isinstance(v, dict):
        return {str(k): norm(x) for k, x in sorted(v.items())}
    if isinstance(v, (list, tuple)):
        if v and all(isinstance(x, tuple) and len(x) == 2 for x in v):
            return {str(k): norm(x) for k, x in v}
        return [norm(x) for x in v]
    if isinstance(v, dt.datetime):
        return (v.astimezone(UTC).replace(tzinfo=None) if v.tzinfo else v).isoformat()
    if isinstance(v, (dt.date, dt.time)):
        return v.isoformat()
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    if isinstance(v, (Decimal, uuid.UUID)):
        return str(v)
    if isinstance(v, float):
        return round(v, 6)
    return v


def _cells() -> list[Any]:
    return [pytest.param(f, id=f.id) for f in FEATURES]


# -- the cells ------------------------------------------------------------------------

@pytest.mark.parametrize("feature", _cells())
def test_register(feature: Feature, reads: dict[str, Read]) -> None:
    got = reads[feature.topic]
    assert got.registered and got.compatible


@pytest.mark.parametrize("feature", _cells())
def test_round_trip(feature: Feature, reads: dict[str, Read]) -> None:
    echoed = reads[feature.topic].echoed
    if feature.fmt == "protobuf":
        assert echoed == [{"": True}] * ROWS
        return
    sent = feature.value if feature.echoed is None else feature.echoed
    want = list(feature.evolution) if feature.evolution else [sent] * ROWS
    assert [norm(r.get(feature.column_name)) for r in echoed] == [norm(v) for v in want]


@pytest.mark.parametrize("feature", _cells())
def test_typed_column(feature: Feature, reads: dict[str, Read]) -> None:
    got = reads[feature.topic]
    assert got.errors == [None] * len(got.errors) and got.errors
    assert got.types[feature.column_name] == feature.column


@pytest.mark.parametrize("feature", _cells())
def test_pyiceberg(feature: Feature, reads: dict[str, Read]) -> None:
    assert [r[feature.column_name] for r in reads[feature.topic].pyiceberg] == feature.expected()


@pytest.mark.parametrize("feature", _cells())
def test_duckdb(feature: Feature, reads: dict[str, Read]) -> None:
    assert [norm(r[feature.column_name]) for r in reads[feature.topic].duckdb] == [norm(v) for v in feature.expected()]


@pytest.mark.parametrize("feature", _cells())
def test_spark(feature: Feature, reads: dict[str, Read]) -> None:
    if feature.spark_absent:
        assert all(feature.column_name not in r for r in reads[feature.topic].spark)
        return
    assert [norm(r[feature.column_name]) for r in reads[feature.topic].spark] == [norm(v) for v in feature.expected()]
