"""The broker's HTTP API: an ASGI app that dispatches the route table (``routes/``)
itself, behind authentication (``http_auth.py``: the bearer token or users) and
per-route request metrics, with the broker opened and closed in the lifespan. Shapes
and status codes: ``schemas.py`` and ``GET /openapi.json``.

Starlette supplies the request and response classes only: its router and middleware
stack cost more CPU than the produce handler itself (py-spy at 2,000 single-record
requests/s: about half of the event loop's time), and a table of ten exact paths
needs neither."""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.types import Message, Receive, Scope, Send

from llog.broker import quota_check
from llog.broker.directory import ZONE_HEADER
from llog.broker.exception_handlers import error_answer
from llog.broker.http_auth import CALLER_SCOPE_KEY, HttpAuth
from llog.broker.responses import error_response
from llog.broker.routes import ENDPOINTS, REGISTRY, ROUTES, Endpoint
from llog.broker.routes.schema_registry import ROOTS as REGISTRY_ROOTS
from llog.broker.state import BROKER_SCOPE_KEY, Broker, WorkerPlace
from llog.config import LlogConfig

if TYPE_CHECKING:
    from llog.kafka.listener import KafkaListener

__all__ = ["ROUTES", "BrokerApp", "create_app"]

log = logging.getLogger(__name__)

_ZONE_HEADER = ZONE_HEADER.encode()  # ASGI's header names: lower-case bytes


