"""The broker's route table: every path, its method and handler, and whether it is
answered without the bearer token. The Starlette app, the auth check and the
per-route metrics all read it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response

from llog.broker.routes.consume import consume
from llog.broker.routes.groups import commit, offsets
from llog.broker.routes.meta import blob_range, brokers, health, metrics_json, metrics_prometheus, openapi, ready
from llog.broker.routes.produce import produce
from llog.broker.routes.schema_registry import registry


@dataclass(frozen=True)
class Endpoint:
    """One route of the broker."""

    path: str
    #: ``*``: any method (the handler answers the ones it serves).
    method: str
    handler: Callable[[Request], Awaitable[Response]]
    #: Answered without the bearer token (probes and the API description).
    public: bool = False


ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint("/produce", "POST", produce),
    Endpoint("/consume", "POST", consume),
    Endpoint("/commit", "POST", commit),
    Endpoint("/offsets", "GET", offsets),
    Endpoint("/health", "GET", health, public=True),
    Endpoint("/ready", "GET", ready, public=True),
    Endpoint("/metrics", "GET", metrics_json),
    Endpoint("/metrics/prometheus", "GET", metrics_prometheus),
    Endpoint("/openapi.json", "GET", openapi, public=True),
    Endpoint("/brokers", "GET", brokers),
    Endpoint("/blobs", "GET", blob_range),
)
#: Confluent's Schema Registry API: every path under ``/subjects``, ``/schemas``,
#: ``/config``, ``/compatibility``, ``/mode`` and ``/contexts``.
REGISTRY = Endpoint("/subjects", "*", registry)
#: Every path; others are counted in the request metrics as ``other``.
ROUTES: frozenset[str] = frozenset(e.path for e in ENDPOINTS)
