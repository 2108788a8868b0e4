"""The Kafka listener: an asyncio server in the broker's event loop. Each connection
reads size-prefixed requests and answers them in the order they came (the protocol's
rule), while later requests are already being handled: a produce is handed to the
batching producer before the next request is read, so appends keep the order a client
sent them in, and a long-polling fetch does not hold the connection's other requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import socket
import ssl
import struct
import threading
import time
from collections.abc import Awaitable
from concurrent.futures import Executor
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from kafka.protocol.api_message import ApiMessage
from kafka.protocol.metadata import ApiVersionsRequest

from llog.auth.authorizer import certificate_principal, client_host
from llog.auth.users import Users
from llog.config import LlogConfig
from llog.errors import ConfigError
from llog.kafka import throttling
from llog.kafka.apis import API_BY_KEY, FETCH, PRODUCE, SASL_AUTHENTICATE, SASL_HANDSHAKE, Context, unsupported_response
from llog.kafka.batch_checks import BatchChecker
from llog.kafka.coordinator import Coordinator
from llog.kafka.drain import Drain
from llog.kafka.limits import ConnectionSlots, RequestMemory
from llog.kafka.peer_health import PeerHealth
from llog.kafka.registry import BrokerRegistry
from llog.kafka.sasl import SaslState

if TYPE_CHECKING:
    from llog.broker.state import Broker

log = logging.getLogger(__name__)


class KafkaListener:
    """Serves the Kafka protocol for ``broker`` on ``sock`` (bound and listening), and
    on each of ``zone_socks`` for the clients of its zone (``_serve``'s ``zone``;
    docs/zones.md), over TLS when ``tls`` is given (:func:`tls_context`)."""

    def __init__(
        self, broker: Broker, sock: socket.socket, tls: ssl.SSLContext | None = None,
        advertised_host: str | None = None, zone_socks: dict[str, socket.socket] | None = None,
    ) -> None:
        self.broker = broker
        self._sock = sock
        self._zone_socks = dict(zone_socks or {})
        self._zone_servers: list[asyncio.Server] = []
        self._tls = tls
        self.host, self.port = sock.getsockname()[:2]
        self._advertised_host = advertised_host
        self._server: asyncio.Server | None = None
        self._connections: dict[asyncio.Task[None], _Connection] = {}
        self._sweeper: asyncio.Task[None] | None = None
        cfg = broker.config
        self._slots = ConnectionSlots(cfg.kafka_max_connections, cfg.kafka_max_connections_per_ip)
        self._memory = RequestMemory(cfg.kafka_max_queued_bytes, broker.conn.metrics)
        self.registry: BrokerRegistry | None = None
        self.context: Context | None = None
        self._health: PeerHealth | None = None
        self._announcing: threading.Thread | None = None
        self._users = Users(broker.conn) if broker.config.auth_users else None
        self._drain = Drain()

    async def start(self) -> None:
        # Registered (a node id) before serving: every request finds the context set up.
        advertised = self._advertised_host or (self.host if self.host not in ("", "0.0.0.0", "::") else "127.0.0.1")
        config = self.broker.config
        self.registry = BrokerRegistry(self.broker.conn, advertised, self.port, config.session_ttl_s, config.zone,
                                       {z: s.getsockname()[1] for z, s in self._zone_socks.items()})
        node_id = await asyncio.to_thread(self.registry.start)
        coordinator = Coordinator(self.broker.conn, owner=f"kafka-node-{node_id}")
        coordinator.start()
        self.context = Context(self.broker, self.registry, coordinator, BatchChecker(self.broker.config))
        self._server = await asyncio.start_server(self._serve, sock=self._sock, limit=1024 * 1024,
                                                  ssl=self._tls)
        self._zone_servers = [await asyncio.start_server(partial(self._serve, zone=z), sock=s, limit=1024 * 1024,
                                                         ssl=self._tls) for z, s in self._zone_socks.items()]
        self._sweeper = asyncio.create_task(self._sweep())
        registry = self.registry
        self._health = PeerHealth(lambda: registry.node_id, lambda: registry.registered(float("inf")),
                                  self.broker.conn.metrics, tls=self._tls is not None,
                                  interval_s=self.broker.config.kafka_peer_timeout_s / 2,
                                  timeout_s=self.broker.config.kafka_peer_timeout_s,
                                  fresh_peers=lambda: registry.registered(0.0),
                                  reconnect_s=self.broker.config.kafka_frame_timeout_s / 2)
        registry.silent = self._health.silent
        self._health.start()
        log.info("Kafka listener on %s:%d, %s", self.host, self.port, self.registry.me)

    def begin_drain(self) -> None:
        """Stop leading, before the broker stops: from now on Metadata from here names
        other brokers as leaders, produce and fetch are answered NOT_LEADER_OR_FOLLOWER
        and transactions NOT_COORDINATOR (clients ask for Metadata or the coordinator and
        move at once, instead of noticing a closed connection), and the registration
        says so, so the other brokers stop naming this one as either. It stays listed
        in Metadata, after it stops too, until its registration's lease runs out or
        its restart takes the registration over (:meth:`BrokerRegistry.drain`)."""
        if self.context is None or self.context.draining.is_set():
            return
        self.context.draining.set()
        if self.registry is not None:
            self.registry.stop_leading()
            self._announcing = threading.Thread(target=self.registry.drain, name="llog-kafka-draining",
                                                daemon=True)
            self._announcing.start()

    async def close(self) -> None:
        self.begin_drain()
        if self._announcing is not None:
            await asyncio.to_thread(self._announcing.join)
        registry = self.registry
        await self._drain.settle(lambda: any(c.in_progress for c in self._connections.values()),
                                 lambda: bool(self._connections),
                                 registry is not None and any(n.node_id != registry.node_id
                                                              for n in registry.known_live()))
        if self._health is not None:
            await self._health.close()
        for server in (self._server, *self._zone_servers):
            if server is not None:
                server.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
        # Closing a connection ends its read loop, which then stops its sender.
        for conn in list(self._connections.values()):
            conn.writer.close()
        if self._connections:
            await asyncio.wait(list(self._connections), timeout=10)
        if self.context is not None:
            await self.context.coordinator.close()
            await asyncio.to_thread(self.context.checks.close)
        if self.registry is not None:
            await asyncio.to_thread(self.registry.close)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, zone: str | None = None) -> None:
        metrics = self.broker.conn.metrics
        peer = writer.get_extra_info("peername")
        address = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
        opening = self.broker.logins.admit(address, time.monotonic())
        if opening is not None:  # counted, not logged: a flood would be all of the log
            metrics.kafka_connections_refused.labels(opening).inc()
            writer.close()
            return
        refused = self._slots.take(address)
        if refused is not None:
            metrics.kafka_connections_refused.labels(refused).inc()
            log.warning("Kafka client %s refused: %s reached (LLOG_KAFKA_%s)", address, refused, refused.upper())
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None
        metrics.kafka_connections.inc()
        cert = writer.get_extra_info("peercert")  # mutual TLS: checked by the handshake already
        sasl = SaslState(self.broker.config.broker_token, self._users, metrics, client_host(address),
                         certificate_principal(cert["subject"]) if cert else None, self.broker.logins)
        assert self.context is not None
        conn = _Connection(peer, writer, sasl, asyncio.Queue(self.broker.config.kafka_max_inflight_requests),
                           dataclasses.replace(self.context, sasl=sasl, gone=partial(_gone, writer),
                                               listener_zone=zone))
        self._connections[task] = conn
        sender = asyncio.create_task(self._send(writer, conn))
        reason: str | None = None
        try:
            while reason is None:
                reason = await self._read_request(reader, conn)
        except (asyncio.IncompleteReadError, ConnectionError):
            reason = conn.timed_out  # the sweeper closed it, or the client went
        finally:
            if reason is not None:
                metrics.kafka_connections_closed.labels(reason).inc()
            await _finish(conn, sender)
            writer.close()
            self._memory.release(conn.held)
            conn.held = 0
            self._slots.give_back(address)
            self._connections.pop(task, None)
            metrics.kafka_connections.dec()

    async def _read_request(self, reader: asyncio.StreamReader, conn: _Connection) -> str | None:
        """Read one request frame and start handling it; the reason to close the
        connection instead, if any (logged here, with the client's address). Waits are
        bounded by :meth:`_sweep`, which closes a connection past its deadline."""
        cfg = self.broker.config
        now = asyncio.get_running_loop().time()
        if conn.muted_until > now:  # throttled: nothing is read until its wait is over
            conn.deadline = None
            await asyncio.sleep(conn.muted_until - now)
            now = asyncio.get_running_loop().time()
        authenticated = conn.sasl.authenticated
        # A client must authenticate within the frame timeout of connecting.
        conn.deadline = now + cfg.kafka_idle_timeout_s if authenticated else conn.opened + cfg.kafka_frame_timeout_s
        conn.in_frame = False
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        # Again: a client sends its first request after authenticating once it has the
        # answer, which comes after the state changed (on a thread, while this waited).
        authenticated = conn.sasl.authenticated
        cap = cfg.kafka_max_frame_bytes if authenticated else cfg.kafka_max_preauth_frame_bytes
        if not 0 < size <= cap:
            reason = "frame_too_large" if authenticated else "preauth_frame_too_large"
            log.warning("Kafka client %s sent a frame of %d bytes, over the %scap of %d; closing",
                        conn.peer, size, "" if authenticated else "pre-authentication ", cap)
            return reason
        conn.deadline = None  # waiting for the budget is the listener's doing, not the client's
        await self._memory.reserve(size)
        conn.held += size
        conn.deadline, conn.in_frame = asyncio.get_running_loop().time() + cfg.kafka_frame_timeout_s, True
        frame = await reader.readexactly(size)
        conn.deadline = None
        try:
            pending = await self._dispatch(frame, conn, size)
        except Exception as exc:  # a request that does not decode has no answer: Kafka closes too
            log.warning("Kafka client %s sent a request that failed (%s); closing", conn.peer, exc)
            return "bad_request"
        if pending is None:
            log.warning("Kafka client %s sent a request before authenticating; closing", conn.peer)
            return "unauthenticated"
        conn.in_progress += 1
        await conn.answers.put(pending)
        return None

    async def _dispatch(self, frame: bytes, conn: _Connection, size: int) -> _Pending | None:
        """Decode one request and start handling it (``None``: refused before
        authentication, close the connection)."""
        sasl, ctx = conn.sasl, conn.context
        started = time.perf_counter()
        api_key, version, correlation_id = struct.unpack_from(">hhi", frame, 0)
        self._drain.note(api_key)
        api = API_BY_KEY.get(api_key)
        if not sasl.authenticated and api_key not in (ApiVersionsRequest.API_KEY, SASL_HANDSHAKE, SASL_AUTHENTICATE):
            return None
        if api is None or not api.min_version <= version <= api.max_version:
            return _Pending(correlation_id, "UNSUPPORTED", started, _ready(unsupported_response(api_key, version)),
                            size)
        request = api.request.decode(frame, version=version, header=True)
        name = api.request.name.removesuffix("Request")
        if api_key == SASL_HANDSHAKE:
            return _Pending(correlation_id, name, started, _ready(sasl.handshake(request)), size)
        if api_key == SASL_AUTHENTICATE:
            # A thread of the logins' own (llog/auth/login_budget.py): it reads the user's
            # credential from etcd and derives keys; a suspect's waits on the suspects' one.
            logins = self.broker.logins
            pool = logins.executor(logins.verdict(sasl.caller.host, None, time.monotonic(), "kafka"))
            return _Pending(correlation_id, name, started, asyncio.ensure_future(_authenticate(sasl, pool, request)),
                            size)
        assert api.handler is not None
        client_id = getattr(request.header, "client_id", None)
        share = (throttling.share(self.broker, self.registry, ctx.listener_zone, request, client_id)
                 if api_key in (PRODUCE, FETCH) else None)
        if api_key == PRODUCE:
            wait = await throttling.admit_produce(self.broker, sasl.caller.principal, client_id, ctx.listener_zone,
                                                  size, share)
            if wait > 0:  # past its quota: its next request is read once the wait is over
                conn.muted_until = max(conn.muted_until, asyncio.get_running_loop().time() + wait)
        handling = [0.0]
        answer: Awaitable[ApiMessage | None]
        if api.runs == "ordered":  # acts now, before the next request is read; the answer comes later
            answer = await api.handler(ctx, request)
        elif api.runs == "blocking":
            answer = asyncio.ensure_future(asyncio.to_thread(_timed, handling, api.handler, ctx, request))
        else:
            answer = asyncio.ensure_future(api.handler(ctx, request))
        handling[0] += time.perf_counter() - started
        return _Pending(correlation_id, name, started, answer, size, version, client_id, handling, share)

    async def _sweep(self) -> None:
        """Once a second, close the connections past their deadline: a frame not whole
        within the frame timeout, no authentication within it, or idle (no request in
        progress) for the idle timeout. One task for all connections instead of a
        timer per read."""
        cfg = self.broker.config
        while True:
            await asyncio.sleep(min(1.0, cfg.kafka_frame_timeout_s / 4))
            now = asyncio.get_running_loop().time()
            for conn in list(self._connections.values()):
                if conn.deadline is None or now < conn.deadline or conn.timed_out is not None:
                    continue
                if conn.in_frame:
                    conn.timed_out = "frame_timeout"
                    log.warning("Kafka client %s sent a frame slower than %.0f s; closing", conn.peer,
                                cfg.kafka_frame_timeout_s)
                elif not conn.sasl.authenticated:
                    conn.timed_out = "auth_timeout"
                    log.warning("Kafka client %s did not authenticate within %.0f s; closing", conn.peer,
                                cfg.kafka_frame_timeout_s)
                elif conn.in_progress:  # waiting for its own answers is not idle
                    conn.deadline = now + cfg.kafka_idle_timeout_s
                    continue
                else:
                    conn.timed_out = "idle_timeout"
                    log.info("Kafka client %s idle for %.0f s; closing", conn.peer, cfg.kafka_idle_timeout_s)
                conn.writer.close()

    async def _send(self, writer: asyncio.StreamWriter, conn: _Connection) -> None:
        metrics = self.broker.conn.metrics
        while (item := await conn.answers.get()) is not None:
            conn.answering = item
            try:
                response = await item.answer
                if conn.closed:  # finished for its effects (counted); nobody to send it to
                    response = None
                if response is not None:  # None: acks=0, no answer
                    response.with_header(correlation_id=item.correlation_id)
                    encoding = time.perf_counter()
                    frame = response.encode(header=True, framed=True)  # at the version it was built for
                    item.handling[0] += time.perf_counter() - encoding
                    wait = throttling.throttle_s(self.broker, conn.sasl.caller.principal, item.client_id,
                                                 conn.context.listener_zone, item.api, len(frame), item.handling[0],
                                                 item.share)
                    if wait > 0:  # the connection is not read for that long (KIP-219)
                        conn.muted_until = max(conn.muted_until, asyncio.get_running_loop().time() + wait)
                        frame = await throttling.throttled_frame(response, item.api, item.version, wait, metrics)
            except Exception:
                log.exception("Kafka %s request failed; closing the connection", item.api)
                writer.close()  # the protocol has no generic error answer for a request
                # The requests read after it are still done (unanswered), and the read
                # loop, were it waiting for room in the queue, is not stranded.
                conn.closed, response = True, None
            finally:
                conn.answering = None
            if response is not None:
                try:
                    writer.write(frame)
                    await writer.drain()
                except ConnectionError:  # the client went: the rest is still done, unanswered,
                    conn.closed = True  # and a read loop waiting for room in the queue gets it
            conn.in_progress -= 1
            conn.held -= item.size
            self._memory.release(item.size)
            metrics.kafka_requests.labels(item.api).inc()
            metrics.kafka_latency.labels(item.api).observe(time.perf_counter() - item.started)
            if conn.sasl.failed:  # the client has its answer; an unauthenticated connection ends here
                metrics.kafka_connections_closed.labels("auth_failed").inc()
                writer.close()
                return


async def _finish(conn: _Connection, sender: asyncio.Task[None]) -> None:
    """The client is gone: its answers go nowhere, but what it sent is still done.
    An answer that is a coroutine runs only when awaited (a produce's is where its
    commit is awaited and counted), so each is awaited, the one the sender is on
    included; one that is a task of its own runs on without us (the one the sender
    waits for, a long poll say, is cancelled with the sender)."""
    conn.closed = True
    left: list[_Pending] = []
    while not conn.answers.empty():
        item = conn.answers.get_nowait()
        if item is not None:
            left.append(item)
    if not sender.done():
        if conn.answering is not None and asyncio.iscoroutine(conn.answering.answer):
            conn.answers.put_nowait(None)  # the sender stops after this answer
        else:
            sender.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await sender
    try:
        for item in left:
            if asyncio.iscoroutine(item.answer):
                try:
                    await item.answer
                except Exception:
                    log.exception("Kafka %s request failed after its client closed the connection", item.api)
    finally:  # cancelled (the loop ending): the rest are dropped, not left unawaited
        for item in left:
            if asyncio.iscoroutine(item.answer):
                item.answer.close()


def _timed(handling: list[float], handler: Any, *args: Any) -> Any:
    """``handler(*args)`` on this worker thread, its CPU time added to ``handling``."""
    start = time.thread_time()
    try:
        return handler(*args)
    finally:
        handling[0] += time.thread_time() - start


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
    if config.kafka_tls_client_ca_file is not None:  # mutual TLS: no certificate, no connection
        try:
            ctx.load_verify_locations(config.kafka_tls_client_ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"Kafka TLS client CA {config.kafka_tls_client_ca_file!r}: {exc}") from exc
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


@dataclass(frozen=True)
class _Pending:
    """A request being handled, in the order of its connection's answers."""

    correlation_id: int
    api: str  # for the metrics
    started: float  # perf_counter when it was read
    answer: Awaitable[ApiMessage | None]
    size: int  # its frame's bytes, held in the listener's budget until answered
    version: int = 0
    client_id: str | None = None
    #: Seconds spent handling it (decoding, a blocking handler's thread CPU, encoding):
    #: what the ``request_percentage`` quota counts.
    handling: list[float] = dataclasses.field(default_factory=lambda: [0.0])
    #: The part of the client's byte-rate quotas it is held to here (``None``: the default).
    share: float | None = None


class _Connection:
    """One client connection's state, shared by its read loop and its sender."""

    def __init__(
        self, peer: object, writer: asyncio.StreamWriter, sasl: SaslState, answers: asyncio.Queue[_Pending | None],
        context: Context,
    ) -> None:
        self.peer = peer
        self.writer = writer
        self.sasl = sasl
        #: The listener's context with this connection's authentication.
        self.context = context
        self.answers = answers
        self.opened = asyncio.get_running_loop().time()
        #: Requests read and not yet answered.
        self.in_progress = 0
        #: Bytes of this connection's frames held in the listener's budget.
        self.held = 0
        #: When the current wait must end (loop time; ``None``: no deadline), whether it
        #: is for a frame's bytes, and why the sweeper closed the connection, if it did.
        self.deadline: float | None = None
        self.in_frame = False
        self.timed_out: str | None = None
        #: The request whose answer the sender awaits, and whether the client is gone.
        self.answering: _Pending | None = None
        self.closed = False
        #: Until when (loop time) the client is throttled: nothing of it is read before.
        self.muted_until = 0.0


def _gone(writer: asyncio.StreamWriter) -> bool:
    """Whether the client closed the connection: the transport is closing, or the
    next thing the socket holds is the client's FIN (a peek, so nothing is consumed;
    over TLS a close may hide behind a record and is not seen here)."""
    if writer.is_closing():
        return True
    ts = writer.get_extra_info("socket")
    if ts is None or writer.get_extra_info("sslcontext") is not None:
        return False
    with socket.fromfd(ts.fileno(), ts.family, ts.type) as s:  # a dup: the transport's own is not readable here
        try:
            return s.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            return False
        except OSError:
            return True


async def _ready(value: ApiMessage | None) -> ApiMessage | None:
    return value


async def _authenticate(sasl: SaslState, pool: Executor, request: Any) -> ApiMessage:
    """``sasl``'s answer to a SaslAuthenticate, checked on ``pool``; a suspect's
    refusal held back here, so the login thread is free for the next attempt at once
    (an honest login from a suspect address does not queue behind refusals' delays)."""
    sasl.hold_s = 0.0
    answer = await asyncio.get_running_loop().run_in_executor(pool, sasl.authenticate, request)
    if sasl.hold_s:
        await asyncio.sleep(sasl.hold_s)
    return answer

