"""The compactor's HTTP endpoints: ``GET /health``, ``GET /metrics`` (JSON) and
``GET /metrics/prometheus``, served by uvicorn on a background thread."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from llog.errors import LlogError
from llog.metrics import Metrics
from llog.version import __version__

log = logging.getLogger(__name__)

#: Returns ``(healthy, details)`` for ``/health``.
HealthCheck = Callable[[], tuple[bool, dict[str, Any]]]


def build_app(health: HealthCheck, metrics: Metrics) -> Starlette:
    """The ASGI app behind :class:`HttpServer` (usable with any ASGI server)."""

    async def get_health(_request: Request) -> Response:
        ok, details = health()
        body = {"status": "ok" if ok else "unhealthy", "version": __version__, **details}
        return JSONResponse(body, status_code=200 if ok else 503)

    async def get_metrics(_request: Request) -> Response:
        return JSONResponse(metrics.snapshot())

    async def get_prometheus(_request: Request) -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return Starlette(
        routes=[
            Route("/health", get_health, methods=["GET"]),
            Route("/metrics", get_metrics, methods=["GET"]),
            Route("/metrics/prometheus", get_prometheus, methods=["GET"]),
        ]
    )


class HttpServer:
    """Serves :func:`build_app` on ``host:port`` (0: any free port, see :attr:`port`)
    from a background thread until :meth:`stop`."""

    def __init__(self, health: HealthCheck, metrics: Metrics, host: str, port: int) -> None:
        self._sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._sock.bind((host, port))
        except OSError as exc:
            self._sock.close()
            raise LlogError(f"compactor HTTP server cannot bind {host}:{port}: {exc}") from exc
        self.host = host
        self.port: int = self._sock.getsockname()[1]
        cfg = uvicorn.Config(
            build_app(health, metrics), log_level="warning", access_log=False, lifespan="off"
        )
        self._server = uvicorn.Server(cfg)
        self._thread = threading.Thread(target=self._serve, name="llog-compactor-http", daemon=True)

    def _serve(self) -> None:
        self._server.run(sockets=[self._sock])

    def start(self, timeout: float = 10.0) -> None:
        self._thread.start()
        deadline = time.monotonic() + timeout
        # uvicorn sets ``started`` from its own thread and offers nothing to wait on.
        while not self._server.started and self._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        if not self._server.started:
            raise LlogError(f"compactor HTTP server did not start on {self.host}:{self.port}")
        log.info("compactor HTTP on http://%s:%d", self.host, self.port)

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(10)
        self._sock.close()
