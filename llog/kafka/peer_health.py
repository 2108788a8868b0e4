"""Which registered brokers answer. A broker's registration lease outlives a pause of
its process by the lease's TTL, and a paused process still completes TCP handshakes,
so neither says a broker has stopped answering. Each broker therefore keeps one
connection to every other registered broker's Kafka listener and sends it an
ApiVersions request every ``interval_s``: a peer that leaves one unanswered for
``timeout_s``, or refuses the connection, is *silent* until it answers again.
Metadata and FindCoordinator leave silent peers out, so clients move their partitions
and groups within about a second of a pause or a crash, not after a lease or a
client's 30 s request timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import struct
from collections.abc import Callable

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
    :meth:`silent` is the set of node ids not answering. ``tls``: the peers' listeners
    speak TLS (probes do not check certificates: they ask only whether a process
    answers)."""

    def __init__(
        self, self_id: Callable[[], int], peers: Callable[[], list[BrokerNode]], metrics: Metrics, *,
        tls: bool, interval_s: float, timeout_s: float,
    ) -> None:
        self._self_id = self_id
        self._peers = peers
        self._metrics = metrics
        self._tls: ssl.SSLContext | None = None
        if tls:
            self._tls = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            self._tls.check_hostname = False
            self._tls.verify_mode = ssl.CERT_NONE
        self.interval_s, self.timeout_s = interval_s, timeout_s
        self._silent: set[int] = set()
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
        """Keep one probe per registered peer (a node re-registered at another address
        is a new peer)."""
        while not self._closing:
            me = self._self_id()
            wanted = {n for n in self._peers() if n.node_id != me}
            for node in [n for n in self._probes if n not in wanted]:
                self._probes.pop(node).cancel()
                if node.node_id in self._silent:  # gone from the registry: no longer ours to judge
                    self._silent.discard(node.node_id)
                    self._metrics.kafka_peers_silent.dec()
            for node in wanted - self._probes.keys():
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
                while not self._closing:
                    asked = loop.time()
                    opened.write(_PROBE)
                    await asyncio.wait_for(self._answer(reader), self.timeout_s)
                    answered = True
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

    @staticmethod
    async def _answer(reader: asyncio.StreamReader) -> None:
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        if not 0 < size <= _MAX_ANSWER:
            raise ValueError(f"an ApiVersions answer of {size} bytes")
        await reader.readexactly(size)

    def _mark(self, node: BrokerNode, *, silent: bool, why: BaseException | None = None) -> None:
        was = node.node_id in self._silent
        if silent and not was:
            self._silent.add(node.node_id)
            log.warning("Kafka node %d (%s:%d) is not answering (%s): left out of Metadata until it does",
                        node.node_id, node.host, node.port, type(why).__name__ if why else "?")
            self._metrics.kafka_peers_silent.inc()
        elif not silent and was:
            self._silent.discard(node.node_id)
            log.warning("Kafka node %d (%s:%d) answers again", node.node_id, node.host, node.port)
            self._metrics.kafka_peers_silent.dec()
