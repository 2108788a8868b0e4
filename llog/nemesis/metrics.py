"""Prometheus metrics of one S3 proxy (names prefixed ``llog_nemesis_``), in a registry
of its own so two proxies in one process never share counters."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

_DELAY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1.0, 2.5, 5.0, 10.0)


class NemesisMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "llog_nemesis_requests", "S3 requests through the proxy by operation", ["op"], registry=r
        )
        self.faults = Counter(
            "llog_nemesis_faults_injected", "faults the proxy injected by kind and operation",
            ["kind", "op"], registry=r,
        )
        self.added_latency = Histogram(
            "llog_nemesis_added_latency_seconds", "delay the proxy added before a response "
            "(latency profile draw plus any slow fault)", buckets=_DELAY_BUCKETS, registry=r,
        )

    def exposition(self) -> bytes:
        """The registry in Prometheus text format."""
        return generate_latest(self.registry)
