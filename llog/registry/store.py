"""The schema registry in etcd (spec §14): ids, subjects and their versions, and the
compatibility levels, under ``{root}/_schemas/``.

Registering is two compare-and-swap transactions, each retried from a fresh read when
another registrant got in first:

1. the id: a schema already known (by its fingerprint: type, text and references)
   keeps its id; a new one takes ``next-id``, requiring that ``next-id`` is unchanged
   and the fingerprint is still absent, so two registrants never share or skip an id;
2. the version: one past the subject's highest, requiring that key is absent, after
   the compatibility check against the versions read in the same attempt, so a
   version is always checked against every version registered before it.

Ids are global and never reused; a schema deleted from every subject keeps its id.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Sequence
from urllib.parse import unquote

from llog.connection import Connection
from llog.errors import (
    CasConflict,
    IncompatibleSchema,
    InvalidSchema,
    InvalidVersion,
    ReferenceExists,
    SchemaNotFound,
    SubjectConfigNotFound,
    SubjectNotFound,
    SubjectNotSoftDeleted,
    SubjectSoftDeleted,
    VersionNotFound,
    VersionNotSoftDeleted,
    VersionSoftDeleted,
)
from llog.etcd.operations import Delete, Put, absent, mod_revision_is
from llog.registry.compatibility import incompatibilities
from llog.registry.formats import Parsed, parse
from llog.registry.model import (
    AVRO,
    DEFAULT_COMPATIBILITY,
    Compatibility,
    Reference,
    RegisteredSchema,
    Schema,
    SubjectVersion,
)
from llog.state.keys import prefix_range_end

log = logging.getLogger(__name__)

#: Attempts at a contended registration before :class:`CasConflict`.
MAX_ATTEMPTS = 32
MAX_VERSION = 2**31 - 1


def fingerprint(schema: Schema) -> str:
    """What makes two registrations the same schema (and so the same id): its type,
    references and text; Avro and JSON Schema with their keys sorted, so a client that
    orders a schema's keys another way finds the same id."""
    text = schema.text
    if schema.schema_type != "PROTOBUF":
        text = json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
    ident = json.dumps([schema.schema_type, text, [r.to_json() for r in schema.references]])
    return hashlib.sha256(ident.encode()).hexdigest()


def parse_version(value: int | str) -> int | None:
    """A version as the API names it: a number, or ``latest`` / ``-1`` (``None``)."""
    if value in ("latest", "-1", -1):
        return None
    try:
        v = int(value)
    except (TypeError, ValueError):
        raise InvalidVersion(str(value)) from None
    if not 1 <= v <= MAX_VERSION:
        raise InvalidVersion(str(value))
    return v


