"""The schema-feature matrix of docs/schema-registry.md (issue 56): for each feature of
Avro, JSON Schema and Protobuf, is its schema registered and checked by llog's registry,
do records round-trip through Confluent's serializers and a broker, what column does it
become in the topic's Iceberg table, and do pyiceberg, DuckDB and Spark (``read_table``)
read back the value that was sent.

One wide schema per format carries every feature as a field. Schema changes are rows
too: each format's changing topic gets v1's records, compacted and synced, then v2's,
then v1's again (compacted under v2, the subject's latest). Records go through a broker
that checks each value against its schema (``value_validation=refuse``) and ``llog
compact`` in processes of their own (never this one, which built the schemas: an import
here cannot hide one missing in a server), into a table read once per engine; each cell
of the matrix is then one test case over what was read (tests/schema_matrix.py names
them, ``make matrix`` renders the table).
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from llog.config import LlogConfig
from llog.connection import Connection
from llog.errors import TableError
from llog.table import TableCatalog, sync_table
from llog.topic.admin import Topics
from tests import forked_llog
from tests.build_lock import once_per_run
from tests.conftest import Servers, config_env
from tests.test_kafka import KafkaBroker, kafka_broker
from tests.test_typed_tables import _generated, _pool_class

sr = pytest.importorskip("confluent_kafka.schema_registry")
pytest.importorskip("pyiceberg")

ROWS = 3
UTC = dt.timezone.utc
T = dt.datetime(2026, 11, 28, 12, 30, 15, 123000, tzinfo=UTC)
#: The version each batch of ROWS records of a changing topic is written with: v1, v2,
#: then v1 again, compacted after the change (so decoded with v2, the reader's schema).
BATCHES = (0, 1, 0)


class _Marker:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


#: A batch the table never took (its sync was refused), in place of the value read.
NOT_IN_TABLE: Any = _Marker("NOT_IN_TABLE")
#: A field the record leaves out, in place of the value sent.
OMITTED: Any = _Marker("OMITTED")


@dataclass(frozen=True)
class Change:
    """An evolution row's part of its format's changing schema: the fields it declares
    in v1 and in v2 (name -> the format's declaration) and what v1's and v2's records
    carry in them; ``name`` is the field the row's cells look at."""

    name: str
    v1: dict[str, Any]
    v2: dict[str, Any]
    sent: tuple[dict[str, Any], dict[str, Any]]
    #: The subject's level (BACKWARD, the default) refuses this change alone; v2 is then
    #: registered with the subject's level set to NONE, as its user would have to.
    refused: bool = False
    #: The changing topic it is in: a change that stops the table's sync gets its own.
    topic: str = "evolution"


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
    #: The value the serializer's round trip gives back, where it differs from ``value``
    #: (an evolution's row: v1's and v2's records', where they differ from ``sent``).
    echoed: Any = field(default=None)
    #: Spark's ``read_table`` leaves the column out (the fallback).
    spark_absent: bool = False
    #: Avro: the rest of the field's declaration (its ``default``).
    declared: dict[str, Any] = field(default_factory=dict)
    #: An evolution's row: its change, and the value the table reads for each batch of
    #: BATCHES in place of ``read``.
    change: Change | None = None
    evolution: tuple[Any, ...] = ()

    @property
    def id(self) -> str:
        return f"{self.fmt}:{self.name}"

    @property
    def topic(self) -> str:
        return f"{self.fmt}-{self.change.topic}" if self.change else self.fmt

    @property
    def column_name(self) -> str:
        if self.change:
            return self.change.name
        return "f_" + "".join(c if c.isalnum() else "_" for c in self.name)

    def expected(self) -> list[Any]:
        """The value of each row of the table."""
        if not self.change:
            return [self.read] * ROWS
        return [v for v in self.evolution if v is not NOT_IN_TABLE for _ in range(ROWS)]

    def echoes(self) -> list[Any]:
        """The value of each record the format's deserializer gives back."""
        if not self.change:
            return [self.value if self.echoed is None else self.echoed] * ROWS
        versions = self.echoed or tuple(sent.get(self.change.name) for sent in self.change.sent)
        return [versions[v] for v in BATCHES for _ in range(ROWS)]


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
    _avro("default, the record omits the field", "string", OMITTED, "string", "dflt", echoed="dflt",
          declared={"default": "dflt"}),
]


