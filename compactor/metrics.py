"""Compactor metrics (names prefixed ``llog_``), registered next to a connection's own.

They live in the connection's :class:`llog.metrics.Metrics` registry, so one
``/metrics/prometheus`` page shows the compactor's counters together with the etcd and
S3 operation counts its work caused. :func:`compactor_metrics` hands out one instance
per registry (prometheus_client refuses to register a name twice).
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from llog.config import LlogConfig
from llog.metrics import Metrics
from llog.store.billing import request_classes, request_usd

if TYPE_CHECKING:
    from llog.table.sync import SyncResult

_STAGE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_GIB = 1024**3


class CompactorMetrics:
    """The compactor's counters, gauges and histograms."""

    def __init__(self, base: Metrics) -> None:
        self.base = base
        # Registered in this order, which is the order /metrics lists them in.
        self._init_compaction(base.registry)
        self._init_service(base.registry)
        self._init_maintenance(base.registry)

    def _init_compaction(self, r: CollectorRegistry) -> None:
        """What ``compact_once`` and its stages count and time, and the claims that skip it."""
        self.runs = Counter("llog_compactor_runs", "compact_once calls by outcome", ["outcome"], registry=r)
        self.recoveries = Counter(
            "llog_compactor_recoveries", "interrupted compactions finished, by the stage they were at",
            ["stage"], registry=r,
        )
        self.bytes = Counter(
            "llog_compactor_bytes", "WAL slice bytes read and compacted bytes written",
            ["direction"], registry=r,
        )
        self.records = Counter("llog_compactor_records", "records rewritten into compacted blobs", registry=r)
        self.index_keys_removed = Counter(
            "llog_compactor_index_keys_removed", "WAL index keys deleted by compaction", registry=r
        )
        self.stage_seconds = Histogram(
            "llog_compactor_stage_seconds", "time spent per compaction step", ["stage"],
            buckets=_STAGE_BUCKETS, registry=r,
        )
        self.damaged = Counter(
            "llog_compactor_damaged_ranges",
            "WAL entries whose body does not decode, passed by compaction (spec §10 K3')", registry=r,
        )
        self.damaged_records = Counter(
            "llog_compactor_damaged_records", "records of the damaged ranges passed by compaction", registry=r
        )
        self.clean_passes = Counter(
            "llog_compactor_key_compaction_passes", "key compaction passes of compacted topics (spec §10.2), "
            "by outcome", ["outcome"], registry=r,
        )
        self.clean_removed = Counter(
            "llog_compactor_key_compaction_removed_records",
            "records a compacted topic's key compaction removed (superseded values, expired tombstones)", registry=r,
        )
        self.clean_key_map = Gauge(
            "llog_compactor_key_map_entries", "distinct keys in the last key compaction pass's map", registry=r,
        )
        self.claim_conflicts = Counter(
            "llog_compactor_claim_conflicts", "partitions skipped because another compactor held the claim",
            registry=r,
        )

    def _init_service(self, r: CollectorRegistry) -> None:
        """What the long-running service's claims, tasks and looks at partitions record."""
        self.errors = Counter(
            "llog_compactor_task_errors", "compaction tasks that failed, by error type", ["error"], registry=r
        )
        self.lag = Gauge(
            "llog_compactor_lag_records", "next_offset - compaction cursor, at the last look",
            ["topic", "partition"], registry=r,
        )
        self.pending = Gauge(
            "llog_compactor_pending_partitions", "partitions whose control held a pending at the last look",
            registry=r,
        )
        self.partitions = Gauge("llog_compactor_partitions", "partitions the service compacts", registry=r)
        self.inflight = Gauge(
            "llog_compactor_inflight_tasks", "compaction tasks running or queued", registry=r
        )

    def _init_maintenance(self, r: CollectorRegistry) -> None:
        """Retention, vacuum, etcd history compaction and producer-state expiry."""
        self.retention_records = Counter(
            "llog_retention_records_dropped", "records removed by retention", registry=r
        )
        self.retention_keys = Counter(
            "llog_retention_index_keys_dropped", "index keys removed by retention", registry=r
        )
        self.vacuum_objects = Counter("llog_vacuum_deleted_objects", "objects deleted by vacuum", registry=r)
        self.vacuum_bytes = Counter("llog_vacuum_freed_bytes", "bytes freed by vacuum", registry=r)
        self.table_syncs = Counter(
            "llog_table_syncs", "table topic syncs with the index, by outcome (committed, unchanged, failed)",
            ["outcome"], registry=r,
        )
        self.table_files = Counter(
            "llog_table_files", "data files syncs added to or removed from table topics' tables",
            ["action"], registry=r,
        )
        self.stored_bytes = Gauge(
            "llog_vacuum_stored_bytes", "data object bytes in the store at the last vacuum listing",
            registry=r,
        )
        self.etcd_compacted_revision = Gauge(
            "llog_etcd_compacted_revision", "revision the service last compacted etcd's history at",
            registry=r,
        )
        self.etcd_db_size = Gauge(
            "llog_etcd_db_size_bytes", "etcd's database size (the space quota counts it) at the last look",
            registry=r,
        )
        self.producers_expired = Counter(
            "llog_producer_states_expired", "producer-id keys deleted after LLOG_PRODUCER_STATE_TTL_S",
            registry=r,
        )

    def table_synced(self, result: SyncResult | None) -> None:
        """Count one table sync, the service's or vacuum's fencing one (``None``: it failed)."""
        if result is None:
            self.table_syncs.labels("failed").inc()
            return
        self.table_syncs.labels("committed" if result.committed else "unchanged").inc()
        self.table_files.labels("added").inc(result.added)
        self.table_files.labels("removed").inc(result.removed)

    @contextmanager
    def time(self, stage: str) -> Iterator[None]:
        """Observe the duration of the ``with`` body as ``stage``."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.stage_seconds.labels(stage).observe(time.perf_counter() - t0)


class S3CostCollector(Collector):
    """``llog_s3_cost_estimate_usd{kind}``: request cost so far (from the connection's
    ``llog_s3_ops`` counters) and the monthly storage cost of the bytes last listed."""

    def __init__(self, metrics: CompactorMetrics, config: LlogConfig) -> None:
        self._m = metrics
        self._cfg = config

    def collect(self) -> Iterator[GaugeMetricFamily]:
        # Read the metrics themselves: going through the registry would recurse into here.
        ops: dict[str, float] = {}
        for fam in self._m.base.s3_ops.collect():
            for s in fam.samples:
                if s.name.endswith("_total"):
                    ops[s.labels["op"]] = s.value
        put_usd, get_usd = request_usd(self._cfg, *request_classes(ops))
        stored = sum(s.value for fam in self._m.stored_bytes.collect() for s in fam.samples)
        fam = GaugeMetricFamily(
            "llog_s3_cost_estimate_usd", "S3 billing estimate from request counts and stored bytes",
            labels=["kind"],
        )
        fam.add_metric(["put_requests"], put_usd)
        fam.add_metric(["get_requests"], get_usd)
        fam.add_metric(["storage_per_month"], stored / _GIB * self._cfg.s3_price_gib_month)
        yield fam

    def describe(self) -> Iterator[GaugeMetricFamily]:
        return iter(())


_instances: weakref.WeakKeyDictionary[Metrics, CompactorMetrics] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def compactor_metrics(base: Metrics) -> CompactorMetrics:
    """The :class:`CompactorMetrics` registered in ``base``'s registry (made once)."""
    with _lock:
        m = _instances.get(base)
        if m is None:
            m = _instances[base] = CompactorMetrics(base)
        return m


def register_cost_estimate(base: Metrics, config: LlogConfig) -> None:
    """Add the S3 billing estimate to ``base``'s registry (a service does this once)."""
    base.registry.register(S3CostCollector(compactor_metrics(base), config))
