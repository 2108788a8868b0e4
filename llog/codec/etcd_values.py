"""msgpack values stored in etcd (protocol/README.md, "etcd values").

Each value is a msgpack map with the fields below, written in this order so the bytes
are deterministic (the golden vectors pin them). Unknown fields are ignored on read,
so later versions can add fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal, cast

import msgpack

from llog.codec import parquet_body

OPEN: Final = "OPEN"
FENCED: Final = "FENCED"
WAL: Final = "WAL"
COMPACTED: Final = "COMPACTED"


class MetaFormatError(ValueError):
    """An etcd value does not decode to the expected schema."""


def _pack(obj: dict[str, Any]) -> bytes:
    out: bytes = msgpack.packb(obj)
    return out


def _unpack(raw: bytes) -> dict[str, Any]:
    try:
        obj = msgpack.unpackb(raw)
    except (ValueError, msgpack.UnpackException) as exc:
        raise MetaFormatError(f"not msgpack: {exc}") from exc
    if not isinstance(obj, dict):
        raise MetaFormatError(f"expected a map, got {type(obj).__name__}")
    return obj


def _field(obj: dict[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    try:
        v = obj[name]
    except KeyError:
        raise MetaFormatError(f"missing field {name!r}") from None
    if not isinstance(v, kind) or (kind is int and isinstance(v, bool)):
        raise MetaFormatError(f"field {name!r} has type {type(v).__name__}")
    return v


def _optional_str(obj: dict[str, Any], name: str) -> str | None:
    v = obj.get(name)
    if v is not None and not isinstance(v, str):
        raise MetaFormatError(f"field {name!r} has type {type(v).__name__}")
    return v


@dataclass(frozen=True)
class Pending:
    """A committed append whose index key is not written yet."""

    append_id: str
    start_offset: int
    end_offset: int
    msg_count: int
    data_key: str
    byte_offset: int
    byte_length: int
    created_at_ms: int
    max_timestamp: int

    def to_map(self) -> dict[str, Any]:
        return {
            "append_id": self.append_id,
            "start_offset": self.start_offset,
            "end_offset": self.end_offset,
            "msg_count": self.msg_count,
            "data_key": self.data_key,
            "byte_offset": self.byte_offset,
            "byte_length": self.byte_length,
            "created_at_ms": self.created_at_ms,
            "max_timestamp": self.max_timestamp,
        }

    @classmethod
    def from_map(cls, m: dict[str, Any]) -> Pending:
        p = cls(
            append_id=_field(m, "append_id", str),
            start_offset=_field(m, "start_offset", int),
            end_offset=_field(m, "end_offset", int),
            msg_count=_field(m, "msg_count", int),
            data_key=_field(m, "data_key", str),
            byte_offset=_field(m, "byte_offset", int),
            byte_length=_field(m, "byte_length", int),
            created_at_ms=_field(m, "created_at_ms", int),
            max_timestamp=_field(m, "max_timestamp", int),
        )
        if p.end_offset - p.start_offset + 1 != p.msg_count or p.msg_count <= 0:
            raise MetaFormatError("pending offsets do not match msg_count")
        return p

    def index_entry(self) -> IndexEntry:
        """The index entry that materializes this pending append."""
        return IndexEntry(
            kind=WAL,
            msg_count=self.msg_count,
            data_key=self.data_key,
            byte_offset=self.byte_offset,
            byte_length=self.byte_length,
            created_at_ms=self.created_at_ms,
            max_timestamp=self.max_timestamp,
            append_id=self.append_id,
        )


@dataclass(frozen=True)
class Control:
    """``meta/control``: the partition's commit point."""

    log_state: Literal["OPEN", "FENCED"] = OPEN
    next_offset: int = 0
    log_start_offset: int = 0
    pending: Pending | None = None

    def encode(self) -> bytes:
        return _pack(
            {
                "log_state": self.log_state,
                "next_offset": self.next_offset,
                "log_start_offset": self.log_start_offset,
                "pending": None if self.pending is None else self.pending.to_map(),
            }
        )

    @classmethod
    def decode(cls, raw: bytes) -> Control:
        m = _unpack(raw)
        state = _field(m, "log_state", str)
        if state not in (OPEN, FENCED):
            raise MetaFormatError(f"unknown log_state {state!r}")
        pm = m.get("pending")
        if pm is not None and not isinstance(pm, dict):
            raise MetaFormatError("pending is neither null nor a map")
        c = cls(
            log_state=state,
            next_offset=_field(m, "next_offset", int),
            log_start_offset=_field(m, "log_start_offset", int),
            pending=None if pm is None else Pending.from_map(pm),
        )
        if c.pending is not None and c.pending.end_offset != c.next_offset - 1:
            raise MetaFormatError("pending does not end at next_offset - 1")
        return c

    def with_changes(self, **changes: Any) -> Control:
        return replace(self, **changes)