def _changed(fmt: str, name: str, column: str, change: Change, read: tuple[Any, Any, Any], **kw: Any) -> Feature:
    """An evolution's row: ``read``, what the table gives for each batch of BATCHES."""
    return Feature(fmt, f"evolution: {name}", None, None, column, None, change=change, evolution=read, **kw)


_EVOLVED = "Iceberg keeps every column it had: the table's schema only widens"
_OPTIONAL = {"type": ["null", "string"], "default": None}
AVRO_EVOLUTION = [
    _changed("avro", "add an optional field", "string",
             Change("f_added", {}, {"f_added": _OPTIONAL}, ({}, {"f_added": "a"})), (None, "a", None),
             fallback="a new column, null in the rows compacted before"),
    _changed("avro", "add a field with a default", "string",
             Change("f_default", {}, {"f_default": {"type": "string", "default": "d"}}, ({}, {})), (None, "d", "d"),
             echoed=(None, "d"),
             fallback="rows compacted before the change read null, not the default: their files have no such "
                      "column and the table fills in no defaults (v1's records compacted after it read the default)"),
    _changed("avro", "remove an optional field", "string",
             Change("f_gone", {"f_gone": _OPTIONAL}, {}, ({"f_gone": "g"}, {})), ("g", None, None),
             fallback=f"the column stays, null in the rows compacted after ({_EVOLVED})"),
    _changed("avro", "widen int to long", "int64",
             Change("f_narrow", {"f_narrow": {"type": "int"}}, {"f_narrow": {"type": "long"}},
                    ({"f_narrow": 7}, {"f_narrow": 2**40})), (7, 2**40, 7)),
    _changed("avro", "rename with an alias", "string",
             Change("f_new", {"f_old": {"type": "string"}}, {"f_new": {"type": "string", "aliases": ["f_old"]}},
                    ({"f_old": "o"}, {"f_new": "n"})), (None, "n", "o"),
             fallback="the new name is a new column; rows compacted before the change keep the old one "
                      f"({_EVOLVED}); v1's records compacted after it read the old field under the new name"),
]


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
    _json("$ref (local)", {"$ref": "#/definitions/Point"}, {"x": 1, "y": 2}, "struct<x: int64, y: int64>"),
    _json("$ref to another subject", {"$ref": "point.json"}, {"x": 3, "y": 4}, "struct<x: int64, y: int64>"),
    _json("$ref into another subject's $defs", {"$ref": "point.json#/$defs/Label"}, {"text": "t"},
          "struct<text: string>"),
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
#: The schema JSON rows reference from a subject of its own, as ``point.json``.
SHARED_JSON = {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
               "$defs": {"Label": {"type": "object", "properties": {"text": {"type": "string"}}}}}

_OPEN = ("BACKWARD, the default level, refuses a property added to an open content model, where v1's records "
         "may carry it with any type: v2 is registered with the subject's level NONE")
