"""Reading a schema of each type, with the maintained library for it: Avro with
``avro`` (Apache Avro's Python implementation), JSON Schema with ``jsonschema``,
Protobuf with ``protobuf`` (a base64 FileDescriptorProto, as confluent-kafka's
serializers send it) or ``protoc`` from ``grpcio-tools`` (``.proto`` text). A schema
that does not parse is :class:`InvalidSchema` (Confluent's 42201)."""

from __future__ import annotations

import base64
import binascii
import json
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from llog.errors import InvalidSchema
from llog.registry.model import AVRO, JSON_SCHEMA, PROTOBUF, SCHEMA_TYPES, Schema

#: The name a ``.proto`` text schema is compiled under (its imports are its references).
PROTO_FILE = "schema.proto"
#: Seconds ``protoc`` may take on one schema.
PROTOC_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Parsed:
    """A schema read: the registry's record of it and the parsed form the
    compatibility checks and decoders use (an ``avro.schema.Schema``, a JSON Schema
    document, a ``FileDescriptorProto``)."""

    schema: Schema
    parsed: Any


def parse(text: str, schema_type: str, references: Sequence[Parsed], schema: Schema | None = None) -> Parsed:
    """Read ``text`` as a ``schema_type`` schema whose references are ``references``
    (already read, in dependency order). ``schema``: the record the parse is of (its
    references), filled in when absent."""
    if schema_type not in SCHEMA_TYPES:
        raise InvalidSchema(f"unknown schema type {schema_type!r}: one of {', '.join(SCHEMA_TYPES)}")
    try:
        return _parse(text, schema_type, references, schema or Schema(text, schema_type))
    except RecursionError:
        raise InvalidSchema("Invalid schema: nested too deeply") from None


def _parse(text: str, schema_type: str, references: Sequence[Parsed], base: Schema) -> Parsed:
    if schema_type == AVRO:
        doc = _json(text)
        return Parsed(Schema(json.dumps(doc, separators=(",", ":")), AVRO, base.references), _avro(doc, references))
    if schema_type == JSON_SCHEMA:
        doc = _json(text)
        _check_json_schema(doc)
        return Parsed(Schema(json.dumps(doc, separators=(",", ":")), JSON_SCHEMA, base.references), doc)
    fd = _proto(text, references)
    return Parsed(Schema(text, PROTOBUF, base.references, base64.b64encode(fd.SerializeToString()).decode()), fd)


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, TypeError) as exc:
        raise InvalidSchema(f"Invalid schema: not JSON ({exc})") from None


def _avro(doc: Any, references: Sequence[Parsed]) -> Any:
    import avro.errors
    import avro.name
    import avro.schema

    names = avro.name.Names()
    try:
        for ref in references:
            avro.schema.make_avsc_object(json.loads(ref.schema.text), names)
        return avro.schema.make_avsc_object(doc, names)
    except (avro.errors.AvroException, TypeError, KeyError, AttributeError) as exc:
        raise InvalidSchema(f"Invalid schema: {exc}") from None


def _check_json_schema(doc: Any) -> None:
    import jsonschema.exceptions
    import jsonschema.validators

    if not isinstance(doc, (dict, bool)):
        raise InvalidSchema("Invalid schema: a JSON Schema is an object or a boolean")
    try:
        jsonschema.validators.validator_for(doc).check_schema(doc)  # type: ignore[arg-type]
    except jsonschema.exceptions.SchemaError as exc:
        raise InvalidSchema(f"Invalid schema: {exc.message}") from None


def _proto(text: str, references: Sequence[Parsed]) -> Any:

    fd = _serialized(text)
    if fd is not None:
        return fd
    return _compile(text, references)


def _serialized(text: str) -> Any:
    """A base64 FileDescriptorProto, or ``None`` if ``text`` is not one."""
    from google.protobuf import descriptor_pb2
    from google.protobuf.message import DecodeError

    stripped = text.strip()
    if not stripped or any(c.isspace() for c in stripped):
        return None
    try:
        raw = base64.b64decode(stripped, validate=True)
        fd = descriptor_pb2.FileDescriptorProto.FromString(raw)
    except (binascii.Error, ValueError, DecodeError):
        return None
    return fd if fd.name else None


def _compile(text: str, references: Sequence[Parsed]) -> Any:
    """``protoc`` on ``.proto`` text, its imports given as the references' descriptors."""
    from google.protobuf import descriptor_pb2

    try:
        include = resources.files("grpc_tools") / "_proto"
    except ModuleNotFoundError:
        raise InvalidSchema("Protobuf schemas as .proto text need grpcio-tools (pip install grpcio-tools); "
                            "send a base64 FileDescriptorProto instead") from None
    with tempfile.TemporaryDirectory(prefix="llog-proto-") as tmp:
        d = Path(tmp)
        (d / PROTO_FILE).write_text(text)
        deps = descriptor_pb2.FileDescriptorSet()
        for ref in references:
            deps.file.append(ref.parsed)
        args = [sys.executable, "-m", "grpc_tools.protoc", f"-I{d}", f"-I{include}",
                f"--descriptor_set_out={d / 'out.pb'}", PROTO_FILE]
        if references:
            (d / "deps.pb").write_bytes(deps.SerializeToString())
            args.insert(3, f"--descriptor_set_in={d / 'deps.pb'}")
        try:
            done = subprocess.run(args, capture_output=True, text=True, timeout=PROTOC_TIMEOUT_S, cwd=d)
        except subprocess.TimeoutExpired:
            raise InvalidSchema(f"Invalid schema: protoc took over {PROTOC_TIMEOUT_S:.0f} s") from None
        if done.returncode != 0:
            reason = (done.stderr or done.stdout).strip().replace(str(d) + "/", "")
            raise InvalidSchema(f"Invalid schema: {reason}")
        out = descriptor_pb2.FileDescriptorSet.FromString((d / "out.pb").read_bytes())
    return out.file[-1]
