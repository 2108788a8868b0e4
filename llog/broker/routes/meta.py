"""The broker's own state: ``GET /health``, ``/ready``, ``/metrics``,
``/metrics/prometheus`` and ``/openapi.json``; and ``GET /blobs``, the blobs it wrote
as other brokers' readers ask for them."""

from __future__ import annotations

import functools
from typing import Any

import anyio.to_thread
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from llog.broker.schemas import openapi_document, parse_blob_query
from llog.broker.state import broker_of
from llog.broker.statuses import retry_headers


async def health(request: Request) -> Response:
    """Liveness: this process's id, listen address and start time."""
    b = broker_of(request)
    return JSONResponse({"status": "ok", "broker_id": b.broker_id, **b.listen, "started_at_ms": b.started_at_ms})


async def ready(request: Request) -> Response:
    """Readiness: 200 when etcd and the object store answer, else 503 with the checks."""
    b = broker_of(request)
    ok, checks = await anyio.to_thread.run_sync(b.readiness.check)
    status = 200 if ok else 503
    return JSONResponse({"status": "ready" if ok else "unavailable", "broker_id": b.broker_id, "checks": checks},
                        status_code=status, headers=retry_headers(status))


async def metrics_json(request: Request) -> Response:
    """The metrics as one JSON object."""
    return JSONResponse(broker_of(request).conn.metrics.snapshot())


async def metrics_prometheus(request: Request) -> Response:
    """The metrics in Prometheus' text format."""
    return Response(generate_latest(broker_of(request).conn.metrics.registry), media_type=CONTENT_TYPE_LATEST)


async def blob_range(request: Request) -> Response:
    """Bytes of a WAL blob this broker wrote, from its blob cache only (peer reads,
    llog/scan/peers.py): 404 when it no longer holds them, never a read of storage."""
    q = parse_blob_query(request.query_params.multi_items())
    data = broker_of(request).conn.blob_cache.peek(q.key, q.offset, q.length)
    if data is None:
        return Response(status_code=404)
    return Response(data, media_type="application/octet-stream")


async def openapi(_request: Request) -> Response:
    """The OpenAPI document of every route."""
    return JSONResponse(_document())


@functools.cache
def _document() -> dict[str, Any]:
    return openapi_document()
