"""The HTTP API's edge, against a real broker process: a body is refused on its declared
size before a byte of it is read, and after the token check; a body that trickles is
cut off with 408; the broker keeps serving others meanwhile."""

from __future__ import annotations

import socket

from llog.config import LlogConfig
from llog.connection import Connection
from llog.topic.admin import Topics
from tests.broker_harness import BrokerProcess, broker_process


def _raw(broker: BrokerProcess, head: str, body: bytes = b"") -> socket.socket:
    s = socket.create_connection((broker.host, broker.port), timeout=30)
    s.sendall(head.encode() + body)
    return s


def _status(s: socket.socket) -> int:
    """The status of the first response on ``s``."""
    data = b""
    while b"\r\n" not in data:
        chunk = s.recv(4096)
        assert chunk, "closed before a response"
        data += chunk
    return int(data.split(b" ", 2)[1])


def _post(path: str, length: int, extra: str = "") -> str:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n{extra}\r\n")


def test_bodies_are_bounded_in_size_and_time(config: LlogConfig) -> None:
    with Connection(config) as conn:
        Topics(conn).create("he", 1)
    with broker_process(config, LLOG_BROKER_BODY_TIMEOUT_S="1", LLOG_BROKER_TOKEN="tok") as broker:
        auth = "Authorization: Bearer tok\r\n"
        # Unauthenticated: 401 before the (never sent) gigabyte is read.
        with _raw(broker, _post("/produce", 1 << 30)) as s:
            assert _status(s) == 401
        # Authenticated but declared over the limit: 413, nothing read.
        with _raw(broker, _post("/produce", 1 << 30, auth)) as s:
            assert _status(s) == 413
        # A body that trickles: 10 of its 100 bytes, then nothing.
        with _raw(broker, _post("/produce", 100, auth), b'{"topic_pa') as s:
            status, _ = broker.request("GET", "/health")  # others are served meanwhile
            assert status == 200
            assert _status(s) == 408
        status, _ = broker.request(
            "POST", "/produce", {"topic_partitions": [{"topic": "he", "partition": 0, "records": ["ok"]}]},
            headers={"authorization": "Bearer tok"})
        assert status == 200
