"""Protobuf values in Confluent's wire format: the message classes of a registered
schema (its file and its references' in one descriptor pool, well-known types from
protobuf's own), the message indexes that name which message a value is, and a
message as the Python shape of its Arrow type (spec §7.6)."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from llog.registry.store import SchemaRegistry

if TYPE_CHECKING:
    import pyarrow as pa


#: protobuf's modules of the well-known types: importing one puts its file in the
#: default descriptor pool, which holds no file until its module was imported (a server
#: that never imported ``timestamp_pb2`` could not find ``google/protobuf/timestamp.proto``).
_WELL_KNOWN_MODULES = ("any_pb2", "api_pb2", "descriptor_pb2", "duration_pb2", "empty_pb2", "field_mask_pb2",
                       "source_context_pb2", "struct_pb2", "timestamp_pb2", "type_pb2", "wrappers_pb2")
WELL_KNOWN_PREFIX = "google/protobuf/"


def well_known_file(name: str) -> Any:
    """The ``FileDescriptorProto`` of a well-known type's file (``google/protobuf/…``)."""
    import importlib

    from google.protobuf import descriptor_pb2, descriptor_pool

    for module in _WELL_KNOWN_MODULES:
        importlib.import_module(f"google.protobuf.{module}")
    proto = descriptor_pb2.FileDescriptorProto()
    try:
        descriptor_pool.Default().FindFileByName(name).CopyToProto(proto)
    except KeyError:
        raise KeyError(f"{name} is not one of protobuf's well-known files") from None
    return proto


def file_descriptor(registry: SchemaRegistry, schema_id: int) -> Any:
    """The schema's ``FileDescriptor``, in a pool of its own with its references and the
    well-known files any of them imports (and those files' own imports)."""
    from google.protobuf import descriptor_pool

    pool = descriptor_pool.DescriptorPool()
    fd = registry.parsed(schema_id).parsed
    deps = [p.parsed for p in registry.resolve(registry.schema(schema_id).references)]
    added = {f.name for f in deps}

    def add_well_known(name: str) -> None:
        if name in added or not name.startswith(WELL_KNOWN_PREFIX):
            return
        proto = well_known_file(name)
        for dep in proto.dependency:
            add_well_known(dep)
        pool.Add(proto)
        added.add(name)

    for name in sorted({d for f in (*deps, fd) for d in f.dependency}):
        add_well_known(name)
    for f in (*deps, fd):
        pool.Add(f)
    return pool.FindFileByName(fd.name)


def message_descriptor(file_desc: Any, indexes: list[int]) -> Any:
    """The message ``indexes`` name in ``file_desc`` (the first index a top-level one)."""
    desc = file_desc.message_types_by_name[list(file_desc.message_types_by_name)[indexes[0]]]
    for i in indexes[1:]:
        desc = desc.nested_types[i]
    return desc


def parse(desc: Any, payload: bytes) -> Any:
    from google.protobuf import message_factory

    msg = message_factory.GetMessageClass(desc)()
    msg.ParseFromString(payload)
    return msg


def message_indexes(payload: bytes) -> tuple[list[int], int]:
    """Confluent's message indexes before a Protobuf value (zigzag varints: a count,
    then that many indexes; a lone 0 means ``[0]``) and where the message starts."""
    def varint(pos: int) -> tuple[int, int]:
        shift = result = 0
        while True:
            if pos >= len(payload) or shift > 63:
                raise ValueError("truncated message indexes")
            b = payload[pos]
            result |= (b & 0x7F) << shift
            pos += 1
            if not b & 0x80:
                return (result >> 1) ^ -(result & 1), pos
            shift += 7

    count, pos = varint(0)
    if count == 0:
        return [0], pos
    if not 0 < count <= 64:
        raise ValueError(f"{count} message indexes")
    out = []
    for _ in range(count):
        i, pos = varint(pos)
        out.append(i)
    return out, pos


# -- as Arrow --------------------------------------------------------------------------

def _scalar(field: Any) -> pa.DataType:
    import pyarrow as pa
    from google.protobuf.descriptor import FieldDescriptor as F

    t = field.type
    if t in (F.TYPE_DOUBLE, F.TYPE_FLOAT):
        return pa.float64()
    if t == F.TYPE_BOOL:
        return pa.bool_()
    if t == F.TYPE_STRING or t == F.TYPE_ENUM:
        return pa.string()
    if t == F.TYPE_BYTES:
        return pa.binary()
    return pa.int64()


