"""Run the broker under uvicorn until SIGINT/SIGTERM."""

from __future__ import annotations

import contextlib
import signal
import socket
from collections.abc import Callable, Iterator
from types import FrameType

import uvicorn

from llog.broker.app import create_app
from llog.broker.state import listen_url
from llog.config import LlogConfig
from llog.errors import ConfigError


class _Server(uvicorn.Server):
    """uvicorn re-raises a captured SIGTERM after its graceful shutdown, killing the
    process with the signal; :func:`serve` handles signals itself to exit with 0."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def serve(
    config: LlogConfig,
    *,
    host: str | None = None,
    port: int | None = None,
    on_ready: Callable[[str, int | None], None] | None = None,
) -> None:
    """Serve until stopped; ``on_ready(url, kafka_port)`` runs once the broker accepts
    requests. ``port=0`` picks a free port (the URL tells which)."""
    host = host or config.broker_host
    port = config.broker_port if port is None else port
    sock = listening_socket(host, port, "broker")
    kafka_sock, kafka_tls = None, None
    if config.kafka_port is not None:
        from llog.kafka.listener import tls_context  # llog.kafka builds on llog.broker

        try:
            kafka_tls = tls_context(config)  # a bad certificate fails here, before start-up
            kafka_sock = listening_socket(config.kafka_host or host, config.kafka_port, "Kafka listener")
        except ConfigError:
            sock.close()
            raise
    bound_host, bound_port = sock.getsockname()[:2]
    url = listen_url(bound_host, bound_port)
    app = create_app(
        config,
        on_ready=None if on_ready is None else (lambda b: on_ready(url, b.kafka_port)),
        host=bound_host,
        port=bound_port,
        kafka_sock=kafka_sock,
        kafka_tls=kafka_tls,
    )
    server = _Server(uvicorn.Config(
        app, log_level="warning", lifespan="on", timeout_graceful_shutdown=10, access_log=False,
        # Nothing reads client addresses: skip the X-Forwarded-* rewrite on every request.
        proxy_headers=False,
    ))

    def stop(sig: int, _frame: FrameType | None) -> None:
        # A second Ctrl-C skips the graceful wait.
        server.force_exit = server.should_exit and sig == signal.SIGINT
        if not server.should_exit:
            app.begin_shutdown()
        server.should_exit = True

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        server.run(sockets=[sock])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sock.close()
        if kafka_sock is not None:
            kafka_sock.close()


def listening_socket(host: str, port: int, what: str) -> socket.socket:
    """A TCP socket listening on ``host:port`` (bound before start-up, so a busy port is
    a one-line error and early clients queue in the backlog instead of failing)."""
    # proto=IPPROTO_TCP: asyncio sets TCP_NODELAY only on sockets that say so; without
    # it every response waits ~40 ms for Nagle against the client's delayed ACK.
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"{what} cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    sock.listen(2048)
    return sock
