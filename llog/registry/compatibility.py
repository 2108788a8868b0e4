"""Can a reader of one schema read data written with another? Per schema type, and
the levels built on it (:class:`Compatibility`).

* Avro: Apache Avro's own reader/writer check (``avro.compatibility``), the rules of
  the Avro specification's schema resolution.
* JSON Schema: no maintained library decides it, so these rules, after Confluent's:
  every instance the writer's schema admits must satisfy the reader's. Types may only
  widen (``integer`` to ``number``); a property the reader requires must be required
  by the writer; a property the reader adds must not meet the writer's open content
  model's other properties unless the writer's model is closed
  (``additionalProperties: false``); a closed reader must list every writer property;
  enums may only grow; ``maxLength``, ``maximum``, ``maxItems`` may only loosen, their
  ``min`` forms too; ``items`` and common properties are compared recursively.
* Protobuf: wire compatibility of the messages the writer's file defines: a message may
  not be removed, a field number may not change to an incompatible type (the varint
  group ``int32 uint32 int64 uint64 bool enum``, ``sint32 sint64``, ``fixed32
  sfixed32``, ``fixed64 sfixed64``, ``string bytes`` are each one), nor between
  repeated and singular. Fields may be added, removed and renamed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llog.registry.formats import Parsed
from llog.registry.model import AVRO, JSON_SCHEMA, Compatibility


def incompatibilities(level: Compatibility, new: Parsed, earlier: Sequence[Parsed]) -> list[str]:
    """Why ``new`` breaks ``level`` against ``earlier`` (oldest first); empty if it
    does not. Non-transitive levels look at the latest only."""
    if level is Compatibility.NONE or not earlier:
        return []
    against = list(earlier) if level.transitive else [earlier[-1]]
    out: list[str] = []
    for old in reversed(against):
        if new.schema.schema_type != old.schema.schema_type:
            out.append(f"schema type changed from {old.schema.schema_type} to {new.schema.schema_type}")
            continue
        if level.backward:
            out += [f"BACKWARD: {m}" for m in can_read(new, old)]
        if level.forward:
            out += [f"FORWARD: {m}" for m in can_read(old, new)]
    return out


def can_read(reader: Parsed, writer: Parsed) -> list[str]:
    """Why data written with ``writer`` cannot be read with ``reader`` (empty: it can)."""
    kind = reader.schema.schema_type
    if kind == AVRO:
        return _avro(reader.parsed, writer.parsed)
    if kind == JSON_SCHEMA:
        return _json(reader.parsed, writer.parsed, "#")
    return _proto(reader.parsed, writer.parsed)


def _avro(reader: Any, writer: Any) -> list[str]:
    from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

    result = ReaderWriterCompatibilityChecker().get_compatibility(reader, writer)  # type: ignore[no-untyped-call]
    if result.compatibility is SchemaCompatibilityType.compatible:
        return []
    where = ", ".join(sorted(result.locations or ())) or "/"
    return [f"{m} (at {where})" for m in sorted(result.messages or ())] or [f"incompatible at {where}"]


# -- JSON Schema ------------------------------------------------------------------

_LOOSEN_UP = ("maxLength", "maximum", "exclusiveMaximum", "maxItems", "maxProperties")
_LOOSEN_DOWN = ("minLength", "minimum", "exclusiveMinimum", "minItems", "minProperties")


def _types(s: dict[str, Any]) -> set[str] | None:
    t = s.get("type")
    if t is None:
        return None
    return {t} if isinstance(t, str) else set(t)


def _json(reader: Any, writer: Any, at: str) -> list[str]:
    if reader is True or reader == {}:
        return []
    if writer is True or writer == {}:
        return [f"{at}: the writer's schema admits anything, the reader's does not"]
    if reader is False or writer is False:
        return [] if writer is False else [f"{at}: the reader's schema admits nothing"]
    out: list[str] = []
    rt, wt = _types(reader), _types(writer)
    if rt is not None:
        wider = rt | ({"integer"} if "number" in rt else set())
        if wt is None or not wt <= wider:
            out.append(f"{at}: type {sorted(wt) if wt else 'any'} narrowed to {sorted(rt)}")
    if "enum" in reader and not set(map(repr, writer.get("enum", [None]))) <= set(map(repr, reader["enum"])):
        out.append(f"{at}: enum values removed")
    for k in _LOOSEN_UP:
        if k in reader and (k not in writer or writer[k] > reader[k]):
            out.append(f"{at}: {k} tightened")
    for k in _LOOSEN_DOWN:
        if k in reader and (k not in writer or writer[k] < reader[k]):
            out.append(f"{at}: {k} tightened")
    if reader.get("pattern") not in (None, writer.get("pattern")):
        out.append(f"{at}: pattern changed")
    out += _json_object(reader, writer, at)
    if isinstance(reader.get("items"), (dict, bool)):
        out += _json(reader["items"], writer.get("items", True), f"{at}/items")
    return out


def _json_object(reader: dict[str, Any], writer: dict[str, Any], at: str) -> list[str]:
    out: list[str] = []
    rprops, wprops = reader.get("properties", {}), writer.get("properties", {})
    for name in sorted(set(reader.get("required", ())) - set(writer.get("required", ()))):
        out.append(f"{at}: property '{name}' required")
    writer_closed = writer.get("additionalProperties") is False
    for name, sub in rprops.items():
        if name in wprops:
            out += _json(sub, wprops[name], f"{at}/properties/{name}")
        elif not writer_closed:
            out += [f"{m} (property '{name}' added to an open content model)"
                    for m in _json(sub, writer.get("additionalProperties", True), f"{at}/properties/{name}")]
    if reader.get("additionalProperties") is False:
        out += [f"{at}: property '{name}' removed from a closed content model" for name in wprops if name not in rprops]
        if not writer_closed:
            out.append(f"{at}: content model closed")
    return out


# -- Protobuf ---------------------------------------------------------------------

_WIRE_GROUPS = (
    {"TYPE_INT32", "TYPE_UINT32", "TYPE_INT64", "TYPE_UINT64", "TYPE_BOOL", "TYPE_ENUM"},
    {"TYPE_SINT32", "TYPE_SINT64"},
    {"TYPE_FIXED32", "TYPE_SFIXED32"},
    {"TYPE_FIXED64", "TYPE_SFIXED64"},
    {"TYPE_STRING", "TYPE_BYTES"},
)


def _messages(fd: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}

    def walk(prefix: str, msgs: Any) -> None:
        for m in msgs:
            name = f"{prefix}.{m.name}" if prefix else m.name
            out[name] = m
            walk(name, m.nested_type)

    walk(fd.package, fd.message_type)
    return out


def _proto(reader: Any, writer: Any) -> list[str]:
    from google.protobuf import descriptor_pb2

    kind = descriptor_pb2.FieldDescriptorProto.Type.Name
    repeated = descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
    out: list[str] = []
    rmsgs = _messages(reader)
    for name, wm in _messages(writer).items():
        rm = rmsgs.get(name)
        if rm is None:
            out.append(f"message {name} removed")
            continue
        rfields = {f.number: f for f in rm.field}
        for wf in wm.field:
            rf = rfields.get(wf.number)
            if rf is None:
                continue
            wk, rk = kind(wf.type), kind(rf.type)
            same = wk == rk and (wf.type_name == rf.type_name or wk not in ("TYPE_MESSAGE", "TYPE_GROUP", "TYPE_ENUM"))
            if not same and not any(wk in g and rk in g for g in _WIRE_GROUPS):
                out.append(f"{name} field {wf.number} changed from {wk} {wf.type_name} to {rk} {rf.type_name}".rstrip())
            if (wf.label == repeated) != (rf.label == repeated):
                out.append(f"{name} field {wf.number} changed between repeated and singular")
    return out
