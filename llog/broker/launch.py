"""Where a broker starts: one process, or a parent and its workers."""

from __future__ import annotations

from llog.broker.server import serve_one
from llog.broker.sockets import OnReady
from llog.broker.workers import serve_workers
from llog.config import LlogConfig


def serve(
    config: LlogConfig,
    *,
    host: str | None = None,
    port: int | None = None,
    on_ready: OnReady | None = None,
) -> int:
    """Serve until stopped; returns the exit status (0: a clean stop).
    ``on_ready(url, kafka_port)`` runs once the broker accepts requests. ``port=0``
    picks a free port (the URL tells which). With ``broker_workers`` > 1 the broker is
    that many processes (:func:`llog.broker.workers.serve_workers`)."""
    host = host or config.broker_host
    port = config.broker_port if port is None else port
    if config.broker_workers > 1:
        return serve_workers(config, host=host, port=port, on_ready=on_ready)
    return serve_one(config, host=host, port=port, on_ready=on_ready)
