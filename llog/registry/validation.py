"""Checking produced values against a topic's schema (``value_validation``, spec §14.1).

A value of a ``schema-id`` topic must carry Confluent's prefix (byte 0, a 4-byte id)
naming a schema registered under the topic's subject ``{topic}-value``, and decode with
it; a value of a ``latest`` topic must decode with the subject's latest schema. Avro
values must decode to their last byte (fastavro); JSON values must parse and validate
(jsonschema, a ``$ref`` to another subject resolved to the referenced schema); Protobuf
values must parse as the message the prefix's message indexes name. A null value (a
tombstone) always passes.
"""

from __future__ import annotations

import io
import json
import struct
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from llog.registry import protobuf_messages
from llog.registry.columns import fastavro_schema, json_documents, subject_of
from llog.registry.model import AVRO, JSON_SCHEMA
from llog.registry.store import SchemaRegistry

#: Seconds a topic's subject ids are trusted before an unknown id reads them again.
SUBJECT_IDS_TTL_S = 5.0
#: Characters of a reason kept (it travels in a header and an error message).
MAX_REASON = 300

Check = Callable[[bytes], None]


class ValueValidator:
    """Finds the values a topic's schema refuses; thread-safe, caches per schema id."""

    def __init__(self, registry: SchemaRegistry) -> None:
        self.registry = registry
        self._checks: dict[int, Check] = {}
        self._subject_ids: dict[str, tuple[float, frozenset[int], int | None]] = {}
        self._lock = threading.Lock()

    def problems(self, topic: str, mode: str, values: Sequence[bytes | None]) -> list[tuple[int, str]]:
        """``(index, reason)`` of each value of ``values`` the schema refuses."""
        out: list[tuple[int, str]] = []
        for i, v in enumerate(values):
            if v is None:
                continue
            try:
                self._check(topic, mode, v)
            except Exception as exc:  # decoders raise their own types for bad input
                out.append((i, f"{type(exc).__name__}: {exc}"[:MAX_REASON]))
        return out

    def _check(self, topic: str, mode: str, value: bytes) -> None:
        if mode == "latest":
            latest = self._ids(topic, refresh=False)[1]
            if latest is None:
                raise LookupError(f"no schema is registered under {subject_of(topic)}")
            self._checker(latest)(value)
            return
        if len(value) < 5 or value[0] != 0:
            raise ValueError("no schema id: the value does not start with byte 0 and a 4-byte id")
        schema_id = struct.unpack(">I", value[1:5])[0]
        if schema_id not in self._ids(topic, refresh=False)[0] and schema_id not in self._ids(topic, refresh=True)[0]:
            raise LookupError(f"schema id {schema_id} is not registered under {subject_of(topic)}")
        self._checker(schema_id)(value[5:])

    def _ids(self, topic: str, *, refresh: bool) -> tuple[frozenset[int], int | None]:
        """The ids of the subject's versions not deleted, and the latest's."""
        with self._lock:
            got = self._subject_ids.get(topic)
        if got is not None and not refresh and time.monotonic() - got[0] < SUBJECT_IDS_TTL_S:
            return got[1], got[2]
        ids = [v.schema_id for v in self.registry.subject_versions(subject_of(topic)) if not v.deleted]
        entry = (time.monotonic(), frozenset(ids), ids[-1] if ids else None)
        with self._lock:
            self._subject_ids[topic] = entry
        return entry[1], entry[2]

    def _checker(self, schema_id: int) -> Check:
        with self._lock:
            got = self._checks.get(schema_id)
        if got is None:
            parsed = self.registry.parsed(schema_id)
            kind = parsed.schema.schema_type
            if kind == AVRO:
                got = _avro_check(self.registry, schema_id)
            elif kind == JSON_SCHEMA:
                got = _json_check(parsed.parsed, json_documents(self.registry, parsed.schema.references))
            else:
                got = _protobuf_check(self.registry, schema_id)
            with self._lock:
                self._checks[schema_id] = got
        return got


def _avro_check(registry: SchemaRegistry, schema_id: int) -> Check:
    import fastavro

    parsed = fastavro_schema(registry, schema_id)

    def check(payload: bytes) -> None:
        buf = io.BytesIO(payload)
        fastavro.schemaless_reader(buf, parsed, None)
        if buf.tell() != len(payload):
            raise ValueError(f"{len(payload) - buf.tell()} bytes after the Avro value")
    return check


def _json_check(doc: Any, references: Mapping[str, Any]) -> Check:
    """A check of values against JSON Schema ``doc``; its ``$ref``s to other subjects
    resolve to ``references`` (schemas by the names their references give), as
    confluent-kafka's serializer resolves them, never over the network."""
    import jsonschema.validators
    import referencing
    import referencing.jsonschema

    cls = jsonschema.validators.validator_for(doc)
    # A referenced schema without ``$schema`` is read in the referring schema's dialect.
    dialect = cls.META_SCHEMA.get("$id") or cls.META_SCHEMA.get("id", "")  # draft 4 names it "id"
    spec = referencing.jsonschema.specification_with(dialect, default=referencing.jsonschema.DRAFT202012)
    resources = referencing.Registry().with_resources(
        (name, referencing.Resource.from_contents(d, default_specification=spec)) for name, d in references.items())
    validator = cls(doc, registry=resources)

    def check(payload: bytes) -> None:
        error = jsonschema.exceptions.best_match(validator.iter_errors(json.loads(payload)))
        if error is not None:
            raise ValueError(f"{error.message} (at {'/'.join(map(str, error.absolute_path)) or 'the root'})")
    return check


def _protobuf_check(registry: SchemaRegistry, schema_id: int) -> Check:
    file_desc = protobuf_messages.file_descriptor(registry, schema_id)

    def check(payload: bytes) -> None:
        indexes, pos = protobuf_messages.message_indexes(payload)
        protobuf_messages.parse(protobuf_messages.message_descriptor(file_desc, indexes), payload[pos:])
    return check