class BrokerApp:
    """The broker's ASGI app: lifespan (open the broker, and the Kafka listener when
    asked), then per request the authentication, the route, the handler and the
    per-route metrics; :meth:`begin_shutdown` starts a graceful stop."""

    def __init__(self, open_broker: Callable[[], Broker], *,
                 on_ready: Callable[[Broker], None] | None = None,
                 kafka: Callable[[Broker], KafkaListener] | None = None) -> None:
        self.open_broker = open_broker
        self.auth: HttpAuth | None = None
        self.on_ready = on_ready
        self.kafka_factory = kafka
        self.kafka: KafkaListener | None = None
        self.broker: Broker | None = None
        self.routes: dict[str, Endpoint] = {e.path: e for e in ENDPOINTS}
        #: The broker's zone as the ``Llog-Zone`` answer header carries it (set at start).
        self._zone_header: bytes | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"]
        endpoint = self.routes.get(path)
        if endpoint is None and path.split("/", 2)[1] in REGISTRY_ROOTS:
            endpoint = REGISTRY
        status = 500
        # A broker with a zone names it on every answer (``Llog-Zone``), so a client can
        # tell it crossed one, and counts the requests of clients naming another zone.
        zone = self._zone_header
        caller_zone = None
        if zone is not None:
            caller_zone = next((v for k, v in scope["headers"] if k == _ZONE_HEADER), None)

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                if zone is not None:
                    message = {**message, "headers": [*message.get("headers", ()), (_ZONE_HEADER, zone)]}
            await send(message)

        start = time.perf_counter()
        try:
            request = Request(scope, receive)
            scope[BROKER_SCOPE_KEY] = self.broker
            resp = await self._answer(endpoint, request)
            await resp(scope, receive, send_wrapper)
        finally:
            if self.broker is not None:
                m = self.broker.conn.metrics
                route = path if endpoint is not None else "other"
                if endpoint is REGISTRY:  # one label per API, not per subject
                    route = "/" + path.split("/", 2)[1]
                m.http_requests.labels(route, str(status)).inc()
                if caller_zone is not None and caller_zone != zone:
                    m.http_other_zone.labels(route).inc()
                m.http_latency.labels(route).observe(time.perf_counter() - start)

    async def _answer(self, endpoint: Endpoint | None, request: Request) -> Response:
        method = request.method
        # Authentication first, for every path but the public ones: an unauthenticated
        # client learns nothing about which other paths exist.
        if not (endpoint is not None and endpoint.public):
            assert self.auth is not None
            caller = await self.auth.caller(request.scope)
            if caller is None:
                resp = error_response(401, "Unauthorized", "missing or wrong credentials (bearer token"
                                      + (" or a user's Basic credentials)" if self.auth.users else ")"))
                resp.headers["www-authenticate"] = 'Basic realm="llog"' if self.auth.users else "Bearer"
                return resp
            request.scope[CALLER_SCOPE_KEY] = caller
        if endpoint is None:
            path = request.url.path
            other = path[:-1] if path.endswith("/") else f"{path}/"
            if other in self.routes:  # as Starlette's router did: 307 keeps method and body
                return RedirectResponse(str(request.url.replace(path=other)), status_code=307)
            return error_response(404, "NotFound", f"Not Found: {method} {path}")
        if endpoint.method != "*" and method != endpoint.method and not (method == "HEAD" and endpoint.method == "GET"):
            resp = error_response(405, "MethodNotAllowed", f"Method Not Allowed: {method} {endpoint.path}")
            resp.headers["allow"] = endpoint.method
            return resp
        caller = request.scope.get(CALLER_SCOPE_KEY)
        b = self.broker
        if caller is not None and b is not None and (over := quota_check.refused(b, caller, request, endpoint.path)):
            return over
        try:
            resp = await endpoint.handler(request)
            if caller is not None and b is not None:
                quota_check.count(b, caller, request, endpoint.path, resp)
            return resp
        except Exception as exc:
            answer = error_answer(exc)
            if answer is None:
                log.error("%s %s failed", method, endpoint.path, exc_info=exc)
                return error_response(500, "InternalError", f"{type(exc).__name__}: {exc}")
            return answer

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        """The ASGI lifespan protocol: open everything on startup, close it on shutdown."""
        await receive()  # lifespan.startup
        kafka: KafkaListener | None = None
        try:
            b = self.broker = await anyio.to_thread.run_sync(self.open_broker)
            self.auth = HttpAuth(b)
            self._zone_header = None if b.config.zone is None else b.config.zone.encode()
            b.start(asyncio.get_running_loop())
            if self.kafka_factory is not None:
                kafka = self.kafka = self.kafka_factory(b)
                await kafka.start()
                b.kafka_port = kafka.port
            if self.on_ready is not None:
                self.on_ready(b)
        except BaseException as exc:
            if kafka is not None:
                await kafka.close()
            if self.broker is not None:
                await anyio.to_thread.run_sync(self.broker.close)
            await send({"type": "lifespan.startup.failed", "message": f"{type(exc).__name__}: {exc}"})
            raise
        await send({"type": "lifespan.startup.complete"})
        await receive()  # lifespan.shutdown
        try:
            if kafka is not None:
                await kafka.close()
            await anyio.to_thread.run_sync(b.close)
        finally:
            await send({"type": "lifespan.shutdown.complete"})

    def begin_shutdown(self) -> None:
        """Before the server waits for in-flight requests: drain the producer (so held
        produces get their answer) and end long-polls, on a background thread."""
        broker = self.broker
        if broker is None:
            return
        if self.kafka is not None:
            self.kafka.begin_drain()
        if broker.tails is not None:
            broker.tails.release_waiters()
        threading.Thread(target=broker.producer.close, name="llog-broker-drain", daemon=True).start()


def create_app(
    config: LlogConfig,
    *,
    on_ready: Callable[[Broker], None] | None = None,
    host: str | None = None,
    port: int | None = None,
    kafka_sock: socket.socket | None = None,
    kafka_zone_socks: dict[str, socket.socket] | None = None,
    kafka_tls: ssl.SSLContext | None = None,
    place: WorkerPlace | None = None,
) -> BrokerApp:
    """The broker as an ASGI app; resources open in its lifespan (with the Kafka
    listener on ``kafka_sock`` when given, with TLS when ``kafka_tls`` is). ``host`` and ``port`` are where it
    listens, as ``/health`` reports them (default: the config's); ``place``, a worker's
    place among its siblings."""

    def open_broker() -> Broker:
        return Broker(config, host=config.broker_host if host is None else host,
                      port=config.broker_port if port is None else port, place=place)

    kafka: Callable[[Broker], KafkaListener] | None = None
    if kafka_sock is not None:
        from llog.kafka.listener import KafkaListener  # llog.kafka builds on llog.broker

        sock = kafka_sock

        def kafka(b: Broker) -> KafkaListener:
            return KafkaListener(b, sock, kafka_tls, config.kafka_advertised_host, kafka_zone_socks)

    return BrokerApp(open_broker, on_ready=on_ready, kafka=kafka)