_TIMESTAMP = "google.protobuf.Timestamp"
#: The wrapper types: a nullable column of the wrapped scalar (unset: null).
_WRAPPERS = frozenset(f"google.protobuf.{t}Value" for t in (
    "Double", "Float", "Int64", "UInt64", "Int32", "UInt32", "Bool", "String", "Bytes"))
#: Schemaless JSON (Struct, Value, ListValue): a column of its JSON text.
_JSON_TYPES = frozenset({"google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue"})


def arrow_type(desc: Any, stack: tuple[str, ...] = ()) -> pa.DataType:
    """The Arrow type of message ``desc``: a struct of its fields (ints as int64, enums
    as names, maps as maps, a recursive message as its JSON text; a field with presence
    null while unset). Well-known types: a Timestamp as a timestamp, a wrapper as its
    scalar, Struct/Value/ListValue as JSON text, Empty as the text ``{}``; the others
    (Duration, Any, FieldMask) as structs of their fields (docs/schema-registry.md,
    "Schema features")."""
    import pyarrow as pa

    name = desc.full_name
    if name == _TIMESTAMP:
        return pa.timestamp("us", tz="UTC")
    if name in _WRAPPERS:
        return _scalar(desc.fields_by_name["value"])
    if name in _JSON_TYPES or name in stack or not desc.fields:
        return pa.string()
    return pa.struct([pa.field(f.name, _field_type(f, (*stack, desc.full_name))) for f in desc.fields])


def _field_type(f: Any, stack: tuple[str, ...]) -> pa.DataType:
    import pyarrow as pa

    if f.message_type is not None and f.message_type.GetOptions().map_entry:
        key, value = f.message_type.fields_by_name["key"], f.message_type.fields_by_name["value"]
        return pa.map_(_scalar(key), _one_type(value, stack))
    t = _one_type(f, stack)
    return pa.list_(t) if _repeated(f) else t


def _one_type(f: Any, stack: tuple[str, ...]) -> pa.DataType:
    return arrow_type(f.message_type, stack) if f.message_type is not None else _scalar(f)


def _repeated(f: Any) -> bool:
    if hasattr(f, "is_repeated"):  # protobuf >= 6; ``label`` before it
        return bool(f.is_repeated)
    return bool(f.label == f.LABEL_REPEATED)


def shape(msg: Any, stack: tuple[str, ...] = ()) -> Any:
    """``msg`` in the Python shape ``pa.array`` takes for :func:`arrow_type`."""
    desc = msg.DESCRIPTOR
    name = desc.full_name
    if name == _TIMESTAMP:
        return msg.ToDatetime().replace(tzinfo=datetime.timezone.utc)
    if name in _WRAPPERS:
        return msg.value
    if name in _JSON_TYPES or name in stack or not desc.fields:
        from google.protobuf import json_format

        return json_format.MessageToJson(msg, indent=None)
    inner = (*stack, desc.full_name)
    out: dict[str, Any] = {}
    for f in desc.fields:
        value = getattr(msg, f.name)
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            vf = f.message_type.fields_by_name["value"]
            out[f.name] = [(k, _one(vf, v, inner)) for k, v in value.items()]
        elif _repeated(f):
            out[f.name] = [_one(f, v, inner) for v in value]
        elif _has_presence(f) and not msg.HasField(f.name):
            out[f.name] = None  # unset, told apart from its default: a oneof's other members
        else:
            out[f.name] = _one(f, value, inner)
    return out


def _has_presence(f: Any) -> bool:
    """Whether an unset ``f`` is told from its default value: a message field, a
    ``oneof`` member, a proto3 ``optional`` or proto2 field (not a proto3 plain scalar)."""
    if hasattr(f, "has_presence"):
        return bool(f.has_presence)
    return f.message_type is not None or f.containing_oneof is not None


def _one(f: Any, value: Any, stack: tuple[str, ...]) -> Any:
    if f.message_type is not None:
        return shape(value, stack)
    if f.enum_type is not None:
        named = f.enum_type.values_by_number.get(value)
        return named.name if named is not None else str(value)
    return value
