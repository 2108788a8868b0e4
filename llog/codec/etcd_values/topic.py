"""``meta/topic``: a topic's definition (:class:`TopicMeta`) and the values its
fields may take."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from llog.codec.etcd_values.maps import MetaFormatError, field_of, pack, unpack

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
        return pack(m)

    @classmethod
    def decode(cls, raw: bytes, revision: int = 0) -> TopicMeta:
        """The record ``raw``; ``revision``: its key's ``create_revision``."""
        m = unpack(raw)
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
            name=field_of(m, "name", str),
            partitions=field_of(m, "partitions", int),
            created_at_ms=field_of(m, "created_at_ms", int),
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