@dataclass(frozen=True)
class IndexEntry:
    """``index/{end_offset:020d}``: records ``[end - msg_count + 1, end]`` live in the slice."""

    kind: Literal["WAL", "COMPACTED"]
    msg_count: int
    data_key: str
    byte_offset: int
    byte_length: int
    created_at_ms: int
    max_timestamp: int
    append_id: str | None = None
    #: ``"parquet-v1"`` for a COMPACTED Parquet file; absent for every other body.
    encoding: str | None = None

    def encode(self) -> bytes:
        m: dict[str, Any] = {
            "kind": self.kind,
            "msg_count": self.msg_count,
            "data_key": self.data_key,
            "byte_offset": self.byte_offset,
            "byte_length": self.byte_length,
            "created_at_ms": self.created_at_ms,
            "max_timestamp": self.max_timestamp,
        }
        if self.append_id is not None:
            m["append_id"] = self.append_id
        if self.encoding is not None:  # omitted when absent, like append_id
            m["encoding"] = self.encoding
        return _pack(m)

    @classmethod
    def decode(cls, raw: bytes) -> IndexEntry:
        m = _unpack(raw)
        kind = _field(m, "kind", str)
        if kind not in (WAL, COMPACTED):
            raise MetaFormatError(f"unknown index entry kind {kind!r}")
        aid = m.get("append_id")
        if aid is not None and not isinstance(aid, str):
            raise MetaFormatError("append_id is not a string")
        e = cls(
            kind=kind,
            msg_count=_field(m, "msg_count", int),
            data_key=_field(m, "data_key", str),
            byte_offset=_field(m, "byte_offset", int),
            byte_length=_field(m, "byte_length", int),
            created_at_ms=_field(m, "created_at_ms", int),
            max_timestamp=_field(m, "max_timestamp", int),
            append_id=aid,
            encoding=_encoding(m),
        )
        if e.msg_count <= 0 or e.byte_length <= 0 or e.byte_offset < 0:
            raise MetaFormatError("index entry has a non-positive count or length")
        return e


#: Values of ``meta/topic``'s ``compacted_format`` (absent: ``bytes-batch-v1``).
COMPACTED_FORMATS = ("parquet",)
#: Values of ``meta/topic``'s ``table`` (absent: no table); a table needs Parquet files.
TABLE_FORMATS = ("iceberg",)
#: Values of ``meta/topic``'s ``value_schema`` (absent: values are opaque bytes): how a
#: value names its schema in the registry (subject ``{topic}-value``): Confluent's wire
#: format (a zero byte, the 4-byte schema id, the encoded value), or none (the
#: subject's latest schema).
VALUE_SCHEMA_MODES = ("schema-id", "latest")
#: Values of ``meta/topic``'s ``value_validation`` (absent: values are not checked at
#: produce): a batch with a value its schema refuses is refused whole, or its bad
#: values go to the dead-letter topic ``{topic}~dlq`` (spec §14.1).
VALUE_VALIDATIONS = ("refuse", "dlq")
#: The suffix of a topic's dead-letter topic.
DLQ_SUFFIX = "~dlq"
#: A topic's ``cleanup_policy`` as stored (absent: ``delete``, retention only).
CLEANUP_POLICIES = ("compact", "compact,delete")
#: Kafka's default ``delete.retention.ms``: a day.
DELETE_RETENTION_MS = 86_400_000
#: The ``encoding`` a COMPACTED index entry and a compaction record name for a Parquet
#: file (absent: ``bytes-batch-v1``), so a table or a Parquet reader can find the files
#: from the index alone.
PARQUET_ENCODING: Final = parquet_body.ENCODING