class SchemaRegistry:
    """A Confluent-compatible schema registry kept in etcd; what the broker's REST API
    serves, usable from the SDK alike.

    >>> reg = SchemaRegistry(conn)                                          # doctest: +SKIP
    >>> reg.register("clicks-value", '{"type": "string"}').schema_id
    1
    """

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.keys = conn.keys
        self._parsed: dict[int, Parsed] = {}  # schema id → parsed; ids never change
        self._lock = threading.Lock()

    # -- schemas by id ------------------------------------------------------------
    def schema(self, schema_id: int) -> Schema:
        """The schema with ``schema_id``; :class:`SchemaNotFound` if none."""
        kv = self.conn.etcd.get(self.keys.schema(schema_id))
        if kv is None:
            raise SchemaNotFound(f"Schema {schema_id} not found")
        return Schema.decode(kv.value)

    def parsed(self, schema_id: int) -> Parsed:
        """The schema with ``schema_id``, parsed (cached: an id's schema never changes)."""
        with self._lock:
            got = self._parsed.get(schema_id)
        if got is None:
            schema = self.schema(schema_id)
            got = parse(schema.text, schema.schema_type, self.resolve(schema.references), schema)
            with self._lock:
                self._parsed[schema_id] = got
        return got

    def resolve(self, refs: Sequence[Reference]) -> list[Parsed]:
        """The references parsed, each after its own references (dependency order)."""
        out: list[Parsed] = []
        seen: set[int] = set()

        def add(ref: Reference, depth: int) -> None:
            if depth > 32:
                raise InvalidSchema(f"references nest deeper than 32 at {ref.name}")
            try:
                rs = self.version(ref.subject, ref.version, deleted=True)
            except (SubjectNotFound, VersionNotFound):
                raise InvalidSchema(f"Invalid schema: reference {ref.name} names {ref.subject} version "
                                    f"{ref.version}, which does not exist") from None
            for sub in rs.schema.references:
                add(sub, depth + 1)
            if rs.schema_id not in seen:
                seen.add(rs.schema_id)
                out.append(self.parsed(rs.schema_id))

        for r in refs:
            add(r, 0)
        return out

    def read(self, text: str, schema_type: str = AVRO, references: Sequence[Reference] = ()) -> Parsed:
        """Parse a schema as a registration would (:class:`InvalidSchema` if it does not)."""
        refs = tuple(references)
        return parse(text, schema_type, self.resolve(refs), Schema(text, schema_type, refs))

    def subjects_of(self, schema_id: int, *, deleted: bool = False) -> list[SubjectVersion]:
        """Every subject version that holds ``schema_id``."""
        self.schema(schema_id)
        return [v for v in self._all_versions(deleted) if v.schema_id == schema_id]

    # -- subjects -----------------------------------------------------------------
    def _all_versions(self, deleted: bool) -> list[SubjectVersion]:
        prefix = self.keys.schema_subjects_prefix()
        out: list[SubjectVersion] = []
        for kv in self.conn.etcd.scan(prefix, prefix_range_end(prefix)):
            quoted, _, version = kv.key[len(prefix):].partition("/")
            v = SubjectVersion.decode(unquote(quoted), int(version), kv.value)
            if deleted or not v.deleted:
                out.append(v)
        return out

    def subjects(self, *, deleted: bool = False, prefix: str = "") -> list[str]:
        """Subjects with a version (soft-deleted ones too, with ``deleted``)."""
        return sorted({v.subject for v in self._all_versions(deleted) if v.subject.startswith(prefix)})

    def subject_versions(self, subject: str) -> list[SubjectVersion]:
        """Every version of ``subject``, soft-deleted ones too, oldest first."""
        prefix = self.keys.schema_subject_prefix(subject)
        kvs = self.conn.etcd.range(prefix, prefix_range_end(prefix))
        return [SubjectVersion.decode(subject, int(kv.key[len(prefix):]), kv.value) for kv in kvs]

    def versions(self, subject: str, *, deleted: bool = False) -> list[int]:
        """The subject's versions; :class:`SubjectNotFound` if it has none."""
        out = [v.version for v in self.subject_versions(subject) if deleted or not v.deleted]
        if not out:
            raise SubjectNotFound(subject)
        return out

    def version(self, subject: str, version: int | str = "latest", *, deleted: bool = False) -> RegisteredSchema:
        """One version of ``subject`` (``latest``: its highest not soft-deleted)."""
        wanted = parse_version(version)
        all_versions = self.subject_versions(subject)
        live = [v for v in all_versions if deleted or not v.deleted]
        if not live:
            raise SubjectNotFound(subject)
        if wanted is None:
            sv = [v for v in live if not v.deleted][-1:] or live[-1:]
        else:
            sv = [v for v in live if v.version == wanted]
        if not sv:
            raise VersionNotFound(subject, version)
        return RegisteredSchema(subject, sv[0].version, sv[0].schema_id, self.schema(sv[0].schema_id), sv[0].deleted)

    # -- registering --------------------------------------------------------------
    def register(self, subject: str, text: str, schema_type: str = AVRO,
                 references: Sequence[Reference] = ()) -> RegisteredSchema:
        """Register a schema under ``subject``: the version that already holds it, or a
        new version after the subject's compatibility check (:class:`IncompatibleSchema`);
        :class:`InvalidSchema` if it does not parse."""
        new = self.read(text, schema_type, references)
        fp = fingerprint(new.schema)
        for _ in range(MAX_ATTEMPTS):
            versions = self.subject_versions(subject)
            schema_id = self._id_of(fp)
            same = [v for v in versions if not v.deleted and v.schema_id == schema_id]
            if same:
                return RegisteredSchema(subject, same[0].version, same[0].schema_id, new.schema)
            live = [v for v in versions if not v.deleted]
            level = self.compatibility(subject, fallback=True)
            why = incompatibilities(level, new, [self.parsed(v.schema_id) for v in live])
            if why:
                raise IncompatibleSchema(subject, level.value, why)
            if schema_id is None:
                schema_id = self._new_id(fp, new.schema)
                if schema_id is None:
                    continue
            version = max((v.version for v in versions), default=0) + 1
            key = self.keys.schema_subject_version(subject, version)
            if self.conn.etcd.txn([absent(key)], [Put(key, SubjectVersion(subject, version, schema_id).encode())]
                                  ).succeeded:
                log.info("registered schema %d as %s version %d", schema_id, subject, version)
                return RegisteredSchema(subject, version, schema_id, new.schema)
        raise CasConflict(f"the versions of schema subject {subject!r}", MAX_ATTEMPTS)

    def _id_of(self, fp: str) -> int | None:
        kv = self.conn.etcd.get(self.keys.schema_fingerprint(fp))
        return int(kv.value) if kv is not None else None

    def _new_id(self, fp: str, schema: Schema) -> int | None:
        """Give ``schema`` the next id; ``None`` if another registrant moved first."""
        keys, etcd = self.keys, self.conn.etcd
        kv = etcd.get(keys.schema_next_id())
        schema_id = int(kv.value) if kv is not None else 1
        guard = mod_revision_is(keys.schema_next_id(), kv.mod_revision if kv is not None else 0)
        fkey = keys.schema_fingerprint(fp)
        ok = etcd.txn([guard, absent(fkey)], [
            Put(keys.schema_next_id(), str(schema_id + 1).encode()),
            Put(keys.schema(schema_id), schema.encode()),
            Put(fkey, str(schema_id).encode()),
        ]).succeeded
        return schema_id if ok else None

    def lookup(self, subject: str, text: str, schema_type: str = AVRO,
               references: Sequence[Reference] = (), *, deleted: bool = False) -> RegisteredSchema:
        """The version of ``subject`` that holds this schema (:class:`SchemaNotFound`)."""
        versions = [v for v in self.subject_versions(subject) if deleted or not v.deleted]
        if not versions:  # before parsing: a lookup under no subject costs no parse
            raise SubjectNotFound(subject)
        new = self.read(text, schema_type, references)
        schema_id = self._id_of(fingerprint(new.schema))
        for v in versions:
            if v.schema_id == schema_id:
                return RegisteredSchema(subject, v.version, v.schema_id, self.schema(v.schema_id), v.deleted)
        raise SchemaNotFound("Schema not found")

    def check(self, subject: str, text: str, schema_type: str = AVRO, references: Sequence[Reference] = (),
              version: int | str | None = "latest") -> list[str]:
        """Why this schema would break the subject's level against ``version`` (``None``:
        the versions the level names); empty if it would not."""
        new = self.read(text, schema_type, references)
        level = self.compatibility(subject, fallback=True)
        if version is None:
            live = [v for v in self.subject_versions(subject) if not v.deleted]
            return incompatibilities(level, new, [self.parsed(v.schema_id) for v in live])
        try:
            rs = self.version(subject, version)
        except SubjectNotFound:
            if parse_version(version) is None:
                return []  # nothing to be incompatible with (as Confluent answers)
            raise
        return incompatibilities(Compatibility(level.value.replace("_TRANSITIVE", "")), new,
                                 [self.parsed(rs.schema_id)])

    # -- deleting -----------------------------------------------------------------
    def delete_version(self, subject: str, version: int | str, *, permanent: bool = False) -> int:
        """Soft-delete one version (``permanent``: delete a soft-deleted one for good)."""
        rs = self.version(subject, version, deleted=True)
        if rs.deleted and not permanent:
            raise VersionSoftDeleted(f"Subject '{subject}' Version {rs.version} was soft deleted. Set "
                                     "permanent=true to delete permanently")
        if permanent and not rs.deleted:
            raise VersionNotSoftDeleted(f"Subject '{subject}' Version {rs.version} was not deleted first "
                                        "before being permanently deleted")
        self._delete([SubjectVersion(subject, rs.version, rs.schema_id, rs.deleted)], permanent)
        return rs.version

    def delete_subject(self, subject: str, *, permanent: bool = False) -> list[int]:
        """Soft-delete every version of ``subject`` (``permanent``: all soft-deleted
        versions for good, with its compatibility level); the versions deleted."""
        every = self.subject_versions(subject)
        if not every:
            raise SubjectNotFound(subject)
        versions = [v for v in every if permanent or not v.deleted]
        if not versions:
            raise SubjectSoftDeleted(f"Subject '{subject}' was soft deleted. Set permanent=true to delete "
                                     "permanently")
        if permanent and any(not v.deleted for v in versions):
            raise SubjectNotSoftDeleted(f"Subject '{subject}' was not deleted first before being permanently "
                                        "deleted")
        self._delete(versions, permanent)
        if permanent:
            self.conn.etcd.delete_range(self.keys.schema_config(subject))
        return [v.version for v in versions]

    def _delete(self, versions: list[SubjectVersion], permanent: bool) -> None:
        for v in versions:
            users = self.referenced_by(v.subject, v.version)
            if users:
                raise ReferenceExists(f"One or more references exist to the schema {{subject={v.subject}, "
                                      f"version={v.version}}}: schema ids {users}")
        key = self.keys.schema_subject_version
        ops = [Delete(key(v.subject, v.version)) if permanent else
               Put(key(v.subject, v.version), SubjectVersion(v.subject, v.version, v.schema_id, True).encode())
               for v in versions]
        self.conn.etcd.txn([], ops)

    def referenced_by(self, subject: str, version: int) -> list[int]:
        """Ids of the schemas a subject still holds (soft-deleted versions too) that
        reference ``subject`` ``version``: an id no subject holds any more pins nothing."""
        held = sorted({v.schema_id for v in self._all_versions(deleted=True)})
        return [i for i in held if any(r.subject == subject and r.version == version
                                       for r in self.schema(i).references)]

    # -- compatibility levels -----------------------------------------------------
    def compatibility(self, subject: str | None = None, *, fallback: bool = False) -> Compatibility:
        """The level of ``subject`` (``fallback``: the registry's if it has none; else
        :class:`SubjectConfigNotFound`), or the registry's (``None``)."""
        kv = self.conn.etcd.get(self.keys.schema_config(subject))
        if kv is not None:
            return Compatibility.parse(kv.value.decode())
        if subject is not None and not fallback:
            raise SubjectConfigNotFound(subject)
        return self.compatibility() if subject is not None else DEFAULT_COMPATIBILITY

    def set_compatibility(self, level: Compatibility | str, subject: str | None = None) -> Compatibility:
        lv = Compatibility.parse(level.value if isinstance(level, Compatibility) else level)
        self.conn.etcd.put(self.keys.schema_config(subject), lv.value.encode())
        return lv

    def delete_compatibility(self, subject: str | None = None) -> Compatibility:
        """Drop the level of ``subject`` (or the registry's, back to BACKWARD); the old one."""
        old = self.compatibility(subject)
        self.conn.etcd.delete_range(self.keys.schema_config(subject))
        return old
