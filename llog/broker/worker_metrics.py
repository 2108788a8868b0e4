"""The metrics of a multi-process broker (``llog broker --workers``) as one view: the
worker answering ``GET /metrics`` or ``/metrics/prometheus`` adds its siblings' own
(``?scope=worker``, from their private URLs), every sample labelled ``worker``, and
``llog_broker_worker_up`` says which answered. Sum over ``worker`` for the broker's
totals; a sibling that does not answer within ``timeout_s`` is left out, not waited for."""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from collections.abc import Iterable
from typing import Any

import anyio.to_thread
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from llog.broker.state import Broker
from llog.tls import connection, peer_context

log = logging.getLogger(__name__)

#: The query that asks a worker for its own metrics only.
WORKER_SCOPE = "worker"
UP = "llog_broker_worker_up"


def _get(url: str, path: str, token: str | None, timeout_s: float, tls: ssl.SSLContext | None) -> bytes | None:
    conn = connection(url, timeout_s, tls)
    try:
        conn.request("GET", f"{path}?scope={WORKER_SCOPE}",
                     headers={} if token is None else {"authorization": f"Bearer {token}"})
        resp = conn.getresponse()
        body = resp.read()
        return body if resp.status == 200 else None
    except OSError as exc:
        log.warning("broker worker at %s did not give its metrics: %s", url, exc)
        return None
    finally:
        conn.close()


async def gather(b: Broker, path: str, own: bytes) -> list[tuple[int, bytes | None]]:
    """``(worker index, its metrics body or None)`` for every worker, this one's ``own``."""
    assert b.place is not None
    place, token, timeout = b.place, b.place.secret or None, b.config.read_peer_timeout_s
    tls = peer_context(b.config)

    async def one(i: int, url: str) -> tuple[int, bytes | None]:
        if i == place.index:
            return i, own
        return i, await anyio.to_thread.run_sync(_get, url, path, token, timeout, tls)

    return list(await asyncio.gather(*(one(i, u) for i, u in enumerate(place.urls))))


def merge_json(parts: Iterable[tuple[int, bytes | None]]) -> dict[str, list[dict[str, Any]]]:
    """JSON snapshots (``Metrics.snapshot``) as one, each sample labelled ``worker``."""
    out: dict[str, list[dict[str, Any]]] = {UP: []}
    for i, body in parts:
        out[UP].append({"labels": {"worker": str(i)}, "value": 0.0 if body is None else 1.0})
        for name, samples in ({} if body is None else json.loads(body)).items():
            out.setdefault(name, []).extend(
                {"labels": {**s["labels"], "worker": str(i)}, "value": s["value"]} for s in samples)
    return out


class _Families:
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


def merge_prometheus(parts: Iterable[tuple[int, bytes | None]]) -> bytes:
    """Prometheus text expositions as one, each sample labelled ``worker``."""
    up = Metric(UP, "1 when the broker worker gave its metrics for this view", "gauge")
    families: dict[str, Metric] = {UP: up}
    for i, body in parts:
        up.add_sample(UP, {"worker": str(i)}, 0.0 if body is None else 1.0)
        if body is None:
            continue
        for fam in text_string_to_metric_families(body.decode()):
            merged = families.setdefault(fam.name, Metric(fam.name, fam.documentation, fam.type, fam.unit))
            for s in fam.samples:
                merged.samples.append(s._replace(labels={**s.labels, "worker": str(i)}))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(list(families.values())))
    return generate_latest(registry)
