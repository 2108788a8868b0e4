"""The schema registry's records: a schema as registered, a subject's version of it,
and the compatibility levels (Confluent's Schema Registry model, spec §14)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from llog.errors import InvalidCompatibilityLevel, InvalidSchema

#: Schema types, as Confluent's API names them (``AVRO`` when a request names none).
AVRO, JSON_SCHEMA, PROTOBUF = "AVRO", "JSON", "PROTOBUF"
SCHEMA_TYPES = (JSON_SCHEMA, PROTOBUF, AVRO)


class Compatibility(str, Enum):
    """What a new version must satisfy against the earlier ones: BACKWARD (readers of
    the new schema read data of the latest), FORWARD (readers of the latest read data of
    the new one), FULL (both), their TRANSITIVE forms (against every version), NONE."""

    NONE = "NONE"
    BACKWARD = "BACKWARD"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD = "FORWARD"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL = "FULL"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"

    @classmethod
    def parse(cls, value: object) -> Compatibility:
        try:
            if not isinstance(value, str):
                raise ValueError(value)
            return cls(value.upper())
        except ValueError:
            raise InvalidCompatibilityLevel(
                f"Invalid compatibility level. Valid values are none, backward, forward, full, backward_transitive, "
                f"forward_transitive, and full_transitive; got {value!r}") from None

    @property
    def transitive(self) -> bool:
        return self.value.endswith("_TRANSITIVE")

    @property
    def backward(self) -> bool:
        return self.value.startswith(("BACKWARD", "FULL"))

    @property
    def forward(self) -> bool:
        return self.value.startswith(("FORWARD", "FULL"))


#: The level of a subject without one of its own, and of the registry until set.
DEFAULT_COMPATIBILITY = Compatibility.BACKWARD


@dataclass(frozen=True)
class Reference:
    """An import of another subject's version: ``name`` as the schema refers to it
    (an Avro full name, a JSON Schema ``$ref`` URL, a ``.proto`` import path)."""

    name: str
    subject: str
    version: int

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "subject": self.subject, "version": self.version}

    @classmethod
    def from_json(cls, d: Any) -> Reference:
        if not isinstance(d, dict) or not isinstance(d.get("name"), str) or not isinstance(d.get("subject"), str) \
                or not isinstance(d.get("version"), int) or isinstance(d.get("version"), bool):
            raise InvalidSchema(f"a reference is {{name, subject, version}}, got {d!r}")
        return cls(d["name"], d["subject"], d["version"])


@dataclass(frozen=True)
class Schema:
    """A schema as the registry keeps it under an id: its text (Avro and JSON Schema
    as compact JSON; Protobuf as given, ``.proto`` text or a base64
    FileDescriptorProto), its type and its references. ``descriptor``: a Protobuf
    schema's base64 FileDescriptorProto (``format=serialized``)."""

    text: str
    schema_type: str = AVRO
    references: tuple[Reference, ...] = ()
    descriptor: str | None = None

    def encode(self) -> bytes:
        """The etcd value at ``_schemas/ids/{id}`` (spec §14)."""
        d: dict[str, object] = {"schema": self.text, "schemaType": self.schema_type}
        if self.references:
            d["references"] = [r.to_json() for r in self.references]
        if self.descriptor is not None:
            d["descriptor"] = self.descriptor
        return json.dumps(d, separators=(",", ":"), sort_keys=True).encode()

    @classmethod
    def decode(cls, raw: bytes) -> Schema:
        d = json.loads(raw)
        return cls(d["schema"], d.get("schemaType", AVRO),
                   tuple(Reference.from_json(r) for r in d.get("references", ())), d.get("descriptor"))

    def to_api(self, fmt: str | None = None) -> dict[str, object]:
        """The schema as Confluent's API answers it (``schemaType`` omitted for Avro)."""
        text = self.descriptor if fmt == "serialized" and self.descriptor is not None else self.text
        d: dict[str, object] = {"schema": text}
        if self.schema_type != AVRO:
            d["schemaType"] = self.schema_type
        if self.references:
            d["references"] = [r.to_json() for r in self.references]
        return d


@dataclass(frozen=True)
class SubjectVersion:
    """One version of a subject: the schema id, and whether it was soft-deleted."""

    subject: str
    version: int
    schema_id: int
    deleted: bool = False

    def encode(self) -> bytes:
        """The etcd value at ``_schemas/subjects/{subject}/{version}``."""
        return json.dumps({"id": self.schema_id, "deleted": self.deleted}, separators=(",", ":"),
                          sort_keys=True).encode()

    @classmethod
    def decode(cls, subject: str, version: int, raw: bytes) -> SubjectVersion:
        d = json.loads(raw)
        return cls(subject, version, int(d["id"]), bool(d.get("deleted", False)))


@dataclass(frozen=True)
class RegisteredSchema:
    """A subject's version with its schema, as ``GET /subjects/{s}/versions/{v}`` answers."""

    subject: str
    version: int
    schema_id: int
    schema: Schema
    deleted: bool = field(default=False, compare=False)

    def to_api(self, fmt: str | None = None) -> dict[str, object]:
        return {"subject": self.subject, "version": self.version, "id": self.schema_id, **self.schema.to_api(fmt)}
