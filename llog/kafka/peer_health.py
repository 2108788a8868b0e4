"""Which registered brokers answer. A broker's registration lease outlives a pause of
its process by the lease's TTL, and a paused process still completes TCP handshakes,
so neither says a broker has stopped answering. Each broker therefore keeps one
connection to every other registered broker's Kafka listener and sends it an
ApiVersions request every ``interval_s``: a peer that leaves one unanswered for
``timeout_s``, or refuses the connection, is *silent* until it answers again.
Metadata and FindCoordinator leave silent peers out, so clients move their partitions
and groups within about a second of a pause or a crash, not after a lease or a
client's 30 s request timeout.

A peer is a registration: a node id, an address and the process registered there
(:class:`BrokerNode`). A broker restarted at its address takes its node id back while
its old registration lingers, and whatever listens at the address answers the probe,
so a silent peer's answer counts only once a fresh read of the registry still names
the process judged silent; otherwise the new process is a new peer (logged as such).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import struct
from collections.abc import Callable

from llog.errors import CoordinationError
from llog.kafka.registry import BrokerNode
from llog.metrics import Metrics

log = logging.getLogger(__name__)

#: ApiVersions v0, correlation id 0, client id "llog-peer-health", framed.
_CLIENT_ID = b"llog-peer-health"
_PROBE = struct.pack(">ihhih", 2 + 2 + 4 + 2 + len(_CLIENT_ID), 18, 0, 0, len(_CLIENT_ID)) + _CLIENT_ID
#: An ApiVersions answer is a few hundred bytes; more is not a broker of ours.
_MAX_ANSWER = 64 * 1024


class PeerHealth:
    """Probes the peers ``peers()`` names (this broker excluded) from the event loop;
    :meth:`silent` is the set of node ids not answering. ``fresh_peers`` reads the
    registry now (on a thread; default ``peers``). ``tls``: the peers' listeners
    speak TLS (probes do not check certificates: they ask only whether a process
    answers)."""

    def __init__(
        self, self_id: Callable[[], int], peers: Callable[[], list[BrokerNode]], metrics: Metrics, *,
        tls: bool, interval_s: float, timeout_s: float, fresh_peers: Callable[[], list[BrokerNode]] | None = None,
        reconnect_s: float = float("inf"),
    ) -> None:
        self._self_id = self_id
        self._peers = peers
        self._fresh_peers = fresh_peers or peers
        #: A probe closes its connection itself this long after opening it, before a
        #: peer that wants clients to authenticate (a probe never does) closes it and
        #: logs a client that "did not authenticate".
        self.reconnect_s = reconnect_s
        self._metrics = metrics
        self._tls: ssl.SSLContext | None = None
        if tls:
            self._tls = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            self._tls.check_hostname = False
            self._tls.verify_mode = ssl.CERT_NONE
        self.interval_s, self.timeout_s = interval_s, timeout_s
        #: Node id -> the registration judged silent.
        self._silent: dict[int, BrokerNode] = {}
        self._probes: dict[BrokerNode, asyncio.Task[None]] = {}
        self._task: asyncio.Task[None] | None = None
        # Cancelling is not enough: asyncio.wait_for (before 3.12) swallows a cancel that
        # lands as its inner future completes (a refused connection is instant), and the
        # probe would then loop on; the loops also check this flag.
        self._closing = False

    def silent(self) -> frozenset[int]:
        return frozenset(self._silent)

    def start(self) -> None:
        self._task = asyncio.create_task(self._follow())

    async def close(self) -> None:
        self._closing = True
        tasks = [t for t in (self._task, *self._probes.values()) if t is not None]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        self._probes.clear()

    async def _follow(self) -> None:
        """Keep one probe per registered peer (a node re-registered at another address,
        or by another process, is a new peer)."""
        while not self._closing:
            me = self._self_id()
            wanted = {n for n in self._peers() if n.node_id != me}
            for node in [n for n in self._probes if n not in wanted]:
                self._probes.pop(node).cancel()
                now = next((n for n in wanted if n.node_id == node.node_id), None)
                if now is not None:
                    log.warning("Kafka %s is registered by another process now: was %s", now, node)
                if self._silent.get(node.node_id) == node:  # gone from the registry: no longer ours to judge
                    self._forget(node)
            for node in wanted:
                if node not in self._probes or self._probes[node].done():  # done: it saw another process there
                    self._probes[node] = asyncio.create_task(self._probe(node))
            await asyncio.sleep(self.interval_s)

    async def _probe(self, node: BrokerNode) -> None:
        loop = asyncio.get_running_loop()
        while not self._closing:
            writer: asyncio.StreamWriter | None = None
            answered = False
            asked = loop.time()
            try:
                reader, opened = await asyncio.wait_for(
                    asyncio.open_connection(node.host, node.port, ssl=self._tls), self.timeout_s)
                writer = opened
                opened_at = loop.time()
                while not self._closing and loop.time() - opened_at < self.reconnect_s:
                    asked = loop.time()
                    opened.write(_PROBE)
                    await asyncio.wait_for(self._answer(reader), self.timeout_s)
                    answered = True
                    if node.node_id in self._silent and not await self._still_registered(node):
                        return  # another process answers at its address: _follow probes that one
                    self._mark(node, silent=False)
                    await asyncio.sleep(self.interval_s)
            except TimeoutError as exc:
                # Far past the deadline: this broker's own loop was late (it was paused,
                # or stalled), so the silence proves nothing about the peer; ask again.
                if loop.time() - asked > 2 * self.timeout_s:
                    answered = True
                else:
                    self._mark(node, silent=True, why=exc)
            except (asyncio.IncompleteReadError, ConnectionResetError) as exc:
                # A peer that answered and then closed the connection (its auth or idle
                # timeout) is asked again at once; only a second failure counts.
                if not answered:
                    self._mark(node, silent=True, why=exc)
            except (OSError, ssl.SSLError, ValueError) as exc:
                self._mark(node, silent=True, why=exc)
            finally:
                if writer is not None:
                    writer.close()
            if not answered:
                await asyncio.sleep(self.interval_s)

    async def _still_registered(self, node: BrokerNode) -> bool:
        try:
            return node in await asyncio.to_thread(self._fresh_peers)
        except CoordinationError:  # the registry cannot say: the answer counts
            return True

    @staticmethod
    async def _answer(reader: asyncio.StreamReader) -> None:
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        if not 0 < size <= _MAX_ANSWER:
            raise ValueError(f"an ApiVersions answer of {size} bytes")
        await reader.readexactly(size)

    def _mark(self, node: BrokerNode, *, silent: bool, why: BaseException | None = None) -> None:
        held = self._silent.get(node.node_id)
        if silent and held != node:
            if held is not None:  # an earlier process of the node id, judged before
                self._forget(held)
            self._silent[node.node_id] = node
            log.warning("Kafka %s is not answering (%s): left out of Metadata until it does", node,
                        type(why).__name__ if why else "?")
            self._metrics.kafka_peers_silent.inc()
            self._metrics.kafka_peer_silent.labels(*_labels(node)).set(1)
        elif not silent and held is not None:
            self._forget(held)
            if held == node:  # else a new process of the node id answers: _follow says so
                log.warning("Kafka %s answers again", node)

    def _forget(self, node: BrokerNode) -> None:
        """``node`` no longer counts as silent."""
        del self._silent[node.node_id]
        self._metrics.kafka_peers_silent.dec()
        self._metrics.kafka_peer_silent.remove(*_labels(node))


def _labels(node: BrokerNode) -> tuple[str, str, str, str]:
    """``llog_kafka_peer_silent``'s labels: which registration, and which process."""
    return str(node.node_id), f"{node.host}:{node.port}", str(node.pid), node.instance