JSON_EVOLUTION = [
    _changed("json", "add an optional property", "string",
             Change("f_added", {}, {"f_added": {"type": "string"}}, ({}, {"f_added": "a"}), refused=True),
             (None, "a", None), fallback=f"{_OPEN}. A new column, null in the rows compacted before"),
    _changed("json", "remove an optional property", "string",
             Change("f_gone", {"f_gone": {"type": "string"}}, {}, ({"f_gone": "g"}, {})), ("g", None, None),
             fallback=f"the column stays, null in the rows compacted after ({_EVOLVED})"),
    _changed("json", "rename (no such feature)", "string",
             Change("f_new", {"f_old": {"type": "string"}}, {"f_new": {"type": "string"}},
                    ({"f_old": "o"}, {"f_new": "n"}), refused=True), (None, "n", None),
             fallback=f"JSON Schema has no aliases: a rename is a removal and an addition. {_OPEN}. The new name "
                      "is a new column, which v1's records compacted after the change leave null"),
    _changed("json", "widen integer to number", "int64",
             Change("f_narrow", {"f_narrow": {"type": "integer"}}, {"f_narrow": {"type": "number"}},
                    ({"f_narrow": 7}, {"f_narrow": 2.5}), topic="widening"), (7, NOT_IN_TABLE, NOT_IN_TABLE),
             fallback="the registry takes it, the table cannot: Iceberg does not promote long to double, so the "
                      "sync refuses every file typed by v2 (`TableError`) and the table keeps the rows compacted "
                      "before the change; the files wait in the index. Declare `number` from the start"),
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
           "string", "s", fallback="each member its own column, null unless it is the one set"),
    _proto("oneof, a member not set", "oneof {f}_choice {{ string {f}_s = {n}; int64 {f} = 101; }}",
           _set("f_oneof__a_member_not_set_s", "s"), "int64", None,
           fallback="null (not 0: a oneof's members have presence)"),
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

PROTOBUF_EVOLUTION = [
    _changed("protobuf", "add a field", "string",
             Change("f_added", {}, {"f_added": "string {f} = 4;"}, ({}, {"f_added": "a"})), (None, "a", ""),
             fallback='a new column, null in the rows compacted before; v1\'s records compacted after the change '
                      'read the proto3 default ""'),
    _changed("protobuf", "remove a field (reserve its number)", "string",
             Change("f_gone", {"f_gone": "string {f} = 1;"}, {"f_gone": "reserved 1;"}, ({"f_gone": "g"}, {})),
             ("g", None, None), fallback=f"the column stays, null in the rows compacted after ({_EVOLVED})"),
    _changed("protobuf", "widen int32 to int64", "int64",
             Change("f_narrow", {"f_narrow": "int32 {f} = 2;"}, {"f_narrow": "int64 {f} = 2;"},
                    ({"f_narrow": 7}, {"f_narrow": 2**40})), (7, 2**40, 7)),
    _changed("protobuf", "rename a field (same number)", "string",
             Change("f_renamed", {"f_old": "string {f} = 3;"}, {"f_renamed": "string {f} = 3;"},
                    ({"f_old": "o"}, {"f_renamed": "n"})), (None, "n", "o"),
             fallback="the new name is a new column; rows compacted before the change keep the old one "
                      f"({_EVOLVED}); v1's records compacted after it read the field (its number) under the new name"),
]

FEATURES = [*AVRO, *AVRO_EVOLUTION, *JSON, *JSON_EVOLUTION, *PROTOBUF, *PROTOBUF_EVOLUTION]
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
            "fields": [{"name": f.column_name, "type": f.schema, **f.declared} for f in AVRO]}


def _json_schema() -> dict[str, Any]:
    return {"type": "object", "definitions": {"Point": {"type": "object", "properties": {
        "x": {"type": "integer"}, "y": {"type": "integer"}}}},
        "properties": {f.column_name: f.schema for f in JSON}}


def _proto_version(fields: dict[str, str]) -> str:
    decls = "\n".join("  " + d.format(f=name) for name, d in fields.items())
    return f'syntax = "proto3";\npackage feat;\nmessage Evolving {{\n{decls}\n}}\n'


#: Each format's changing schema as text, from its fields (name -> declaration).
_VERSIONS: dict[str, Callable[[dict[str, Any]], str]] = {
    "avro": lambda fields: json.dumps({"type": "record", "name": "Evolving", "namespace": "feat",
                                       "fields": [{"name": n, **d} for n, d in fields.items()]}),
    "json": lambda fields: json.dumps({"type": "object", "properties": fields}),
    "protobuf": _proto_version,
}
_SCHEMA_TYPES = {"avro": "AVRO", "json": "JSON", "protobuf": "PROTOBUF"}


