"""The broker's readiness (``GET /ready``): whether etcd and the object store answer.

Each check is one cheap read with a short timeout and no retry beyond one try per
etcd endpoint — a probe must answer within a load balancer's health-check timeout even
when a dependency blackholes its packets. The probes use their own clients, so the
short timeouts never apply to real work. A result is kept for ``ttl_s``: probes from
several load balancers and the orchestrator cost etcd and S3 one read each per second
at most, whatever their rate.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from botocore.config import Config

from llog.config import LlogConfig
from llog.errors import LlogError
from llog.etcd.auth import EtcdSecurity
from llog.etcd.client import Etcd
from llog.metrics import Metrics
from llog.store import ObjectStore
from llog.store.s3 import S3Store, s3_client

log = logging.getLogger(__name__)


class Readiness:
    """Thread-safe; :meth:`check` runs at most one probe round at a time."""

    def __init__(
        self, config: LlogConfig, store: ObjectStore, root: str, metrics: Metrics,
        *, timeout_s: float = 1.0, ttl_s: float = 1.0,
    ) -> None:
        self.ttl_s = ttl_s
        # One try per endpoint: a dead member fails over to the next within one probe.
        self._etcd = Etcd(config.etcd_endpoints, timeout=timeout_s, metrics=metrics,
                          attempt_timeout=timeout_s / len(config.etcd_endpoints),
                          keepalive_s=config.etcd_keepalive_s, read_retries=len(config.etcd_endpoints),
                          security=EtcdSecurity.of(config))
        self._store = _probe_store(config, store, metrics, timeout_s)
        # Never written, in etcd or the store: "absent" is the cheapest answer either gives.
        self._probe_key = f"{root}/ready-probe"
        self._lock = threading.Lock()
        self._checked_at = float("-inf")
        self._result: dict[str, dict[str, Any]] = {}

    def check(self) -> tuple[bool, dict[str, dict[str, Any]]]:
        """``(ready, per-dependency results)``; each result is ``{"ok": true,
        "latency_ms": …}`` or ``{"ok": false, "error": …}``."""
        with self._lock:
            if time.monotonic() - self._checked_at >= self.ttl_s:
                self._result = {
                    "etcd": _probe(lambda: self._etcd.get(self._probe_key)),
                    "object_store": _probe(lambda: self._store.head(self._probe_key)),
                }
                self._checked_at = time.monotonic()
                for name, r in self._result.items():
                    if not r["ok"]:
                        log.warning("readiness: %s unreachable: %s", name, r["error"])
            return all(r["ok"] for r in self._result.values()), self._result

    def close(self) -> None:
        try:
            self._etcd.close()
        finally:
            if isinstance(self._store, S3Store):
                self._store.close()


def _probe(read: Callable[[], object]) -> dict[str, Any]:
    t0 = time.perf_counter()
    try:
        read()
    except LlogError as exc:
        return {"ok": False, "error": str(exc)}
    return {"ok": True, "latency_ms": round((time.perf_counter() - t0) * 1000, 3)}


def _probe_store(config: LlogConfig, store: ObjectStore, metrics: Metrics, timeout_s: float) -> ObjectStore:
    """An S3 store like ``store`` whose requests time out after ``timeout_s`` and are
    not retried; any other store is probed as it is (a local directory answers at once)."""
    if not isinstance(store, S3Store):
        return store
    client = s3_client(config.s3_endpoint_url, config.s3_region, Config(
        connect_timeout=timeout_s, read_timeout=timeout_s, retries={"max_attempts": 1, "mode": "standard"},
        s3={"addressing_style": "path"} if config.s3_endpoint_url else None,
    ))
    return S3Store(store.bucket, store.prefix, client=client, metrics=metrics)
