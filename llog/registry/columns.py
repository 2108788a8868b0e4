"""A topic's values as typed columns: the Arrow type of a registered schema, and the
values decoded into it (spec §7.6, typed columns).

A topic whose ``value_schema`` is set names its values' schemas in the registry, under
subject ``{topic}-value``: ``schema-id`` values carry Confluent's prefix (a zero byte
and the schema id, 4 bytes big-endian), ``latest`` values are the bare encoding of
the subject's latest schema. :class:`ValueColumns` decodes a run of values into one
Arrow struct array of the subject's latest schema (the reader's): each Avro value is
resolved from its writer's schema to the reader's (fastavro, Avro's resolution rules),
each JSON value shaped by the reader's JSON Schema. A value that does not decode gets a
null row and its reason in the error column; it never fails the run.

Avro maps to Arrow as records to structs, arrays to lists, maps to maps, ``[null, T]``
to a nullable T, enums to strings, ``date`` / ``timestamp-*`` / ``decimal`` to their
Arrow types; a union of several types is its JSON text. JSON Schema: objects with
``properties`` to structs, ``items`` to lists, ``integer`` / ``number`` / ``boolean`` /
``string`` to int64 / float64 / bool / string, a ``$ref`` (local or to a reference's
schema) to what it names; anything else (and a recursive ``$ref``) to its JSON text.
Protobuf: the first message of the latest schema's file, each value parsed as it (field
numbers make the versions compatible), fields as their types (ints as int64, enums as
names, a ``Timestamp`` as a timestamp, maps as maps, a recursive message as its JSON).
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from llog.errors import LlogError
from llog.registry import protobuf_messages
from llog.registry.model import AVRO, PROTOBUF, Reference
from llog.registry.store import SchemaRegistry

if TYPE_CHECKING:
    import pyarrow as pa

#: The column of decoded values, and the one of why a value did not decode.
FIELDS, FIELDS_ERROR = "fields", "fields_error"
MAGIC = 0


def subject_of(topic: str) -> str:
    """The registry subject of a topic's values (Confluent's TopicNameStrategy)."""
    return f"{topic}-value"


# -- Arrow types -----------------------------------------------------------------------

#: Avro primitives as Arrow types: ints and floats widened to 64 bits, so Avro's own
#: promotions (int to long, float to double) never change a column's type.
_AVRO_PRIMITIVES = {"null": "string", "boolean": "bool_", "int": "int64", "long": "int64", "float": "float64",
                    "double": "float64", "bytes": "binary", "string": "string"}
_TIMESTAMPS = ("timestamp-millis", "timestamp-micros", "local-timestamp-millis", "local-timestamp-micros")


def _json_text(value: Any) -> str | None:
    return None if value is None else json.dumps(value, default=str, separators=(",", ":"))


class AvroTypes:
    """An Avro schema (with the named types of its references) mapped to Arrow, and its
    decoded values shaped for that type. A recursive reference, a union of several
    types and a record without fields map to their JSON text."""

    def __init__(self, doc: Any, references: Sequence[Any] = ()) -> None:
        self.doc = doc
        self.named: dict[str, Any] = {}
        for ref in references:
            self._collect(ref, "")
        self._collect(doc, "")
        self.arrow_type = self._arrow(doc, "", ())

    @staticmethod
    def _full(name: str, namespace: str) -> tuple[str, str]:
        """``(full name, the namespace its children resolve in)`` (Avro's rules)."""
        full = name if "." in name or not namespace else f"{namespace}.{name}"
        return full, full.rpartition(".")[0]

    def _collect(self, schema: Any, ns: str) -> None:
        if isinstance(schema, list):
            for m in schema:
                self._collect(m, ns)
        elif isinstance(schema, dict):
            kind = schema.get("type")
            if kind in ("record", "enum", "fixed", "error") and isinstance(schema.get("name"), str):
                full, inner = self._full(schema["name"], schema.get("namespace", ns))
                self.named[full] = (schema, inner)
                for f in schema.get("fields", ()):
                    self._collect(f.get("type"), inner)
            elif kind in ("array", "map"):
                self._collect(schema.get("items", schema.get("values")), ns)
            elif isinstance(kind, (dict, list)):
                self._collect(kind, ns)

    def _resolve(self, name: str, ns: str) -> tuple[str, Any, str] | None:
        for full in (self._full(name, ns)[0], name):
            if full in self.named:
                schema, inner = self.named[full]
                return full, schema, inner
        return None

    def _arrow(self, schema: Any, ns: str, stack: tuple[str, ...]) -> pa.DataType:
        import pyarrow as pa

        if isinstance(schema, str):
            if schema in _AVRO_PRIMITIVES:
                return getattr(pa, _AVRO_PRIMITIVES[schema])()
            found = self._resolve(schema, ns)
            if found is None or found[0] in stack:
                return pa.string()
            return self._arrow(found[1], ns, stack)
        if isinstance(schema, list):
            members = [m for m in schema if m != "null"]
            return self._arrow(members[0], ns, stack) if len(members) == 1 else pa.string()
        return self._complex(schema, ns, stack)

    def _complex(self, schema: dict[str, Any], ns: str, stack: tuple[str, ...]) -> pa.DataType:
        import pyarrow as pa

        kind, logical = schema.get("type"), schema.get("logicalType")
        if logical == "date":
            return pa.date32()
        if logical in ("time-millis", "time-micros"):
            return pa.time64("us")
        if logical in _TIMESTAMPS:
            return pa.timestamp("us", tz=None if logical.startswith("local") else "UTC")
        if logical == "decimal" and kind in ("bytes", "fixed") and int(schema.get("precision", 0)) <= 38:
            return pa.decimal128(int(schema["precision"]), int(schema.get("scale", 0)))
        if logical in ("uuid", "decimal"):
            return pa.string()
        if kind in ("record", "error"):
            full, inner = self._full(schema["name"], schema.get("namespace", ns))
            if not schema.get("fields"):
                return pa.string()
            return pa.struct([pa.field(f["name"], self._arrow(f["type"], inner, (*stack, full)))
                              for f in schema["fields"]])
        if kind == "enum":
            return pa.string()
        if kind == "fixed":
            return pa.binary()
        if kind == "array":
            return pa.list_(self._arrow(schema["items"], ns, stack))
        if kind == "map":
            return pa.map_(pa.string(), self._arrow(schema["values"], ns, stack))
        return self._arrow(kind, ns, stack)

    def shape(self, value: Any) -> Any:
        """fastavro's value of the schema in the Python shape ``pa.array`` takes."""
        return self._shape(value, self.doc, "", ())

    def _shape(self, value: Any, schema: Any, ns: str, stack: tuple[str, ...]) -> Any:
        if value is None:
            return None
        if isinstance(schema, str):
            found = None if schema in _AVRO_PRIMITIVES else self._resolve(schema, ns)
            if found is None:
                return value if schema != "null" else None
            if found[0] in stack:
                return _json_text(value)
            return self._shape(value, found[1], ns, stack)
        if isinstance(schema, list):
            members = [m for m in schema if m != "null"]
            return self._shape(value, members[0], ns, stack) if len(members) == 1 else _json_text(value)
        kind, logical = schema.get("type"), schema.get("logicalType")
        if logical == "uuid" or (logical == "decimal" and int(schema.get("precision", 0)) > 38):
            return str(value)
        if kind in ("record", "error"):
            full, inner = self._full(schema["name"], schema.get("namespace", ns))
            if not schema.get("fields"):
                return _json_text(value)
            return {f["name"]: self._shape(value.get(f["name"]), f["type"], inner, (*stack, full))
                    for f in schema["fields"]}
        if kind == "array":
            return [self._shape(v, schema["items"], ns, stack) for v in value]
        if kind == "map":
            return [(k, self._shape(v, schema["values"], ns, stack)) for k, v in value.items()]
        if isinstance(kind, (str, list, dict)) and kind not in _AVRO_PRIMITIVES and kind not in ("enum", "fixed"):
            return self._shape(value, kind, ns, stack)
        return value


class JsonTypes:
    """A JSON Schema mapped to Arrow, its ``$ref``s followed: JSON pointers into the
    schema itself (``#/definitions/X``, ``#/$defs/X``) and into the schemas of its
    references, named as the reference names them (``point.json``,
    ``point.json#/$defs/X``). A recursive ``$ref``, and one that does not resolve (an
    anchor, a URL no reference names), maps to its JSON text, as Avro's recursive types
    do."""

    def __init__(self, doc: Any, references: Mapping[str, Any] | None = None) -> None:
        #: The documents a ``$ref`` can name: the schema itself as ``""``.
        self.documents = {**(references or {}), "": doc}
        # The root is on the stack from the start: a ``$ref: "#"`` recurses at once.
        self.arrow_type = self._arrow(doc, "", ("#",))

    def _resolve(self, ref: str, at: str) -> tuple[str, str, Any] | None:
        """``(the document, the key of the place, the schema there)`` that ``ref``
        names from document ``at``, or ``None``."""
        base, _, pointer = ref.partition("#")
        name = base or at
        node = self.documents.get(name)
        if node is None or (pointer and not pointer.startswith("/")):
            return None
        for part in pointer.split("/")[1:]:
            part = unquote(part).replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                return None
        return name, f"{name}#{pointer}", node

    def _arrow(self, schema: Any, at: str, stack: tuple[str, ...]) -> pa.DataType:
        import pyarrow as pa

        if not isinstance(schema, dict):
            return pa.string()
        if isinstance(schema.get("$ref"), str):
            found = self._resolve(schema["$ref"], at)
            if found is None or found[1] in stack:
                return pa.string()
            return self._arrow(found[2], found[0], (*stack, found[1]))
        kinds = schema.get("type")
        if isinstance(kinds, list):
            real = [k for k in kinds if k != "null"]
            kinds = real[0] if len(real) == 1 else None
        if kinds == "object" and isinstance(schema.get("properties"), dict) and schema["properties"]:
            return pa.struct([pa.field(k, self._arrow(v, at, stack)) for k, v in schema["properties"].items()])
        if kinds == "array" and isinstance(schema.get("items"), dict):
            return pa.list_(self._arrow(schema["items"], at, stack))
        return {"integer": pa.int64(), "number": pa.float64(), "boolean": pa.bool_(), "string": pa.string()}.get(
            kinds or "", pa.string())


def json_arrow_type(schema: Any, references: Mapping[str, Any] | None = None) -> pa.DataType:
    """The Arrow type of JSON Schema ``schema`` whose references' schemas are
    ``references`` (by the names the references give them)."""
    return JsonTypes(schema, references).arrow_type


def json_documents(registry: SchemaRegistry, refs: Sequence[Reference]) -> dict[str, Any]:
    """The JSON Schemas of ``refs`` and of their own references, by the name each
    reference gives its schema (what a ``$ref`` names)."""
    out: dict[str, Any] = {}

    def add(ref: Reference) -> None:
        if ref.name not in out:  # each name once: a cycle of references ends
            rs = registry.version(ref.subject, ref.version, deleted=True)
            out[ref.name] = json.loads(rs.schema.text)
            for sub in rs.schema.references:
                add(sub)

    for r in refs:
        add(r)
    return out


def _shape_json(value: Any, t: pa.DataType) -> Any:
    """A decoded JSON value in the Python shape ``pa.array`` takes for type ``t``."""
    import pyarrow as pa

    if value is None:
        return None
    if pa.types.is_struct(t):
        if not isinstance(value, dict):
            raise ValueError(f"expected an object, got {type(value).__name__}")
        return {f.name: _shape_json(value.get(f.name), f.type) for f in t}
    if pa.types.is_list(t):
        if not isinstance(value, list):
            raise ValueError(f"expected an array, got {type(value).__name__}")
        return [_shape_json(v, t.value_type) for v in value]
    if pa.types.is_string(t) and not isinstance(value, str):
        return json.dumps(value, separators=(",", ":"))
    return value


# -- decoding --------------------------------------------------------------------------

def fastavro_schema(registry: SchemaRegistry, schema_id: int) -> Any:
    """The Avro schema ``schema_id`` parsed by fastavro, with its references' named types."""
    import fastavro

    named: dict[str, Any] = {}
    schema = registry.schema(schema_id)
    for ref in registry.resolve(schema.references):
        fastavro.parse_schema(json.loads(ref.schema.text), named_schemas=named)
    return fastavro.parse_schema(json.loads(schema.text), named_schemas=named)


class _Undecodable(Exception):
    pass


class ValueColumns:
    """Decodes a topic's values to the typed column of its subject's latest schema."""

    def __init__(self, registry: SchemaRegistry, topic: str, mode: str) -> None:
        self.registry, self.topic, self.mode = registry, topic, mode
        latest = registry.version(subject_of(topic))
        self.reader_id = latest.schema_id
        self.reader = registry.parsed(latest.schema_id)
        kind = self.reader.schema.schema_type
        self.kind = kind
        self._avro_types: AvroTypes | None = None
        self._message: Any = None
        self._fastavro: dict[int, Any] = {}
        if kind == PROTOBUF:
            self._message = protobuf_messages.message_descriptor(
                protobuf_messages.file_descriptor(registry, self.reader_id), [0])
            self.arrow_type = protobuf_messages.arrow_type(self._message)
        elif kind == AVRO:
            refs = [json.loads(p.schema.text) for p in registry.resolve(self.reader.schema.references)]
            self._avro_types = AvroTypes(json.loads(self.reader.schema.text), refs)
            self.arrow_type = self._avro_types.arrow_type
        else:
            self.arrow_type = json_arrow_type(json.loads(self.reader.schema.text),
                                              json_documents(registry, self.reader.schema.references))

    def _avro_schema(self, schema_id: int) -> Any:
        got = self._fastavro.get(schema_id)
        if got is None:
            got = self._fastavro[schema_id] = fastavro_schema(self.registry, schema_id)
        return got

    def _payload(self, value: bytes) -> tuple[int, bytes]:
        if self.mode == "latest":
            return self.reader_id, value
        if len(value) < 5 or value[0] != MAGIC:
            raise _Undecodable("no schema id: the value does not start with byte 0 and a 4-byte id")
        return struct.unpack(">I", value[1:5])[0], value[5:]

    def _one(self, value: bytes | None) -> Any:
        if value is None:
            return None
        schema_id, payload = self._payload(value)
        try:
            writer = self.registry.parsed(schema_id)
        except LlogError as exc:
            raise _Undecodable(f"schema {schema_id}: {exc}") from None
        if writer.schema.schema_type != self.kind:
            raise _Undecodable(f"schema {schema_id} is {writer.schema.schema_type}, the subject's latest {self.kind}")
        if self.kind == PROTOBUF:
            indexes, pos = protobuf_messages.message_indexes(payload) if self.mode != "latest" else ([0], 0)
            if indexes != [0]:
                raise _Undecodable(f"message {indexes} is not the schema's first message, the table's")
            return protobuf_messages.shape(protobuf_messages.parse(self._message, payload[pos:]))
        if self.kind == AVRO:
            import fastavro

            record = fastavro.schemaless_reader(io.BytesIO(payload), self._avro_schema(schema_id),
                                                self._avro_schema(self.reader_id))
            assert self._avro_types is not None
            return self._avro_types.shape(record)
        return _shape_json(json.loads(payload), self.arrow_type)

    def decode(self, values: Sequence[bytes | None]) -> tuple[pa.Array, pa.Array]:
        """``(the values as a struct array, why each did not decode or null)``."""
        import pyarrow as pa

        rows: list[Any] = []
        errors: list[str | None] = []
        for v in values:
            try:
                rows.append(self._one(v))
                errors.append(None)
            except Exception as exc:  # fastavro, json and struct raise their own types for bad input
                rows.append(None)
                errors.append(f"{type(exc).__name__}: {exc}"[:500])
        try:
            typed = pa.array(rows, self.arrow_type)
        except Exception:  # Arrow refuses a row: ArrowException, TypeError, OverflowError, ...
            typed = self._row_by_row(rows, errors)
        return typed, pa.array(errors, pa.string())

    def _row_by_row(self, rows: list[Any], errors: list[str | None]) -> pa.Array:
        """Arrow refused the run: find the rows it refuses, null them with the reason."""
        import pyarrow as pa

        for i, row in enumerate(rows):
            try:
                pa.array([row], self.arrow_type)
            except Exception as exc:  # as above
                rows[i], errors[i] = None, f"{type(exc).__name__}: {exc}"[:500]
        return pa.array(rows, self.arrow_type)