def _version(rows: list[Feature], changed: Callable[[Feature], bool]) -> str:
    """A changing topic's schema: each row's v2 fields where ``changed(row)``, else its v1's."""
    fields: dict[str, Any] = {}
    for r in rows:
        assert r.change is not None
        fields.update(r.change.v2 if changed(r) else r.change.v1)
    return _VERSIONS[rows[0].fmt](fields)


@dataclass
class Read:
    """What one topic gave: the registry's answers, the round trip, the table's column
    types and each engine's rows."""

    registered: bool = False
    compatible: bool = False
    #: A changing topic: the registry's answer on each row's change alone, against v1.
    verdicts: dict[str, bool] = field(default_factory=dict)
    echoed: list[dict[str, Any]] = field(default_factory=list)
    #: Why syncs of the table were refused.
    stalled: list[str] = field(default_factory=list)
    types: dict[str, str] = field(default_factory=dict)
    pyiceberg: list[dict[str, Any]] = field(default_factory=list)
    duckdb: list[dict[str, Any]] = field(default_factory=list)
    spark: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str | None] = field(default_factory=list)


@dataclass(frozen=True)
class Run:
    """What every topic of the matrix goes through."""

    cfg: LlogConfig
    kb: KafkaBroker
    conn: Connection
    tables: TableCatalog
    client: Any
    spark: Any
    tmp: pytest.TempPathFactory


#: A serializer, its deserializer and the records it sends.
Batch = tuple[Any, Any, list[Any]]


def _serde(fmt: str, client: Any, tmp: Path) -> Batch:
    """The format's wide serializer, deserializer and the records to send."""
    conf = {"use.deprecated.format": False} if fmt == "protobuf" else {}
    if fmt == "avro":
        from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer

        text = json.dumps(_avro_schema())
        records = [{f.column_name: f.value for f in AVRO if f.value is not OMITTED} for _ in range(ROWS)]
        return AvroSerializer(client, text), AvroDeserializer(client), records
    if fmt == "json":
        from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer

        # The referenced schema is registered first, by its user: serializers register only the row's.
        client.register_schema("feat-point", sr.Schema(json.dumps(SHARED_JSON), "JSON"))
        ref = sr.SchemaReference("point.json", "feat-point", client.get_latest_version("feat-point").version)
        schema = sr.Schema(json.dumps(_json_schema()), "JSON", [ref])
        records = [{f.column_name: f.value for f in JSON} for _ in range(ROWS)]
        return JSONSerializer(schema, client), JSONDeserializer(schema, schema_registry_client=client), records
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


def _changing_serde(fmt: str, client: Any, text: str, tmp: Path) -> tuple[Any, Any, Callable[[dict[str, Any]], Any]]:
    """A changing schema's serializer, deserializer and how a record of its fields is made."""
    if fmt == "avro":
        from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer

        return AvroSerializer(client, text), AvroDeserializer(client), dict
    if fmt == "json":
        from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer

        return JSONSerializer(text, client), JSONDeserializer(text), dict
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer

    conf = {"use.deprecated.format": False}
    message = _pool_class(tmp, text, "feat.Evolving")  # v1 and v2 are one message: a pool each
    return ProtobufSerializer(message, client, conf), ProtobufDeserializer(message, conf), lambda r: message(**r)


@pytest.fixture(name="matrix_config", scope="module")
def matrix_config_fixture(servers: Servers, tmp_path_factory: pytest.TempPathFactory) -> LlogConfig:
    tmp = tmp_path_factory.mktemp("schema-matrix")
    return LlogConfig(etcd_endpoints=(servers.etcd_endpoint,), object_store=f"file://{tmp / 'objects'}",
                      root_prefix=f"m{uuid.uuid4().hex[:10]}", compact_min_age_ms=0, settle_after_ms=0,
                      iceberg_catalog_uri=f"sqlite:///{tmp / 'catalog.db'}")


