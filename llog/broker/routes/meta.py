"""The broker's own state: ``GET /health``, ``/ready``, ``/metrics``,
``/metrics/prometheus`` and ``/openapi.json``; ``GET /brokers``, where a client of a
zone finds the brokers of its zone; and ``GET /blobs``, the blobs it wrote as other
brokers' readers ask for them."""

from __future__ import annotations

import functools

import anyio.to_thread
import msgspec
from msgspec import UNSET
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import Request
from starlette.responses import Response

from llog.auth.acls import Operation, ResourceType
from llog.broker import worker_metrics
from llog.broker.api_types import BrokerEntry, Brokers, Check, Health, Readiness
from llog.broker.directory import ZONE_HEADER, serving
from llog.broker.http_auth import Access
from llog.broker.openapi import openapi_document
from llog.broker.responses import json_response
from llog.broker.schemas import parse_blob_query, parse_brokers_query
from llog.broker.state import broker_of
from llog.version import __version__


async def health(request: Request) -> Response:
    """Liveness: this process's id, listen address, start time and release."""
    b = broker_of(request)
    health = Health("ok", b.broker_id, b.host, b.port, b.started_at_ms, __version__)
    if b.place is not None:
        health.worker, health.workers = b.place.index, len(b.place.urls)
    return json_response(health)


async def ready(request: Request) -> Response:
    """Readiness: 200 when etcd and the object store answer, else 503 with the checks."""
    b = broker_of(request)
    ok, checks = await anyio.to_thread.run_sync(b.readiness.check)
    return json_response(Readiness("ready" if ok else "unavailable", b.broker_id,
                                   msgspec.convert(checks, dict[str, Check])), 200 if ok else 503)


async def metrics_json(request: Request) -> Response:
    """The metrics as one JSON object (a multi-process broker's: every worker's)."""
    b = broker_of(request)
    snapshot = b.conn.metrics.snapshot()
    if b.place is None or request.query_params.get("scope") == worker_metrics.WORKER_SCOPE:
        return json_response(snapshot)
    parts = await worker_metrics.gather(b, "/metrics", msgspec.json.encode(snapshot))
    return json_response(worker_metrics.merge_json(parts))


async def metrics_prometheus(request: Request) -> Response:
    """The metrics in Prometheus' text format (a multi-process broker's: every worker's)."""
    b = broker_of(request)
    text = generate_latest(b.conn.metrics.registry)
    if b.place is not None and request.query_params.get("scope") != worker_metrics.WORKER_SCOPE:
        text = worker_metrics.merge_prometheus(await worker_metrics.gather(b, "/metrics/prometheus", text))
    return Response(text, media_type=CONTENT_TYPE_LATEST)


async def brokers(request: Request) -> Response:
    """The live brokers that serve the caller's zone (the ``Llog-Zone`` header, else
    the ``zone`` query parameter): those of its zone, or every one when its zone has
    none alive or it names none (docs/zones.md)."""
    q = parse_brokers_query(request.query_params.multi_items(), request.headers.get(ZONE_HEADER))
    b = broker_of(request)
    listed = await anyio.to_thread.run_sync(b.directory.brokers)
    return json_response(Brokers(q.zone, [BrokerEntry(x.url, x.zone or UNSET, x.version or UNSET)
                                                    for x in serving(listed, q.zone)]))


async def blob_range(request: Request) -> Response:
    """Bytes of a WAL blob this broker wrote, from its blob cache only (peer reads,
    llog/store/peers.py): 404 when it no longer holds them, never a read of storage.
    Any topic's bytes: with the authorizer on, for ClusterAction on the cluster (the
    broker token, a super user) only."""
    q = parse_blob_query(request.query_params.multi_items())
    b = broker_of(request)
    Access(request, b).check(Operation.CLUSTER_ACTION, ResourceType.CLUSTER)
    data = b.conn.blob_cache.peek(q.key, q.offset, q.length)
    if data is None:
        return Response(status_code=404)
    return Response(data, media_type="application/octet-stream")


async def openapi(_request: Request) -> Response:
    """The OpenAPI document of every route."""
    return Response(_document(), media_type="application/json")


@functools.cache
def _document() -> bytes:
    return msgspec.json.encode(openapi_document())
