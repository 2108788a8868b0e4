"""Expiring idempotent producers' state (protocol/README.md §8.7).

Every ``producer_id`` that ever appended leaves a key per partition,
``…/partitions/{p}/producers/{id}``; producers come and go (a broker restart, a new
client instance), so without expiry these keys grow without bound. The compactor
service deletes the ones not written for ``LLOG_PRODUCER_STATE_TTL_S``, judging age by
etcd revision (:class:`~compactor.revision_clock.RevisionClock`), never by the
``at_ms`` a writer put in the value. Each delete compares the key's ``mod_revision``,
so a producer that commits meanwhile keeps its state.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from compactor.metrics import CompactorMetrics
from compactor.revision_clock import RevisionClock
from llog.connection import Connection
from llog.etcd.operations import KV, Delete, mod_revision_is
from llog.names import TopicPartition
from llog.state.keys import prefix_range_end

log = logging.getLogger(__name__)

#: Deletes per transaction (etcd allows 128 operations per transaction by default).
_BATCH = 64


def expire_producers(conn: Connection, partitions: Iterable[TopicPartition], written_before: int) -> int:
    """Delete the producer keys of ``partitions`` last written at or before revision
    ``written_before``, unless rewritten meanwhile. Returns how many went."""
    deleted = 0
    for topic, partition in partitions:
        prefix = f"{conn.keys.partition_prefix(topic, partition)}producers/"
        stale = [kv for kv in conn.etcd.scan(prefix, prefix_range_end(prefix)) if kv.mod_revision <= written_before]
        for i in range(0, len(stale), _BATCH):
            deleted += _delete_unchanged(conn, stale[i : i + _BATCH])
    return deleted


def _delete_unchanged(conn: Connection, kvs: list[KV]) -> int:
    r = conn.etcd.txn([mod_revision_is(kv.key, kv.mod_revision) for kv in kvs], [Delete(kv.key) for kv in kvs])
    if r.succeeded:
        return len(kvs)
    if len(kvs) == 1:  # written again since the scan: that producer is alive
        return 0
    return sum(_delete_unchanged(conn, [kv]) for kv in kvs)


class ProducerExpiry:
    """The service's periodic job: :meth:`run` over the partitions it knows."""

    def __init__(
        self, conn: Connection, revisions: RevisionClock, ttl_s: float, metrics: CompactorMetrics
    ) -> None:
        self.conn = conn
        self.revisions = revisions
        self.ttl_s = ttl_s
        self.metrics = metrics

    def run(self, partitions: Iterable[TopicPartition]) -> int:
        """Sample etcd's revision, then expire what was last written before the
        revision sampled ``ttl_s`` ago (nothing until the clock has a sample that old)."""
        self.revisions.observe()
        cutoff = self.revisions.aged_revision(round(self.ttl_s * 1000))
        if cutoff == 0:
            return 0
        n = expire_producers(self.conn, partitions, cutoff)
        if n:
            self.metrics.producers_expired.inc(n)
            log.info("expired %d producer states last written at or before revision %d", n, cutoff)
        return n