@pytest.fixture(name="reads", scope="module")
def reads_fixture(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Read]:
    """Each format's wide topic and each changing one (by ``Feature.topic``), produced,
    compacted, synced and read by every engine: once per run, by the first worker to
    run a cell (a minute of Spark, DuckDB and the compactor under the suite's load; the
    reads are plain data the other workers load)."""
    return once_per_run(tmp_path_factory, "schema-matrix-reads", lambda: _matrix(
        request.getfixturevalue("matrix_config"), tmp_path_factory, request.getfixturevalue("spark")))


def _matrix(cfg: LlogConfig, tmp_path_factory: pytest.TempPathFactory, spark: Any) -> dict[str, Read]:
    with kafka_broker(cfg) as kb, Connection(cfg) as conn, TableCatalog(conn) as tables:
        run = Run(cfg, kb, conn, tables, sr.SchemaRegistryClient({"url": kb.http.url}), spark, tmp_path_factory)
        reads = {fmt: _wide(run, fmt) for fmt in ("avro", "json", "protobuf")}
        for key in dict.fromkeys(f.topic for f in FEATURES if f.change):
            reads[key] = _changing(run, key, [f for f in FEATURES if f.topic == key])
    return reads


def _wide(run: Run, fmt: str) -> Read:
    got = Read()
    _create(run, fmt)
    _batch(run, fmt, _serde(fmt, run.client, run.tmp.mktemp(fmt)), got)
    return _read_table(run, fmt, got, versions=1)


def _changing(run: Run, key: str, rows: list[Feature]) -> Read:
    """A changing topic: a batch of records per BATCHES; before v2's, the registry's
    answer on each row's change alone (and the subject's level NONE if one is refused)."""
    fmt, got = rows[0].fmt, Read()
    _create(run, key)
    serdes = [_changing_serde(fmt, run.client, _version(rows, lambda _r, v=v: v == 1), run.tmp.mktemp(key))
              for v in (0, 1)]
    for i, v in enumerate(BATCHES):
        if i == 1:
            _verdicts(run, f"feat-{key}-value", rows, got)
        ser, de, make = serdes[v]
        record = {name: value for r in rows if r.change for name, value in r.change.sent[v].items()}
        _batch(run, key, (ser, de, [make(record) for _ in range(ROWS)]), got)
    return _read_table(run, key, got, versions=2)


def _verdicts(run: Run, subject: str, rows: list[Feature], got: Read) -> None:
    for row in rows:
        assert row.change is not None
        alone = sr.Schema(_version(rows, lambda r, row=row: r is row), _SCHEMA_TYPES[row.fmt])
        got.verdicts[row.change.name] = run.client.test_compatibility(subject, alone) is True
    if not all(got.verdicts.values()):  # as a user must to make a change the level refuses
        run.client.set_compatibility(subject_name=subject, level="NONE")


def _create(run: Run, key: str) -> None:
    """The topic: a table, its values' schema ids checked at produce (refused if they do not decode)."""
    Topics(run.conn).create(f"feat-{key}", 1, table="iceberg", value_schema="schema-id", value_validation="refuse")


def _batch(run: Run, key: str, batch: Batch, got: Read) -> None:
    """One batch sent through the broker, read back through it, compacted and synced (a
    refused sync kept in ``got.stalled``)."""
    from confluent_kafka.serialization import MessageField, SerializationContext

    topic, (ser, de, records) = f"feat-{key}", batch
    ctx = SerializationContext(topic, MessageField.VALUE)
    _send(run.kb, topic, [ser(r, ctx) for r in records])  # the serializer registers
    sent = _consume(run.kb, topic, len(got.echoed) + len(records))[len(got.echoed):]
    # Protobuf: the messages compared whole (an Any of an unknown type has no dict form).
    got.echoed += [dict(de(v, ctx)) if isinstance(r, dict) else {"": de(v, ctx) == r}
                   for v, r in zip(sent, records, strict=True)]
    _compact(run.cfg, topic)
    try:
        sync_table(run.tables, topic)
    except TableError as exc:
        got.stalled.append(str(exc))