def _encoding(m: dict[str, Any]) -> str | None:
    enc = m.get("encoding")
    if enc is not None and enc != PARQUET_ENCODING:
        raise MetaFormatError(f"encoding {enc!r} is not {PARQUET_ENCODING!r}")
    return cast("str | None", enc)


@dataclass(frozen=True)
class TopicMeta:
    """``meta/topic``: a topic's definition."""

    name: str
    partitions: int
    created_at_ms: int
    retention_ms: int | None = None
    retention_bytes: int | None = None
    #: What the compactor writes: ``None`` for ``bytes-batch-v1``, or ``"parquet"``.
    compacted_format: str | None = None
    #: ``"iceberg"``: the compacted Parquet files also form an Iceberg table.
    table: str | None = None
    #: Kafka's ``cleanup.policy``: ``None`` for ``delete`` (retention only), ``"compact"``
    #: or ``"compact,delete"`` (records need a key; retention applies only with delete).
    cleanup_policy: str | None = None
    #: Kafka's ``min.compaction.lag.ms`` (None: 0): records this new are never removed.
    min_compaction_lag_ms: int | None = None
    #: Kafka's ``delete.retention.ms`` (None: :data:`DELETE_RETENTION_MS`): how long a
    #: tombstone is kept once key compaction has passed it.
    delete_retention_ms: int | None = None
    #: How values name their schema (:data:`VALUE_SCHEMA_MODES`; ``None``: they do not):
    #: a table topic's table then has the decoded values as typed columns.
    value_schema: str | None = None
    #: What a broker does with a produced value its schema refuses
    #: (:data:`VALUE_VALIDATIONS`; ``None``: it does not check); needs ``value_schema``.
    value_validation: str | None = None
    #: The ``create_revision`` of the record's key when read from etcd (0: not read):
    #: which incarnation of the name this is. Commits compare it (the topic guard,
    #: spec §4.5), so nothing is written under a deleted topic's keys. Not encoded.
    revision: int = field(default=0, compare=False)

    @property
    def compaction_lag_ms(self) -> int:
        return self.min_compaction_lag_ms or 0

    @property
    def tombstone_retention_ms(self) -> int:
        return DELETE_RETENTION_MS if self.delete_retention_ms is None else self.delete_retention_ms

    @property
    def compacted(self) -> bool:
        """Whether the topic is compacted by key (its records must have a key)."""
        return self.cleanup_policy is not None

    @property
    def retained(self) -> bool:
        """Whether retention applies (the policy includes ``delete``)."""
        return self.cleanup_policy in (None, "compact,delete")

    def encode(self) -> bytes:
        m: dict[str, Any] = {
            "name": self.name,
            "partitions": self.partitions,
            "created_at_ms": self.created_at_ms,
            "retention_ms": self.retention_ms,
            "retention_bytes": self.retention_bytes,
        }
        if self.compacted_format is not None:  # omitted when absent: older records stay byte for byte
            m["compacted_format"] = self.compacted_format
        if self.table is not None:
            m["table"] = self.table
        if self.cleanup_policy is not None:
            m["cleanup_policy"] = self.cleanup_policy
        if self.min_compaction_lag_ms is not None:
            m["min_compaction_lag_ms"] = self.min_compaction_lag_ms
        if self.delete_retention_ms is not None:
            m["delete_retention_ms"] = self.delete_retention_ms
        if self.value_schema is not None:
            m["value_schema"] = self.value_schema
        if self.value_validation is not None:
            m["value_validation"] = self.value_validation
        return _pack(m)

    @classmethod
    def decode(cls, raw: bytes, revision: int = 0) -> TopicMeta:
        """The record ``raw``; ``revision``: its key's ``create_revision``."""
        m = _unpack(raw)
        rms = m.get("retention_ms")
        rb = m.get("retention_bytes")
        lag = m.get("min_compaction_lag_ms")
        drm = m.get("delete_retention_ms")
        for name, v in (("retention_ms", rms), ("retention_bytes", rb), ("min_compaction_lag_ms", lag),
                        ("delete_retention_ms", drm)):
            if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
                raise MetaFormatError(f"{name} is not an int or null")
        fmt = m.get("compacted_format")
        if fmt is not None and fmt not in COMPACTED_FORMATS:
            raise MetaFormatError(f"compacted_format {fmt!r} is not one of {COMPACTED_FORMATS}")
        table = m.get("table")
        if table is not None and table not in TABLE_FORMATS:
            raise MetaFormatError(f"table {table!r} is not one of {TABLE_FORMATS}")
        if table is not None and fmt != "parquet":
            raise MetaFormatError(f"table {table!r} needs compacted_format 'parquet'")
        policy = m.get("cleanup_policy")
        if policy is not None and policy not in CLEANUP_POLICIES:
            raise MetaFormatError(f"cleanup_policy {policy!r} is not one of {CLEANUP_POLICIES}")
        mode = m.get("value_schema")
        if mode is not None and mode not in VALUE_SCHEMA_MODES:
            raise MetaFormatError(f"value_schema {mode!r} is not one of {VALUE_SCHEMA_MODES}")
        validation = m.get("value_validation")
        if validation is not None and (validation not in VALUE_VALIDATIONS or mode is None):
            raise MetaFormatError(f"value_validation {validation!r} is not one of {VALUE_VALIDATIONS} "
                                  "with a value_schema")
        return cls(
            name=_field(m, "name", str),
            partitions=_field(m, "partitions", int),
            created_at_ms=_field(m, "created_at_ms", int),
            retention_ms=rms,
            retention_bytes=rb,
            compacted_format=fmt,
            table=table,
            cleanup_policy=policy,
            min_compaction_lag_ms=lag,
            delete_retention_ms=drm,
            value_schema=mode,
            value_validation=validation,
            revision=revision,
        )


