"""Typed columns for a table topic's Parquet files (spec §7.6): when the topic's
``value_schema`` is set, compaction adds the values decoded by the subject's latest
schema (``fields``) and why any did not decode (``fields_error``) beside the raw
columns, so the Iceberg table has them as typed columns (llog/registry/columns.py).
Kafka consumers and the SDK still read the raw ``value``, byte for byte."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from llog.codec import parquet_body
from llog.codec.batch import RecordColumns
from llog.codec.etcd_values.topic import TopicMeta
from llog.connection import Connection
from llog.errors import SchemaRegistryError
from llog.registry import SchemaRegistry
from llog.registry.columns import FIELDS, FIELDS_ERROR, ValueColumns, subject_of

log = logging.getLogger(__name__)


class TypedColumns:
    """The typed columns of one compaction's values, or ``None`` when the topic has
    none (no ``value_schema``, no table, or no schema registered yet: the file has the
    raw columns only, and later files get typed ones)."""

    def __init__(self, conn: Connection) -> None:
        self.registry = SchemaRegistry(conn)
        self._warned: set[str] = set()

    def encode(self, meta: TopicMeta, cols: RecordColumns, partition: int, start_offset: int) -> bytes:
        """The run as a Parquet file, with the typed columns when the topic has them.
        Typed columns are derived: whatever goes wrong with them (a schema Arrow or
        Parquet cannot hold) leaves the file with the raw columns, never the run
        uncompacted."""
        extra = self.columns(meta, cols[2])
        if extra is not None:
            try:
                return parquet_body.encode(cols, partition, start_offset, extra)
            except Exception as exc:  # pyarrow's own errors: write the file without them
                self._warn(meta.name, f"typed columns not written: {type(exc).__name__}: {exc}")
        return parquet_body.encode(cols, partition, start_offset)

    def _warn(self, topic: str, why: str) -> None:
        if topic not in self._warned:  # once per topic and process: every compaction would repeat it
            self._warned.add(topic)
            log.warning("topic %s: %s", topic, why)

    def columns(self, meta: TopicMeta, values: Sequence[bytes | None]) -> dict[str, Any] | None:
        if meta.table is None or meta.value_schema is None:
            return None
        try:
            decoder = ValueColumns(self.registry, meta.name, meta.value_schema)
        except SchemaRegistryError as exc:  # an outage (CoordinationError) fails the compaction instead
            self._warn(meta.name, f"no typed columns (subject {subject_of(meta.name)}: {exc})")
            return None
        except Exception as exc:  # a schema Arrow cannot map: raw columns only
            self._warn(meta.name, f"no typed columns: {type(exc).__name__}: {exc}")
            return None
        typed, errors = decoder.decode(values)
        bad = len(values) - errors.null_count
        if bad:
            log.info("topic %s: %d of %d values did not decode (their reason is in %s)", meta.name, bad,
                     len(values), FIELDS_ERROR)
        return {FIELDS: typed, FIELDS_ERROR: errors}
