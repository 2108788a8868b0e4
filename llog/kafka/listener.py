"""The Kafka listener: an asyncio server in the broker's event loop. Each connection
reads size-prefixed requests and answers them in the order they came (the protocol's
rule), while later requests are already being handled: a produce is handed to the
batching producer before the next request is read, so appends keep the order a client
sent them in, and a long-polling fetch does not hold the connection's other requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import struct
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kafka.protocol.api_message import ApiMessage
from kafka.protocol.metadata import ApiVersionsRequest

from llog.config import LlogConfig
from llog.errors import ConfigError
from llog.kafka.apis import API_BY_KEY, SASL_AUTHENTICATE, SASL_HANDSHAKE, Context, unsupported_response
from llog.kafka.coordinator import Coordinator
from llog.kafka.registry import BrokerRegistry
from llog.kafka.sasl import SaslState

if TYPE_CHECKING:
    from llog.broker.state import Broker

log = logging.getLogger(__name__)

#: Requests one connection may have in progress before the listener stops reading it.
MAX_INFLIGHT_PER_CONNECTION = 64
#: Largest request frame accepted; a client sending more is disconnected.
MAX_FRAME_BYTES = 100 * 1024 * 1024


class KafkaListener:
    """Serves the Kafka protocol for ``broker`` on ``sock`` (bound and listening), over
    TLS when ``tls`` is given (:func:`tls_context`)."""

    def __init__(
        self, broker: Broker, sock: socket.socket, tls: ssl.SSLContext | None = None,
        advertised_host: str | None = None,
    ) -> None:
        self.broker = broker
        self._sock = sock
        self._tls = tls
        self.host, self.port = sock.getsockname()[:2]
        self._advertised_host = advertised_host
        self._server: asyncio.Server | None = None
        self._connections: dict[asyncio.Task[None], asyncio.StreamWriter] = {}
        self.registry: BrokerRegistry | None = None
        self.context: Context | None = None

    async def start(self) -> None:
        # Registered (a node id) before serving: every request finds the context set up.
        advertised = self._advertised_host or (self.host if self.host not in ("", "0.0.0.0", "::") else "127.0.0.1")
        self.registry = BrokerRegistry(self.broker.conn, advertised, self.port, self.broker.config.session_ttl_s)
        node_id = await asyncio.to_thread(self.registry.start)
        coordinator = Coordinator(self.broker.conn, owner=f"kafka-node-{node_id}")
        coordinator.start()
        self.context = Context(self.broker, self.registry, coordinator)
        self._server = await asyncio.start_server(self._serve, sock=self._sock, limit=1024 * 1024,
                                                  ssl=self._tls)
        log.info("Kafka listener on %s:%d, node id %d", self.host, self.port, self.registry.node_id)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        # Closing a connection ends its read loop, which then stops its sender.
        for writer in list(self._connections.values()):
            writer.close()
        if self._connections:
            await asyncio.wait(list(self._connections), timeout=10)
        if self.context is not None:
            await self.context.coordinator.close()
        if self.registry is not None:
            await asyncio.to_thread(self.registry.close)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections[task] = writer
        metrics = self.broker.conn.metrics
        metrics.kafka_connections.inc()
        answers: asyncio.Queue[_Pending | None] = asyncio.Queue(MAX_INFLIGHT_PER_CONNECTION)
        sasl = SaslState(self.broker.config.broker_token)
        sender = asyncio.create_task(self._send(writer, answers, sasl))
        peer = writer.get_extra_info("peername")
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                if not 0 < size <= MAX_FRAME_BYTES:
                    log.warning("Kafka client %s sent a frame of %d bytes; closing", peer, size)
                    return
                frame = await reader.readexactly(size)
                try:
                    pending = await self._dispatch(frame, sasl)
                except Exception as exc:  # a request that does not decode has no answer: Kafka closes too
                    log.warning("Kafka client %s sent a request that failed (%s); closing", peer, exc)
                    return
                if pending is None:
                    log.warning("Kafka client %s sent a request before authenticating; closing", peer)
                    return
                await answers.put(pending)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            with contextlib.suppress(asyncio.QueueFull):
                answers.put_nowait(None)
            if not sender.done():
                sender.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await sender
            writer.close()
            self._connections.pop(task, None)
            metrics.kafka_connections.dec()

    async def _dispatch(self, frame: bytes, sasl: SaslState) -> _Pending | None:
        """Decode one request and start handling it (``None``: refused before
        authentication, close the connection)."""
        assert self.context is not None
        started = time.perf_counter()
        api_key, version, correlation_id = struct.unpack_from(">hhi", frame, 0)
        api = API_BY_KEY.get(api_key)
        if not sasl.authenticated and api_key not in (ApiVersionsRequest.API_KEY, SASL_HANDSHAKE, SASL_AUTHENTICATE):
            return None
        if api is None or not api.min_version <= version <= api.max_version:
            return _Pending(correlation_id, "UNSUPPORTED", started, _ready(unsupported_response(api_key, version)))
        request = api.request.decode(frame, version=version, header=True)
        name = api.request.name.removesuffix("Request")
        if api_key == SASL_HANDSHAKE:
            return _Pending(correlation_id, name, started, _ready(sasl.handshake(request)))
        if api_key == SASL_AUTHENTICATE:
            return _Pending(correlation_id, name, started, _ready(sasl.authenticate(request)))
        assert api.handler is not None
        answer: Awaitable[ApiMessage | None]
        if api.runs == "ordered":  # acts now, before the next request is read; the answer comes later
            answer = await api.handler(self.context, request)
        elif api.runs == "blocking":
            answer = asyncio.ensure_future(asyncio.to_thread(api.handler, self.context, request))
        else:
            answer = asyncio.ensure_future(api.handler(self.context, request))
        return _Pending(correlation_id, name, started, answer)

    async def _send(self, writer: asyncio.StreamWriter, answers: asyncio.Queue[_Pending | None],
                    sasl: SaslState) -> None:
        metrics = self.broker.conn.metrics
        while (item := await answers.get()) is not None:
            try:
                response = await item.answer
                if response is not None:  # None: acks=0, no answer
                    response.with_header(correlation_id=item.correlation_id)
                    frame = response.encode(header=True, framed=True)  # at the version it was built for
            except Exception:
                log.exception("Kafka %s request failed; closing the connection", item.api)
                writer.close()  # the protocol has no generic error answer for a request
                return
            if response is not None:
                writer.write(frame)
                await writer.drain()
            metrics.kafka_requests.labels(item.api).inc()
            metrics.kafka_latency.labels(item.api).observe(time.perf_counter() - item.started)
            if sasl.failed:  # the client has its answer; an unauthenticated connection ends here
                writer.close()
                return


def tls_context(config: LlogConfig) -> ssl.SSLContext | None:
    """The listener's TLS context, when a certificate is configured."""
    if config.kafka_tls_cert_file is None or config.kafka_tls_key_file is None:
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(config.kafka_tls_cert_file, config.kafka_tls_key_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"Kafka TLS certificate {config.kafka_tls_cert_file!r} / key "
                          f"{config.kafka_tls_key_file!r}: {exc}") from exc
    return ctx


@dataclass(frozen=True)
class _Pending:
    """A request being handled, in the order of its connection's answers."""

    correlation_id: int
    api: str  # for the metrics
    started: float  # perf_counter when it was read
    answer: Awaitable[ApiMessage | None]


async def _ready(value: ApiMessage | None) -> ApiMessage | None:
    return value