@dataclass(frozen=True)
class CleanCursor:
    """``meta/clean-cursor`` of a compacted topic's partition (spec §10.2): every offset
    below ``offset`` was key-compacted against the keys up to it; ``tombstones`` is how
    many tombstones the last pass kept below it (a pass that may drop them runs once
    they are old enough, even without new records)."""

    offset: int
    tombstones: int = 0

    def encode(self) -> bytes:
        return _pack({"offset": self.offset, "tombstones": self.tombstones})

    @classmethod
    def decode(cls, raw: bytes) -> CleanCursor:
        m = _unpack(raw)
        return cls(offset=_field(m, "offset", int), tombstones=_field(m, "tombstones", int))


@dataclass(frozen=True)
class CompactionCursor:
    """``meta/compaction-cursor``: every offset below ``offset`` is compacted."""

    offset: int

    def encode(self) -> bytes:
        return _pack({"offset": self.offset})

    @classmethod
    def decode(cls, raw: bytes) -> CompactionCursor:
        return cls(offset=_field(_unpack(raw), "offset", int))


@dataclass(frozen=True)
class DamagedRange:
    """``damaged/{end_offset:020d}``: a WAL entry whose body does not decode, which the
    compactor passed (its index entry stays; readers of it get ``CorruptBlob``). The
    end offset is the key's."""

    start_offset: int
    data_key: str
    byte_offset: int
    byte_length: int
    reason: str
    found_at_ms: int
    owner: str

    def encode(self) -> bytes:
        return _pack(
            {
                "start_offset": self.start_offset,
                "data_key": self.data_key,
                "byte_offset": self.byte_offset,
                "byte_length": self.byte_length,
                "reason": self.reason,
                "found_at_ms": self.found_at_ms,
                "owner": self.owner,
            }
        )

    @classmethod
    def decode(cls, raw: bytes) -> DamagedRange:
        m = _unpack(raw)
        d = cls(
            start_offset=_field(m, "start_offset", int),
            data_key=_field(m, "data_key", str),
            byte_offset=_field(m, "byte_offset", int),
            byte_length=_field(m, "byte_length", int),
            reason=_field(m, "reason", str),
            found_at_ms=_field(m, "found_at_ms", int),
            owner=_field(m, "owner", str),
        )
        if d.start_offset < 0 or d.byte_offset < 0 or d.byte_length < 1:
            raise MetaFormatError("damaged range has a negative offset or an empty slice")
        return d


