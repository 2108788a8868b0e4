"""Topic administration: create, list, describe, fence and unfence partitions."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from llog.codec.etcd_values.compaction import CompactionCursor, DamagedRange
from llog.codec.etcd_values.maps import MetaFormatError
from llog.codec.etcd_values.partition import COMPACTED, FENCED, OPEN, Control, Pending
from llog.codec.etcd_values.topic import (
    CLEANUP_POLICIES,
    COMPACTED_FORMATS,
    TABLE_FORMATS,
    VALUE_SCHEMA_MODES,
    VALUE_VALIDATIONS,
    TopicMeta,
)
from llog.config import LlogConfig
from llog.connection import Connection, topic_of
from llog.errors import CasConflict, CorruptMetadata, InvalidInput, TopicConflict
from llog.etcd.operations import Get, Put, absent, mod_revision_is
from llog.names import MAX_PARTITIONS, check_topic
from llog.state.control import ControlState, decode_control, decode_index, now_ms, read_control
from llog.state.keys import prefix_range_end
from llog.topic.deletion import remove_topic
from llog.topic.guard import TopicGuard


class Unchanged(Enum):
    """A setting :meth:`Topics.set_retention` leaves as it is."""

    UNCHANGED = "unchanged"


UNCHANGED = Unchanged.UNCHANGED


@dataclass(frozen=True)
class PartitionInfo:
    partition: int
    log_state: str
    next_offset: int
    log_start_offset: int
    pending: Pending | None
    index_keys: int
    compaction_cursor: int
    #: When the newest compaction of the partition was written (ms), None if never.
    last_compaction_ms: int | None = None
    #: Ranges whose body does not decode, which compaction passed (spec §10 K3'), in
    #: offset order: ``(end_offset, what was recorded)``.
    damaged: tuple[tuple[int, DamagedRange], ...] = ()

    @property
    def compaction_lag(self) -> int:
        """Records not compacted yet: ``next_offset`` minus the compaction cursor."""
        return self.next_offset - max(self.compaction_cursor, self.log_start_offset)


def parse_cleanup_policy(value: object) -> str | None:
    """Kafka's ``cleanup.policy`` as a topic record stores it: ``None`` for ``delete``
    (and for ``None``), ``"compact"``, or ``"compact,delete"`` for both in any order
    (``"delete, compact"`` too). :class:`InvalidInput` for anything else."""
    if value is None:
        return None
    words = sorted({w.strip() for w in value.split(",")}) if isinstance(value, str) else []
    if words == ["delete"]:
        return None
    joined = ",".join(words)
    if joined not in CLEANUP_POLICIES:
        raise InvalidInput(f"cleanup policy must be 'delete', 'compact' or 'compact,delete', got {value!r}")
    return joined


def _check_catalog(cfg: LlogConfig, table: str | None) -> None:
    """A table needs a catalog every process reaches: an S3 store has no default."""
    if table is not None and cfg.object_store.startswith("s3://") and not cfg.iceberg_catalog_uri:
        raise InvalidInput("a table topic on an S3 store needs LLOG_ICEBERG_CATALOG_URI, a catalog every llog "
                           "process of the deployment reaches (Postgres, a REST catalog, or SQLite on a path all "
                           "of them share)")


def _check_value_schema(mode: str | None, validation: str | None = None) -> None:
    if mode is not None and mode not in VALUE_SCHEMA_MODES:
        raise InvalidInput(f"value_schema must be None or one of {VALUE_SCHEMA_MODES}, got {mode!r}")
    if validation is not None and validation not in VALUE_VALIDATIONS:
        raise InvalidInput(f"value_validation must be None or one of {VALUE_VALIDATIONS}, got {validation!r}")
    if validation is not None and mode is None:
        raise InvalidInput("value_validation needs a value_schema: the values must name their schema")


def _check_format(compacted_format: str | None, table: str | None) -> None:
    if compacted_format is not None and compacted_format not in COMPACTED_FORMATS:
        raise InvalidInput(f"compacted_format must be None (bytes-batch-v1) or one of {COMPACTED_FORMATS}, "
                           f"got {compacted_format!r}")
    if table is not None and table not in TABLE_FORMATS:
        raise InvalidInput(f"table must be None or one of {TABLE_FORMATS}, got {table!r}")
    if table is not None and compacted_format != "parquet":
        raise InvalidInput(f"a {table} table is made of Parquet files: compacted_format must be 'parquet', "
                           f"got {compacted_format!r}")


@dataclass(frozen=True)
class TopicDescription:
    meta: TopicMeta
    partitions: tuple[PartitionInfo, ...]


def _check_partitions(partitions: object) -> None:
    if isinstance(partitions, bool) or not isinstance(partitions, int) or not 0 < partitions <= MAX_PARTITIONS:
        raise InvalidInput(f"partitions must be an int in [1, {MAX_PARTITIONS}], got {partitions!r}")


def _check_durations(**durations: object) -> None:
    """Key compaction durations: ints >= 0 (ms), ``None`` (the default) or :data:`UNCHANGED`."""
    for label, v in durations.items():
        if v is not None and v is not UNCHANGED and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            raise InvalidInput(f"{label} must be an int >= 0 (ms) or None, got {v!r}")


def _check_compaction(meta: TopicMeta) -> None:
    if meta.compacted and meta.compacted_format is not None:
        raise InvalidInput(f"topic {meta.name!r}: a compacted topic (cleanup.policy {meta.cleanup_policy}) is "
                           f"key-compacted into bytes-batch-v1 bodies; compacted_format {meta.compacted_format!r} "
                           "and tables are not supported for it yet")


def _check_limits(**limits: object) -> None:
    """Retention limits: positive ints, ``None`` (no limit) or :data:`UNCHANGED`."""
    for label, v in limits.items():
        if v is not None and v is not UNCHANGED and (isinstance(v, bool) or not isinstance(v, int) or v <= 0):
            raise InvalidInput(f"{label} must be a positive int or None, got {v!r}")


class Topics:
    """Topic admin over a :class:`Connection`."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def create(
        self,
        name: str,
        partitions: int,
        *,
        retention_ms: int | None = None,
        retention_bytes: int | None = None,
        compacted_format: str | None = None,
        table: str | None = None,
        cleanup_policy: str | None = None,
        min_compaction_lag_ms: int | None = None,
        delete_retention_ms: int | None = None,
        value_schema: str | None = None,
        value_validation: str | None = None,
    ) -> TopicMeta:
        """Create a topic. Idempotent: creating an existing topic with the same
        partition count returns it; a different count raises :class:`TopicConflict`.
        ``cleanup_policy`` is Kafka's: ``"delete"`` (the default: retention only),
        ``"compact"`` or ``"compact,delete"``; a compacted topic refuses records
        without a key (:class:`~llog.errors.KeyRequired`), and retention applies to it
        only with ``delete``. The compactor keeps the latest record of each key (spec
        §10.2), every record newer than ``min_compaction_lag_ms`` (default 0), and a
        tombstone for ``delete_retention_ms`` (default a day) after it passed it.
        ``compacted_format="parquet"``: the compactor writes compacted ranges as
        Parquet files (spec §7.6) instead of ``bytes-batch-v1`` bodies.
        ``table="iceberg"`` (implies Parquet): those files also form an Iceberg table
        the compactor service keeps in step with the index (:mod:`llog.table`).
        ``value_schema`` (``"schema-id"`` or ``"latest"``): values name their schema in
        the registry (subject ``{topic}-value``), and a table has them as typed columns;
        ``value_validation`` (``"refuse"`` or ``"dlq"``, with a ``value_schema``): brokers
        check produced values against it (spec §14.1)."""
        check_topic(name)
        _check_value_schema(value_schema, value_validation)
        _check_partitions(partitions)
        _check_limits(retention_ms=retention_ms, retention_bytes=retention_bytes)
        if table is not None and compacted_format is None:
            compacted_format = "parquet"
        _check_format(compacted_format, table)
        _check_catalog(self.conn.config, table)
        policy = parse_cleanup_policy(cleanup_policy)
        _check_durations(min_compaction_lag_ms=min_compaction_lag_ms, delete_retention_ms=delete_retention_ms)
        meta = TopicMeta(name, partitions, now_ms(), retention_ms, retention_bytes, compacted_format, table, policy,
                         min_compaction_lag_ms, delete_retention_ms, value_schema, value_validation)
        _check_compaction(meta)
        key = self.conn.keys.topic_meta(name)
        r = self.conn.etcd.txn([absent(key)], [Put(key, meta.encode())], [Get(key)])
        if r.succeeded:
            return replace(meta, revision=r.revision)
        existing = self.conn.topic(name, refresh=True)
        if existing.partitions != partitions:
            raise TopicConflict(
                f"topic {name!r} exists with {existing.partitions} partitions, not {partitions}"
            )
        return existing

    def get(self, name: str) -> TopicMeta:
        return self.conn.topic(name, refresh=True)

    def delete(self, name: str) -> TopicMeta:
        """Delete a topic (Kafka's DeleteTopics); returns the definition it had.

        One etcd transaction, guarded by the record's ``create_revision``, removes the
        topic record, every key of its partitions and the committed offsets for it in
        up to :data:`~llog.topic.deletion.OFFSET_RANGES_PER_DELETE` groups (those of
        other groups right after): its name is free at once, and a topic created again
        under it starts empty, with no offsets. Writers, group commits and the
        compactor that still know the old topic fail their next transaction on the
        topic guard (:mod:`llog.topic.guard`) with :class:`UnknownTopic`, so nothing is
        written under it again. Its data objects are left to vacuum, which deletes them
        as unreferenced (spec §11). A table topic's Iceberg table stays in the catalog:
        :func:`llog.table.delete_topic` drops it too (``llog topics delete`` and Kafka's
        DeleteTopics do). :class:`UnknownTopic` if there is no such topic."""
        return remove_topic(self.conn, name)

    def set_compacted_format(self, name: str, compacted_format: str | None) -> TopicMeta:
        """Change what the compactor writes for the topic from its next compaction on
        (ranges compacted before keep their format; readers read both). ``None``:
        ``bytes-batch-v1`` (refused while the topic has a table)."""
        return self._alter(name, lambda m: replace(m, compacted_format=compacted_format))

    def set_table(self, name: str, table: str | None) -> TopicMeta:
        """Give the topic an Iceberg table (``"iceberg"``, which also makes its
        compacted format Parquet) or stop maintaining it (``None``; the caller drops
        the catalog's table: ``llog topics alter --table none`` does)."""
        _check_catalog(self.conn.config, table)

        def change(m: TopicMeta) -> TopicMeta:
            fmt = "parquet" if table is not None else m.compacted_format
            return replace(m, table=table, compacted_format=fmt)
        return self._alter(name, change)

    def set_value_schema(self, name: str, value_schema: str | None, value_validation: str | None = None) -> TopicMeta:
        """How the topic's values name their schema (``"schema-id"``, ``"latest"``, or
        ``None``: opaque bytes; from the next compaction on) and whether brokers check
        them at produce (``"refuse"``, ``"dlq"``; within seconds)."""
        _check_value_schema(value_schema, value_validation)
        return self._alter(name, lambda m: replace(m, value_schema=value_schema, value_validation=value_validation))

    def add_partitions(self, name: str, partitions: int) -> TopicMeta:
        """Grow ``name`` to ``partitions`` partitions (never fewer: records in a
        partition cannot move). New partitions start empty at offset 0; writers and
        readers find them when they next read the topic's definition, which they do on
        meeting a partition they do not know. Records given by key may map to another
        partition from then on, as in Kafka."""
        _check_partitions(partitions)

        def change(m: TopicMeta) -> TopicMeta:
            if partitions <= m.partitions:
                raise InvalidInput(f"topic {name!r} has {m.partitions} partitions: a topic only grows, "
                                   f"so not to {partitions}")
            return replace(m, partitions=partitions)
        return self._alter(name, change)

    def set_cleanup_policy(self, name: str, policy: str | None) -> TopicMeta:
        """Change the topic's ``cleanup.policy`` (``None`` or ``"delete"``, ``"compact"``,
        ``"compact,delete"``). Turning compaction on refuses keyless records from then
        on; records already stored without a key stay readable."""
        return self.configure(name, cleanup_policy=policy)

    def set_retention(
        self, name: str, *, retention_ms: int | Unchanged | None = UNCHANGED,
        retention_bytes: int | Unchanged | None = UNCHANGED,
    ) -> TopicMeta:
        """Change a topic's retention (``None``: unlimited; a limit left out stays as
        it is). The compactor applies it from its next retention pass, which reads the
        topic's definition afresh."""
        return self.configure(name, retention_ms=retention_ms, retention_bytes=retention_bytes)

    def configure(
        self, name: str, *, retention_ms: int | Unchanged | None = UNCHANGED,
        retention_bytes: int | Unchanged | None = UNCHANGED, cleanup_policy: str | Unchanged | None = UNCHANGED,
        min_compaction_lag_ms: int | Unchanged | None = UNCHANGED,
        delete_retention_ms: int | Unchanged | None = UNCHANGED,
    ) -> TopicMeta:
        """Change several of a topic's settings in one step (what is left out stays;
        ``None`` is the default): :meth:`set_retention`, :meth:`set_cleanup_policy` and
        the key compaction settings of :meth:`create` at once."""
        _check_limits(retention_ms=retention_ms, retention_bytes=retention_bytes)
        _check_durations(min_compaction_lag_ms=min_compaction_lag_ms, delete_retention_ms=delete_retention_ms)
        policy = cleanup_policy if isinstance(cleanup_policy, Unchanged) else parse_cleanup_policy(cleanup_policy)
        given = {"retention_ms": retention_ms, "retention_bytes": retention_bytes, "cleanup_policy": policy,
                 "min_compaction_lag_ms": min_compaction_lag_ms, "delete_retention_ms": delete_retention_ms}
        changes: dict[str, Any] = {k: v for k, v in given.items() if not isinstance(v, Unchanged)}
        return self._alter(name, lambda m: replace(m, **changes))

    def _alter(self, name: str, change: Callable[[TopicMeta], TopicMeta]) -> TopicMeta:
        """A CAS on ``meta/topic``, retried on a concurrent change."""
        check_topic(name)
        key = self.conn.keys.topic_meta(name)
        for _ in range(self.conn.config.commit_max_attempts):
            kv = self.conn.etcd.get(key)
            meta = change(topic_of(name, kv))
            assert kv is not None  # topic_of raised otherwise
            _check_format(meta.compacted_format, meta.table)
            _check_compaction(meta)
            if self.conn.etcd.txn([mod_revision_is(key, kv.mod_revision)], [Put(key, meta.encode())], []).succeeded:
                self.conn.topic(name, refresh=True)
                return meta
        raise CasConflict(f"changing topic {name!r}", self.conn.config.commit_max_attempts)

    def list(self) -> list[TopicMeta]:
        """Every topic, by name. Skips from topic to topic (one ceiling lookup each)
        instead of scanning their index keys."""
        etcd, keys = self.conn.etcd, self.conn.keys
        root = keys.all_prefix()
        end = prefix_range_end(root)
        out: list[TopicMeta] = []
        cursor = root
        while True:
            kv = etcd.ceiling(cursor, end)
            if kv is None:
                # Key order puts "a-b/" before "a/"; callers want name order.
                return sorted(out, key=lambda m: m.name)
            name = kv.key[len(root) :].split("/", 1)[0]
            meta_key = keys.topic_meta(name)
            meta_kv = kv if kv.key == meta_key else etcd.get(meta_key)
            if meta_kv is not None:
                out.append(topic_of(name, meta_kv))
            cursor = prefix_range_end(keys.topic_prefix(name))

    def describe(self, name: str) -> TopicDescription:
        meta = self.get(name)
        etcd, keys = self.conn.etcd, self.conn.keys
        parts = []
        for p in range(meta.partitions):
            st = read_control(self.conn, name, p)
            cur = etcd.get(keys.compaction_cursor(name, p))
            cursor = 0
            if cur is not None:
                try:
                    cursor = CompactionCursor.decode(cur.value).offset
                except MetaFormatError as exc:
                    raise CorruptMetadata(cur.key, str(exc)) from exc
            c = st.control
            damaged = self._damaged(name, p)
            parts.append(
                PartitionInfo(
                    partition=p,
                    log_state=c.log_state,
                    next_offset=c.next_offset,
                    log_start_offset=c.log_start_offset,
                    pending=c.pending,
                    index_keys=etcd.count(
                        keys.index_prefix(name, p), keys.index_range_end(name, p)
                    ),
                    compaction_cursor=cursor,
                    last_compaction_ms=self._last_compaction_ms(name, p, cursor, {end for end, _ in damaged}),
                    damaged=damaged,
                )
            )
        return TopicDescription(meta, tuple(parts))

    def _damaged(self, topic: str, partition: int) -> tuple[tuple[int, DamagedRange], ...]:
        keys = self.conn.keys
        prefix = keys.damaged_prefix(topic, partition)
        out = []
        for kv in self.conn.etcd.range(prefix, prefix_range_end(prefix)):
            try:
                out.append((keys.end_offset_of(kv.key), DamagedRange.decode(kv.value)))
            except MetaFormatError as exc:
                raise CorruptMetadata(kv.key, str(exc)) from exc
        return tuple(out)

    def _last_compaction_ms(self, topic: str, partition: int, cursor: int, damaged_ends: set[int]) -> int | None:
        """When the newest compaction below the cursor was written: the entry just below
        it, or below the damaged entries compaction passed there (unless retention
        dropped it since)."""
        etcd, keys = self.conn.etcd, self.conn.keys
        probe = cursor - 1
        while probe >= 0:
            kv = etcd.get(keys.index(topic, partition, probe))
            if kv is None:
                return None
            entry = decode_index(kv.key, kv.value)
            if entry.kind == COMPACTED:
                return entry.created_at_ms
            if probe not in damaged_ends:
                return None
            probe -= entry.msg_count
        return None

    def fence(self, topic: str, partition: int) -> ControlState:
        """Reject further appends to the partition (committed data stays readable)."""
        return self._set_state(topic, partition, FENCED)

    def unfence(self, topic: str, partition: int) -> ControlState:
        return self._set_state(topic, partition, OPEN)

    def delete_records(self, topic: str, partition: int, before: int | None = None) -> int:
        """Kafka's DeleteRecords: move the partition's log start offset up to ``before``
        (``None``: the next offset, deleting every record), so reads below it raise
        :class:`~llog.errors.OffsetOutOfRange`; returns the log start offset after. An
        offset at or below the log start changes nothing; one past the next offset is
        :class:`~llog.errors.InvalidInput`. The compactor deletes the index keys wholly
        below it on its next pass and vacuum the objects only they named (spec §11)."""
        if before is not None and (isinstance(before, bool) or not isinstance(before, int) or before < 0):
            raise InvalidInput(f"before must be an offset >= 0 or None, got {before!r}")

        def change(c: Control) -> Control | None:
            target = c.next_offset if before is None else before
            if target > c.next_offset:
                raise InvalidInput(f"cannot delete {topic}/{partition} records up to {target}: "
                                   f"its next offset is {c.next_offset}")
            return c.with_changes(log_start_offset=target) if target > c.log_start_offset else None
        return self._change_control(topic, partition, change).control.log_start_offset

    def _set_state(self, topic: str, partition: int, state: str) -> ControlState:
        return self._change_control(
            topic, partition, lambda c: None if c.log_state == state else c.with_changes(log_state=state))

    def _change_control(
        self, topic: str, partition: int, change: Callable[[Control], Control | None]
    ) -> ControlState:
        """A CAS on the partition's control (retried while commits move it); ``change``
        gives the new control, or ``None`` when there is nothing to change."""
        self.conn.check_partition(topic, partition)
        guard = TopicGuard.of(self.conn, topic)
        key = self.conn.keys.control(topic, partition)
        st = read_control(self.conn, topic, partition)
        for _ in range(self.conn.config.commit_max_attempts):
            new = change(st.control)
            if new is None:
                return st
            r = self.conn.etcd.txn(
                [mod_revision_is(key, st.mod_revision), guard.compare()], [Put(key, new.encode())],
                [Get(key), guard.read()],
            )
            if r.succeeded:
                return ControlState(new, r.revision)
            got, got_topic = r.responses
            assert isinstance(got, list) and isinstance(got_topic, list)
            guard.check(self.conn, got_topic)
            st = decode_control(key, got[0] if got else None)
        raise CasConflict(key, self.conn.config.commit_max_attempts)
