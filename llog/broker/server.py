"""Run the broker under uvicorn in this process until SIGINT/SIGTERM: a broker of one
process, or one worker of several (``llog/broker/workers.py``; which one starts:
``llog/broker/launch.py``)."""

from __future__ import annotations

import contextlib
import signal
import socket
from collections.abc import Iterator
from types import FrameType

import uvicorn

from llog.broker.app import create_app
from llog.broker.sockets import OnReady, listening_socket, zone_sockets
from llog.broker.state import WorkerPlace, listen_url
from llog.config import LlogConfig
from llog.errors import ConfigError
from llog.state.cluster_format import check_at_start
from llog.tls import check_server_files


class _Server(uvicorn.Server):
    """uvicorn re-raises a captured SIGTERM after its graceful shutdown, killing the
    process with the signal; :func:`serve_sockets` handles signals itself to exit with 0."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def serve_one(config: LlogConfig, *, host: str, port: int, on_ready: OnReady | None = None) -> int:
    """Serve in this one process until stopped (:func:`llog.broker.launch.serve`);
    returns 0 on a clean stop."""
    sock = listening_socket(host, port, "broker")
    kafka_sock = None
    zones: dict[str, socket.socket] = {}
    if config.kafka_port is not None:
        try:
            kafka_sock = listening_socket(config.kafka_host or host, config.kafka_port, "Kafka listener")
            zones = zone_sockets(config, host)
        except ConfigError:
            for s in (sock, kafka_sock):
                if s is not None:
                    s.close()
            raise
    serve_sockets(config, sock, kafka_sock=kafka_sock, kafka_zone_socks=zones, on_ready=on_ready)
    return 0


def serve_sockets(
    config: LlogConfig,
    sock: socket.socket,
    *,
    kafka_sock: socket.socket | None = None,
    kafka_zone_socks: dict[str, socket.socket] | None = None,
    private_sock: socket.socket | None = None,
    place: WorkerPlace | None = None,
    on_ready: OnReady | None = None,
) -> None:
    """Serve on sockets already listening (closed on return): HTTP on ``sock`` (and on
    ``private_sock``, a worker's own address), Kafka on ``kafka_sock`` (and for the
    clients of a zone on its socket of ``kafka_zone_socks``)."""
    try:
        from llog.kafka.listener import tls_context  # llog.kafka builds on llog.broker

        kafka_tls = None if kafka_sock is None else tls_context(config)  # a bad certificate fails here
        check_server_files(config)  # a bad certificate fails here, before anything starts
        if place is None:  # a worker's parent checked before it forked (serve_workers)
            check_at_start(config)  # a release too old for the cluster's format stops here
        bound_host, bound_port = sock.getsockname()[:2]
        url = listen_url(bound_host, bound_port, tls=config.broker_tls_cert_file is not None)
        app = create_app(
            config,
            on_ready=None if on_ready is None else (lambda b: on_ready(url, b.kafka_port)),
            host=bound_host,
            port=bound_port,
            kafka_sock=kafka_sock,
            kafka_zone_socks=kafka_zone_socks,
            kafka_tls=kafka_tls,
            place=place,
        )
        server = _Server(uvicorn.Config(
            app, log_level="warning", lifespan="on", timeout_graceful_shutdown=10, access_log=False,
            # Nothing reads client addresses: skip the X-Forwarded-* rewrite on every request.
            proxy_headers=False, ssl_certfile=config.broker_tls_cert_file, ssl_keyfile=config.broker_tls_key_file,
        ))

        def stop(sig: int, _frame: FrameType | None) -> None:
            # A second Ctrl-C skips the graceful wait.
            server.force_exit = server.should_exit and sig == signal.SIGINT
            if not server.should_exit:
                app.begin_shutdown()
            server.should_exit = True

        previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            server.run(sockets=[sock] if private_sock is None else [sock, private_sock])
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    finally:
        for s in (sock, kafka_sock, private_sock, *(kafka_zone_socks or {}).values()):
            if s is not None:
                s.close()