COMPACTION_STAGES = ("WRITING_COMPACTED_INDEX", "DELETING_OLD", "UPDATING_CURSOR")


@dataclass(frozen=True)
class CompactionRecord:
    """``meta/compaction``: an in-flight compaction, enough for any process to finish it.

    Records ``[start_offset, end_offset]`` were rewritten into ``data_key``;
    ``last_wal_start_offset`` is the first offset of the last WAL entry replaced, so
    recovery can tell whether ``index/{end_offset}`` still holds that WAL entry or
    already the compacted one.
    """

    stage: str
    start_offset: int
    end_offset: int
    last_wal_start_offset: int
    msg_count: int
    data_key: str
    byte_length: int
    max_timestamp: int
    created_at_ms: int
    owner: str
    #: ``"parquet-v1"`` when ``data_key`` is a Parquet file; absent for ``bytes-batch-v1``.
    encoding: str | None = None
    #: A key compaction (spec §10.2): the ``data_key`` of the COMPACTED entry at
    #: ``index/{end_offset}`` this replaces (``last_wal_start_offset`` is then that
    #: entry's first offset), and the cursor does not move; absent for a compaction.
    replaces: str | None = None

    def encode(self) -> bytes:
        m: dict[str, Any] = {
            "stage": self.stage,
            "start_offset": self.start_offset,
            "end_offset": self.end_offset,
            "last_wal_start_offset": self.last_wal_start_offset,
            "msg_count": self.msg_count,
            "data_key": self.data_key,
            "byte_length": self.byte_length,
            "max_timestamp": self.max_timestamp,
            "created_at_ms": self.created_at_ms,
            "owner": self.owner,
        }
        if self.encoding is not None:
            m["encoding"] = self.encoding
        if self.replaces is not None:
            m["replaces"] = self.replaces
        return _pack(m)

    @classmethod
    def decode(cls, raw: bytes) -> CompactionRecord:
        m = _unpack(raw)
        stage = _field(m, "stage", str)
        if stage not in COMPACTION_STAGES:
            raise MetaFormatError(f"unknown compaction stage {stage!r}")
        return cls(
            stage=stage,
            start_offset=_field(m, "start_offset", int),
            end_offset=_field(m, "end_offset", int),
            last_wal_start_offset=_field(m, "last_wal_start_offset", int),
            msg_count=_field(m, "msg_count", int),
            data_key=_field(m, "data_key", str),
            byte_length=_field(m, "byte_length", int),
            max_timestamp=_field(m, "max_timestamp", int),
            created_at_ms=_field(m, "created_at_ms", int),
            owner=_field(m, "owner", str),
            encoding=_encoding(m),
            replaces=_optional_str(m, "replaces"),
        )

    def at_stage(self, stage: str) -> CompactionRecord:
        return replace(self, stage=stage)