def _read_table(run: Run, key: str, got: Read, *, versions: int) -> Read:
    """The registry's answers on the topic's subject, and its table read by every engine."""
    import duckdb

    from llog.spark import read_table

    topic, cfg = f"feat-{key}", run.cfg
    latest = run.client.get_latest_version(f"{topic}-value")
    got.registered = latest.version == versions
    got.compatible = run.client.test_compatibility(f"{topic}-value", latest.schema) is True
    table = run.tables.table(topic)
    assert table is not None
    arrow = table.scan().to_arrow().sort_by("offset")
    # pyiceberg reads several files with Arrow's large types: the same column type.
    got.types = {f.name: str(f.type).replace("large_", "") for f in arrow.schema.field("fields").type}
    got.pyiceberg = arrow.column("fields").to_pylist()
    got.errors = arrow.column("fields_error").to_pylist()
    files = [t.file.file_path.removeprefix("file://") for t in table.scan().plan_files()]
    rel = duckdb.sql(f"SELECT fields FROM read_parquet({files!r}, union_by_name = true) ORDER BY \"offset\"")
    got.duckdb = [row[0] for row in rel.fetchall()]
    opts = {"etcdEndpoints": ",".join(cfg.etcd_endpoints), "objectStore": cfg.object_store,
            "rootPrefix": cfg.root_prefix, "icebergCatalogUri": cfg.iceberg_catalog_uri or ""}
    got.spark = [r["fields"].asDict(recursive=True)
                 for r in read_table(run.spark, topic, opts).orderBy("offset").collect()]
    return got


def _send(kb: KafkaBroker, topic: str, values: list[bytes]) -> None:
    from confluent_kafka import Producer

    failed: list[Any] = []
    p = Producer({"bootstrap.servers": kb.bootstrap, "linger.ms": 5})
    for v in values:
        p.produce(topic, value=v, partition=0, on_delivery=lambda err, _m: err and failed.append(err))
    assert p.flush(30) == 0 and not failed, failed[:3]


def _consume(kb: KafkaBroker, topic: str, n: int) -> list[bytes]:
    """The topic's first ``n`` values, through the broker."""
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": kb.bootstrap, "group.id": f"g{uuid.uuid4().hex[:6]}",
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
    done = forked_llog.run(["compact", topic, "--min-age-ms", "0"], {**config_env(cfg), "LLOG_SETTLE_AFTER_MS": "0"})
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
    if feature.change:  # the change alone, at the subject's level: refused where the row says so
        assert got.verdicts[feature.change.name] is not feature.change.refused


@pytest.mark.parametrize("feature", _cells())
def test_round_trip(feature: Feature, reads: dict[str, Read]) -> None:
    echoed = reads[feature.topic].echoed
    if feature.fmt == "protobuf":
        assert echoed == [{"": True}] * len(feature.echoes())
        return
    assert [norm(r.get(feature.column_name)) for r in echoed] == [norm(v) for v in feature.echoes()]


@pytest.mark.parametrize("feature", _cells())
def test_typed_column(feature: Feature, reads: dict[str, Read]) -> None:
    got = reads[feature.topic]
    assert got.errors == [None] * len(got.errors) and got.errors
    assert got.types[feature.column_name] == feature.column
    # A batch missing from the table is one whose sync Iceberg refused, and only that.
    assert bool(got.stalled) == (NOT_IN_TABLE in feature.evolution)
    assert all("cannot widen the table's schema" in why for why in got.stalled), got.stalled


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
