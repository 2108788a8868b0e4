"""PeerHealth against real sockets: a peer that refuses connections or never answers
is silent, one that answers is not, and close() always ends its probes (a refused
connection completes in the same loop turn as the cancel, which asyncio.wait_for
before 3.12 would swallow)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest

from llog.kafka.peer_health import PeerHealth
from llog.kafka.registry import BrokerNode
from llog.local_ports import free_port
from llog.metrics import Metrics


@asynccontextmanager
async def _health(nodes: list[BrokerNode], *, interval_s: float, timeout_s: float) -> AsyncIterator[PeerHealth]:
    health = PeerHealth(lambda: -1, lambda: nodes, Metrics(), tls=False, interval_s=interval_s, timeout_s=timeout_s)
    health.start()
    try:
        yield health
    finally:
        await asyncio.wait_for(health.close(), 10)


async def _until(check: Callable[[], bool]) -> None:
    while not check():
        await asyncio.sleep(0.01)


def test_close_ends_probes_of_a_refusing_peer_every_time() -> None:
    async def run() -> None:
        port = free_port()
        for i in range(400):
            health = PeerHealth(lambda: -1, lambda: [BrokerNode(1, "127.0.0.1", port)], Metrics(), tls=False,
                                interval_s=0, timeout_s=1)
            health.start()
            for _ in range(i % 20):  # land the close at every point of the probe's loop
                await asyncio.sleep(0)
            await asyncio.wait_for(health.close(), 10)

    asyncio.run(run())


def _answering(answered: list[None]) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
    """A peer's connection handler that answers every request with an empty 8-byte
    frame, noting each answer in ``answered``."""
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            size = int.from_bytes(await reader.readexactly(4), "big")
            await reader.readexactly(size)
            writer.write((8).to_bytes(4, "big") + bytes(8))
            await writer.drain()
            answered.append(None)
    return answer


def test_a_refusing_peer_is_silent_and_an_answering_one_is_not() -> None:
    answered: list[None] = []

    async def run() -> None:
        server = await asyncio.start_server(_answering(answered), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        nodes = [BrokerNode(1, "127.0.0.1", port), BrokerNode(2, "127.0.0.1", free_port())]
        async with _health(nodes, interval_s=0.05, timeout_s=1) as health:
            await asyncio.wait_for(_until(lambda: health.silent() == {2} and len(answered) >= 3), 10)
            assert health.silent() == {2}  # several rounds answered: never judged silent
        server.close()
        await server.wait_closed()

    asyncio.run(run())


def test_a_peer_that_accepts_but_never_answers_is_silent() -> None:
    async def mute(reader: asyncio.StreamReader, _writer: asyncio.StreamWriter) -> None:
        await reader.read()  # holds the connection, answers nothing

    async def run() -> None:
        server = await asyncio.start_server(mute, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with _health([BrokerNode(3, "127.0.0.1", port)], interval_s=0.05, timeout_s=0.2) as health:
            await asyncio.wait_for(_until(lambda: health.silent() == {3}), 10)
        server.close()
        await server.wait_closed()

    asyncio.run(run())


def test_a_new_process_answering_for_a_silent_node_is_not_taken_for_the_old_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Node 1's process stops answering; another process takes node 1 at the same address
    (a restart) before this broker's cached registry says so. Its answer is not reported
    as the old process answering again: a fresh read names the new one, which becomes the
    peer (logged), and the old one's silence is forgotten, metric series included."""
    port = free_port()
    old = BrokerNode(1, "127.0.0.1", port, "host-a", 100, "old")
    new = BrokerNode(1, "127.0.0.1", port, "host-a", 100, "new")  # a container's pid repeats
    registry = {"cached": [old], "etcd": [old]}

    def fresh() -> list[BrokerNode]:  # as BrokerRegistry.registered(0): the read refreshes the cache
        registry["cached"] = registry["etcd"]
        return registry["etcd"]

    async def run() -> None:
        metrics = Metrics()
        health = PeerHealth(lambda: -1, lambda: registry["cached"], metrics, tls=False, interval_s=0.05,
                            timeout_s=1, fresh_peers=fresh)
        health.start()
        try:
            await asyncio.wait_for(_until(lambda: health.silent() == {1}), 10)
            assert metrics.value("llog_kafka_peer_silent", node_id="1", address=f"127.0.0.1:{port}", pid="100",
                                 instance="old") == 1
            registry["etcd"] = [new]
            server = await asyncio.start_server(_answering([]), "127.0.0.1", port)
            try:
                await asyncio.wait_for(_until(lambda: not health.silent()), 10)
                await asyncio.wait_for(_until(lambda: "registered by another process" in caplog.text), 10)
            finally:
                server.close()
                await server.wait_closed()
        finally:
            await asyncio.wait_for(health.close(), 10)
        assert metrics.value("llog_kafka_peers_silent") == 0
        assert metrics.registry.get_sample_value("llog_kafka_peer_silent", {
            "node_id": "1", "address": f"127.0.0.1:{port}", "pid": "100", "instance": "old"}) is None
        assert "answers again" not in caplog.text
        assert f"Kafka {new} is registered by another process now: was {old}" in caplog.text

    with caplog.at_level(logging.WARNING, logger="llog.kafka.peer_health"):
        asyncio.run(run())