@dataclass(frozen=True)
class GroupOffset:
    """``_groups/{group}/offsets/{topic}/{partition}``: the group's committed offset —
    the next offset the group will consume."""

    offset: int
    epoch: int
    member: str
    updated_at_ms: int

    def encode(self) -> bytes:
        return _pack(
            {
                "offset": self.offset,
                "epoch": self.epoch,
                "member": self.member,
                "updated_at_ms": self.updated_at_ms,
            }
        )

    @classmethod
    def decode(cls, raw: bytes) -> GroupOffset:
        m = _unpack(raw)
        return cls(
            offset=_field(m, "offset", int),
            epoch=_field(m, "epoch", int),
            member=_field(m, "member", str),
            updated_at_ms=_field(m, "updated_at_ms", int),
        )


@dataclass(frozen=True)
class GroupEpoch:
    """``_groups/{group}/epoch``: bumped by every exclusive consumer that starts; commits
    carrying an older epoch are rejected."""

    epoch: int
    owner: str
    started_at_ms: int

    def encode(self) -> bytes:
        return _pack({"epoch": self.epoch, "owner": self.owner, "started_at_ms": self.started_at_ms})

    @classmethod
    def decode(cls, raw: bytes) -> GroupEpoch:
        m = _unpack(raw)
        return cls(
            epoch=_field(m, "epoch", int),
            owner=_field(m, "owner", str),
            started_at_ms=_field(m, "started_at_ms", int),
        )


