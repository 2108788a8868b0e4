"""Produced values checked against their topic's schema before they are stored (a
topic's ``value_validation``, spec §14.1), for the HTTP API and the Kafka listener
alike. Blocking (the registry, the dead-letter append): called on a worker thread.

* ``refuse``: a partition's batch with any value the schema refuses is refused whole
  (:class:`SchemaViolation`: Kafka's ``INVALID_RECORD``), and nothing of it is stored.
* ``dlq``: each refused value goes first to the dead-letter topic ``{topic}~dlq`` (same
  partition number modulo its count, created with the topic's partition count on first
  use; a table topic if the topic is one: its dead-letter table), with the record's key,
  timestamp and headers and three more: ``llog.dlq.reason``, ``llog.dlq.topic``,
  ``llog.dlq.partition``. Then the batch is stored with that
  record's value null and a header ``llog.dlq`` naming the dead-letter topic, so every
  record keeps its offset and an idempotent producer's sequence counts the records it
  sent. A retry of the batch may dead-letter a value twice (at least once), never lose it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import replace

from llog.codec import kafka_body
from llog.codec.etcd_values.topic import DLQ_SUFFIX, TopicMeta
from llog.connection import Connection
from llog.errors import SchemaViolation
from llog.producer import BatchingProducer
from llog.records import ConsumedRecord, KafkaBatches, Record
from llog.registry import SchemaRegistry
from llog.registry.validation import ValueValidator
from llog.topic.admin import Topics

log = logging.getLogger(__name__)

Records = Sequence[Record | bytes] | KafkaBatches
#: Seconds the dead-letter append may take before the produce fails (and is retried).
DLQ_TIMEOUT_S = 30.0
#: Seconds a topic's definition is trusted for its validation setting: a change made
#: with ``llog topics alter`` applies on every broker within this.
SETTING_TTL_S = 5.0


class Screening:
    """One broker's checks of produced values (its validator caches per schema id)."""

    def __init__(self, conn: Connection, registry: SchemaRegistry, producer: BatchingProducer) -> None:
        self.conn, self.producer = conn, producer
        self.validator = ValueValidator(registry)
        self._settings: dict[str, tuple[float, TopicMeta]] = {}
        self._lock = threading.Lock()

    def fast(self, topic: str) -> bool:
        """Whether a produce to ``topic`` may skip :meth:`screen` (on the event loop): its
        definition, read within :data:`SETTING_TTL_S`, asks for no validation."""
        with self._lock:
            got = self._settings.get(topic)
        return got is not None and time.monotonic() < got[0] and got[1].value_validation is None

    def _meta(self, topic: str) -> TopicMeta:
        with self._lock:
            got = self._settings.get(topic)
        if got is not None and time.monotonic() < got[0]:
            return got[1]
        meta = self.conn.topic(topic, refresh=True)
        with self._lock:
            self._settings[topic] = (time.monotonic() + SETTING_TTL_S, meta)
        return meta

    def screen(self, topic: str, partition: int, records: Records, *, refuse_only: bool = False) -> Records:
        """``records`` as they are to be stored (see the module doc). ``refuse_only``:
        a ``dlq`` topic refuses too (a transaction's batch: its dead letters would be
        written outside the transaction, visible even if it aborts)."""
        meta = self._meta(topic)
        if meta.value_validation is None or meta.value_schema is None:
            return records
        rows = _rows(records)
        bad = dict(self.validator.problems(meta.name, meta.value_schema, [r.value for r in rows]))
        if not bad:
            return records
        m = self.conn.metrics
        m.schema_refusals.labels(meta.value_validation).inc(len(bad))
        if meta.value_validation == "refuse" or refuse_only:
            first = min(bad)
            raise SchemaViolation(meta.name, partition, first, bad[first], len(bad), len(rows))
        dlq = self._dead_letter(meta, partition, rows, bad)
        kept = [replace(r, value=None, headers=(*r.headers, ("llog.dlq", dlq.encode()))) if i in bad else r
                for i, r in enumerate(rows)]
        log.info("%s/%d: %d of %d values refused by the schema went to %s", meta.name, partition, len(bad),
                 len(rows), dlq)
        if isinstance(records, KafkaBatches):
            return _batches(kept, records)
        return kept

    def _dead_letter(self, meta: TopicMeta, partition: int, rows: list[Record], bad: dict[int, str]) -> str:
        """Append the refused records to the dead-letter topic; its name."""
        name = meta.name + DLQ_SUFFIX
        # A table topic's dead letters form a table too: the reasons are rows beside its own.
        dlq = Topics(self.conn).create(name, meta.partitions, table=meta.table)
        headers = (("llog.dlq.topic", meta.name.encode()), ("llog.dlq.partition", str(partition).encode()))
        letters = [replace(rows[i], headers=(*rows[i].headers, ("llog.dlq.reason", reason.encode()), *headers))
                   for i, reason in sorted(bad.items())]
        self.producer.send_group(name, partition % dlq.partitions, letters).result(DLQ_TIMEOUT_S)
        return name


def _rows(records: Records) -> list[Record]:
    if isinstance(records, KafkaBatches):
        cols = kafka_body.records_of(records)
        return [Record(v, k, t, h) for t, k, v, h in zip(cols.timestamps, cols.keys, cols.values, cols.headers,
                                                         strict=True)]
    return [r if isinstance(r, Record) else Record(r) for r in records]


def _batches(rows: list[Record], original: KafkaBatches) -> KafkaBatches:
    """``rows`` as one uncompressed batch carrying ``original``'s producer fields."""
    consumed = [ConsumedRecord("", 0, i, r.timestamp if r.timestamp is not None else original.max_timestamp,
                               r.key, r.value, r.headers) for i, r in enumerate(rows)]
    return replace(original, data=kafka_body.encode_batch(consumed), count=len(rows))
