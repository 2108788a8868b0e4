"""The broker's listening sockets, bound before it starts (one process, or the parent
of its workers), and what it calls once they serve."""

from __future__ import annotations

import socket
from collections.abc import Callable

from llog.config import LlogConfig, zone_listener
from llog.errors import ConfigError

#: ``on_ready(url, kafka_port)``: the broker accepts requests at ``url`` (and Kafka
#: clients at ``kafka_port``, when it has a listener).
OnReady = Callable[[str, int | None], None]


def zone_sockets(config: LlogConfig, host: str, worker: int = 0) -> dict[str, socket.socket]:
    """A listening socket per ``kafka_zone_listeners`` entry (worker ``worker``'s own:
    the port + ``worker``, or any free one for port 0); all or none."""
    out: dict[str, socket.socket] = {}
    try:
        for zone, port in map(zone_listener, config.kafka_zone_listeners):
            out[zone] = listening_socket(config.kafka_host or host, port + worker if port else 0,
                                         f"Kafka listener for zone {zone}")
    except ConfigError:
        for s in out.values():
            s.close()
        raise
    return out


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