@dataclass(frozen=True)
class GroupMember:
    """One member of a Kafka consumer group's generation (:class:`GroupGeneration`)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    #: The protocols it joined with (name, metadata), and its assignment from the leader.
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes

    def to_map(self) -> dict[str, Any]:
        return {"member_id": self.member_id, "group_instance_id": self.group_instance_id,
                "client_id": self.client_id, "session_timeout_ms": self.session_timeout_ms,
                "rebalance_timeout_ms": self.rebalance_timeout_ms,
                "protocols": [[n, md] for n, md in self.protocols], "assignment": self.assignment}

    @classmethod
    def from_map(cls, m: Any) -> GroupMember:
        if not isinstance(m, dict):
            raise MetaFormatError(f"a group member is a map, got {type(m).__name__}")
        instance = m.get("group_instance_id")
        if instance is not None and not isinstance(instance, str):
            raise MetaFormatError("field 'group_instance_id' must be a string or nil")
        protocols = _field(m, "protocols", list)
        if not all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) and isinstance(p[1], bytes)
                   for p in protocols):
            raise MetaFormatError("field 'protocols' must be [name, metadata] pairs")
        return cls(_field(m, "member_id", str), instance, _field(m, "client_id", str),
                   _field(m, "session_timeout_ms", int), _field(m, "rebalance_timeout_ms", int),
                   tuple((p[0], p[1]) for p in protocols), _field(m, "assignment", bytes))


@dataclass(frozen=True)
class GroupGeneration:
    """``_groups/{group}/kafka-generation``: a Kafka consumer group's generation as its
    coordinator completed it (the epoch it bumped, the protocol, the leader, every
    member with its assignment), so that another broker taking over coordination
    carries on with the same generation instead of making every member join again."""

    epoch: int
    protocol_type: str
    protocol: str
    leader: str
    members: tuple[GroupMember, ...]

    def encode(self) -> bytes:
        return _pack({"epoch": self.epoch, "protocol_type": self.protocol_type, "protocol": self.protocol,
                      "leader": self.leader, "members": [m.to_map() for m in self.members]})

    @classmethod
    def decode(cls, raw: bytes) -> GroupGeneration:
        m = _unpack(raw)
        return cls(_field(m, "epoch", int), _field(m, "protocol_type", str), _field(m, "protocol", str),
                   _field(m, "leader", str), tuple(GroupMember.from_map(x) for x in _field(m, "members", list)))


@dataclass(frozen=True)
class SequencedBatch:
    """One of an idempotent producer's recent batches on a partition (spec §8.7): its
    first sequence, offsets and content digest (``None``: written before digests)."""

    sequence: int
    start_offset: int
    end_offset: int
    digest: int | None

    @property
    def msg_count(self) -> int:
        return self.end_offset - self.start_offset + 1

    def to_array(self) -> list[int | None]:
        return [self.sequence, self.start_offset, self.end_offset, self.digest]

    @classmethod
    def from_array(cls, a: object) -> SequencedBatch:
        if not isinstance(a, list) or len(a) != 4:
            raise MetaFormatError("a recent batch is not an array of 4 fields")
        seq, start, end, digest = a
        if any(not isinstance(v, int) or isinstance(v, bool) for v in (seq, start, end)) or not (
            digest is None or (isinstance(digest, int) and not isinstance(digest, bool))
        ):
            raise MetaFormatError("a recent batch has a field of the wrong type")
        if seq < 0 or start < 0 or end < start:
            raise MetaFormatError("a recent batch has a negative sequence or an empty range")
        return cls(seq, start, end, digest)


#: Batches an idempotent producer's state remembers per partition, as Kafka does
#: (``max.in.flight.requests.per.connection`` ≤ 5 keeps a retry inside the window).
PRODUCER_WINDOW = 5


@dataclass(frozen=True)
class ProducerState:
    """``partitions/{p}/producers/{producer_id}``: the last batches an idempotent
    producer committed to the partition, written in the same transaction as the commit.
    A retry of any of them (same epoch, sequence, record count and content digest)
    gets its offsets back instead of appending again."""

    sequence: int
    start_offset: int
    end_offset: int
    append_id: str
    data_key: str
    updated_at_ms: int
    #: The producer's epoch: a batch of an older one is fenced.
    epoch: int = 0
    #: The last batch's content digest (``None``: written before digests existed).
    digest: int | None = None
    #: Up to ``PRODUCER_WINDOW - 1`` batches before the last, oldest first.
    recent: tuple[SequencedBatch, ...] = ()

    @property
    def msg_count(self) -> int:
        return self.end_offset - self.start_offset + 1

    @property
    def last(self) -> SequencedBatch:
        return SequencedBatch(self.sequence, self.start_offset, self.end_offset, self.digest)

    def window(self) -> tuple[SequencedBatch, ...]:
        """The remembered batches, oldest first, the last one included."""
        return (*self.recent, self.last)

    def encode(self) -> bytes:
        return _pack(
            {
                "sequence": self.sequence,
                "start_offset": self.start_offset,
                "end_offset": self.end_offset,
                "append_id": self.append_id,
                "data_key": self.data_key,
                "updated_at_ms": self.updated_at_ms,
                "epoch": self.epoch,
                "digest": self.digest,
                "recent": [b.to_array() for b in self.recent],
            }
        )

    @classmethod
    def decode(cls, raw: bytes) -> ProducerState:
        m = _unpack(raw)
        epoch = m.get("epoch", 0)
        digest = m.get("digest")
        recent = m.get("recent") or []
        if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
            raise MetaFormatError("producer state's epoch is not an int >= 0")
        if digest is not None and (not isinstance(digest, int) or isinstance(digest, bool)):
            raise MetaFormatError("producer state's digest is neither null nor an int")
        if not isinstance(recent, list) or len(recent) >= PRODUCER_WINDOW:
            raise MetaFormatError(f"producer state's recent batches are not an array of < {PRODUCER_WINDOW}")
        s = cls(
            sequence=_field(m, "sequence", int),
            start_offset=_field(m, "start_offset", int),
            end_offset=_field(m, "end_offset", int),
            append_id=_field(m, "append_id", str),
            data_key=_field(m, "data_key", str),
            updated_at_ms=_field(m, "updated_at_ms", int),
            epoch=epoch,
            digest=digest,
            recent=tuple(SequencedBatch.from_array(b) for b in recent),
        )
        if s.sequence < 0 or s.start_offset < 0 or s.end_offset < s.start_offset:
            raise MetaFormatError("producer state has a negative sequence or an empty range")
        return s
