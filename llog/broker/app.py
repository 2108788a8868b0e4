"""The broker's HTTP API (starlette): the app built from the route table
(``routes/``), opened and closed in its lifespan, behind a bearer-token check and
per-route request metrics. Shapes and status codes: ``schemas.py`` and
``GET /openapi.json``."""

from __future__ import annotations

import asyncio
import hmac
import socket
import ssl
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, cast

import anyio.to_thread
from starlette.applications import Starlette
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from llog.broker.exception_handlers import EXCEPTION_HANDLERS
from llog.broker.responses import error_response
from llog.broker.routes import PUBLIC_ROUTES, ROUTES, starlette_routes
from llog.broker.state import Broker
from llog.config import LlogConfig

if TYPE_CHECKING:
    from llog.kafka.listener import KafkaListener

__all__ = ["ROUTES", "BrokerApp", "create_app"]


class BrokerApp:
    """The broker's ASGI app. Outermost layer: bearer-token check and per-route
    request metrics; :meth:`begin_shutdown` starts a graceful stop."""

    def __init__(self, app: ASGIApp, broker_ref: Callable[[], Broker | None], token: str | None) -> None:
        self.app = app
        self.broker_ref = broker_ref
        self.token = token.encode() if token else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        route = path if path in ROUTES else "other"
        status = [500]

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        start = time.perf_counter()
        try:
            if self.token is not None and path not in PUBLIC_ROUTES and not self._authorized(scope):
                resp = error_response(401, "Unauthorized", "missing or wrong bearer token")
                resp.headers["www-authenticate"] = "Bearer"
                await resp(scope, receive, send_wrapper)
            else:
                await self.app(scope, receive, send_wrapper)
        finally:
            broker = self.broker_ref()
            if broker is not None:
                m = broker.conn.metrics
                m.http_requests.labels(route, str(status[0])).inc()
                m.http_latency.labels(route).observe(time.perf_counter() - start)

    def begin_shutdown(self) -> None:
        """Before the server waits for in-flight requests: drain the producer (so held
        produces get their answer) and end long-polls, on a background thread."""
        broker = self.broker_ref()
        if broker is None:
            return
        if broker.tails is not None:
            broker.tails.release_waiters()
        threading.Thread(target=broker.producer.close, name="llog-broker-drain", daemon=True).start()

    def _authorized(self, scope: Scope) -> bool:
        assert self.token is not None
        for name, value in scope["headers"]:
            if name == b"authorization":
                scheme, _, cred = value.partition(b" ")
                return scheme.lower() == b"bearer" and hmac.compare_digest(cred.strip(), self.token)
        return False


def create_app(
    config: LlogConfig,
    *,
    on_ready: Callable[[Broker], None] | None = None,
    host: str | None = None,
    port: int | None = None,
    kafka_sock: socket.socket | None = None,
    kafka_tls: ssl.SSLContext | None = None,
) -> BrokerApp:
    """The broker as an ASGI app; resources open in its lifespan (with the Kafka
    listener on ``kafka_sock`` when given, with TLS when ``kafka_tls`` is). ``host`` and ``port`` are where it
    listens, as ``/health`` reports them (default: the config's)."""

    def open_broker() -> Broker:
        return Broker(config, host=config.broker_host if host is None else host,
                      port=config.broker_port if port is None else port)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        b = await anyio.to_thread.run_sync(open_broker)
        b.start(asyncio.get_running_loop())
        kafka: KafkaListener | None = None
        try:
            if kafka_sock is not None:
                from llog.kafka.listener import KafkaListener  # llog.kafka builds on llog.broker

                kafka = KafkaListener(b, kafka_sock, kafka_tls, config.kafka_advertised_host)
                await kafka.start()
                b.kafka_port = kafka.port
            app.state.broker = b
            if on_ready is not None:
                on_ready(b)
            yield
        finally:
            if kafka is not None:
                await kafka.close()
            await anyio.to_thread.run_sync(b.close)

    app = Starlette(routes=starlette_routes(), exception_handlers=EXCEPTION_HANDLERS, lifespan=lifespan)
    return BrokerApp(app, lambda: cast("Broker | None", getattr(app.state, "broker", None)), config.broker_token)
