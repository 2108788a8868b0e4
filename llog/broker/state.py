"""What the broker's routes share: :class:`Broker`, opened in the app's lifespan and
closed at shutdown, and :func:`broker_of` to reach it from a request."""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from dataclasses import dataclass, replace
from typing import cast

import anyio
from starlette.requests import Request

from llog.auth.authorizer import Authorizer, parse_super_users
from llog.auth.login_budget import login_guard
from llog.broker.directory import HttpDirectory, serving
from llog.broker.filecache import FileTailCache
from llog.broker.loop_inbox import LoopInbox
from llog.broker.readiness import Readiness
from llog.broker.remote_commits import RemoteCommits
from llog.broker.screening import Screening
from llog.broker.tailcache import TailCache
from llog.broker.wakeup import PartitionTails
from llog.codec.etcd_values.topic import TopicMeta
from llog.config import LlogConfig
from llog.connection import Connection
from llog.errors import UnknownTopic
from llog.names import TopicPartition
from llog.producer import BatchingProducer
from llog.quotas.cache import Quotas
from llog.quotas.meter import QuotaMeter
from llog.reader import Reader
from llog.records import Record
from llog.registry import SchemaRegistry
from llog.topic.admin import Topics
from llog.txn.coordinator import Coordinator
from llog.txn.expiry import TxnExpiry
from llog.txn.pipeline import StagePipeline
from llog.writer import AppendResult


@dataclass(frozen=True)
class WorkerPlace:
    """Where one worker of a multi-process broker (``llog broker --workers``) stands."""

    index: int
    #: Every worker's own URL, by index (peer reads, and the merged ``/metrics``).
    urls: tuple[str, ...]
    #: The broker's id, which all its workers report (new each time the broker starts).
    broker_id: str
    #: What the workers authenticate to each other with (new each time the broker starts).
    secret: str = ""


class Broker:
    """The connection, producer, reader, caches and tail watches every route uses."""

    def __init__(self, config: LlogConfig, *, host: str, port: int, place: WorkerPlace | None = None) -> None:
        # Where other brokers and clients reach this one, unless configured otherwise.
        reachable = peer_url_of(host, port, tls=config.broker_tls_cert_file is not None)
        if config.read_peers and config.peer_url is None:
            config = replace(config, peer_url=reachable)
        self.config = config
        #: Where the broker listens, as ``/health`` reports it.
        self.host, self.port = host, port
        #: This process's place among the broker's workers (``None``: it is the broker).
        self.place = place
        #: Where the Kafka listener listens, once it does (``None``: no listener).
        self.kafka_port: int | None = None
        #: This process's name in ``/health`` and its tail-cache directory; new per start.
        self.broker_id = uuid.uuid4().hex[:16] if place is None else place.broker_id
        self.started_at_ms = int(time.time() * 1000)
        # A worker's siblings take their broker's secret for peer reads; other brokers, the token.
        self.conn = Connection(config, peer_token=place.secret if place is not None else None)
        self.cache = TailCache(config.tail_cache_bytes)
        self.files = (
            None if config.tail_cache_dir is None
            else FileTailCache(config.tail_cache_dir, self.conn.keys.root, self.broker_id, config.tail_cache_bytes,
                               self.conn.metrics)
        )
        self.readiness = Readiness(config, self.conn.store, self.conn.keys.root, self.conn.metrics)
        self.reader = Reader(self.conn)
        self.tails: PartitionTails | None = None
        #: Set by :meth:`start`: reads other brokers' appends into the tail cache.
        self.remote: RemoteCommits | None = None
        #: Set by :meth:`start`: the loop's inbox, through which threads answer requests.
        self.inbox: LoopInbox
        #: Partitions already validated (topic cached): produce to them never touches etcd.
        self.validated: set[TopicPartition] = set()
        #: Set when ``auth_acls`` is on: decides every request by the ACLs (:meth:`start` reads them).
        self.authorizer = (Authorizer(self.conn, parse_super_users(config.auth_super_users))
                           if config.auth_acls else None)
        #: Confluent's Schema Registry, served under ``/subjects``, ``/schemas``, ... (spec §12).
        self.registry = SchemaRegistry(self.conn)
        #: Bounds the registry's requests on threads (llog/broker/routes/schema_registry.py).
        self.registry_limiter: anyio.CapacityLimiter | None = None
        self.producer = BatchingProducer(
            self.conn, send_timeout_s=config.broker_send_timeout_s, on_commit=self._committed,
            put_rate=config.broker_put_rate, put_burst=config.broker_put_burst,
        )
        #: Checks produced values against their topic's schema (``value_validation``).
        self.screening = Screening(self.conn, self.registry, self.producer)
        #: Kafka transactions' coordinator (any broker coordinates any id: spec §15).
        self.transactions = Coordinator(self.conn)
        self.txn_expiry = TxnExpiry(self.transactions, config.txn_sweep_s)
        #: Transactional produce requests, staged in order per id, PUT in parallel.
        self.txn_staging = StagePipeline(self.producer.writer)
        self._open_tenancy(config.http_advertised_url or reachable)
        if self.authorizer is not None:  # last: what failed before it leaves no watch behind
            try:
                self.authorizer.start()
            except BaseException:
                self.close()
                raise

    def _open_tenancy(self, url: str) -> None:
        """What keeps clients apart: where a client of a zone is sent (``GET /brokers``,
        this broker listed at ``url``), connection rates and failed logins, client quotas
        and each client's use against them (docs/zones.md; docs/security.md, "Failed
        logins", "Quotas")."""
        config = self.config
        self.directory = HttpDirectory(self.conn, url, config.zone, config.session_ttl_s)
        self.directory.start()
        self.logins = login_guard(config, self.conn.metrics)
        self.quotas = Quotas(self.conn)
        self.quotas.start()
        self.meter = QuotaMeter(self.quotas.limit, lambda zone: len(serving(self.directory.cached(), zone)))

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start watching partition tails, waking long-polls on ``loop``."""
        self.inbox = LoopInbox(loop)
        # Brokers sharing a tail-cache directory (one host) read each other's appends
        # from its files when their consumers ask; others read them as announced.
        if self.files is None:
            self.remote = RemoteCommits(self.conn.blob_cache, self.cache, self.conn.metrics,
                                        workers=self.config.read_max_inflight, announce=self._remote_cached)
        self.tails = PartitionTails(
            self.conn, self.inbox, owns=self.producer.owns,
            on_remote_commit=self.remote.add if self.remote is not None else lambda _tp, _p: False,
        )
        self.txn_expiry.start()

    def topic(self, name: str, *, create: bool = True, refresh: bool = False) -> TopicMeta:
        """``name``'s definition. A topic that does not exist is created first, with
        ``default_partitions``, when ``create`` and ``auto_create_topics`` are on (the
        HTTP and the Kafka produce, and Kafka's Metadata); else :class:`UnknownTopic`."""
        try:
            return self.conn.topic(name, refresh=refresh)
        except UnknownTopic:
            if not (create and self.config.auto_create_topics):
                raise
            return Topics(self.conn).create(name, self.config.default_partitions)

    def close(self) -> None:
        """Leave ``GET /brokers``, drain the producer, then release everything else."""
        try:
            self.directory.close()
            self.quotas.close()
            self.logins.close()
            self.txn_staging.close()
            self.producer.close()  # drains: every accepted produce is answered
        finally:
            self.txn_expiry.close()
            self.transactions.close()
            if self.files is not None:
                self.files.close()
            if self.tails is not None:
                self.tails.close()
            if self.remote is not None:
                self.remote.close()
            self.readiness.close()
            if self.authorizer is not None:
                self.authorizer.close()
            self.reader.close()
            self.conn.close()

    def _remote_cached(self, tp: TopicPartition, next_offset: int) -> None:
        if self.tails is not None:
            self.tails.remote_cached(tp, next_offset)

    def _committed(self, result: AppendResult, records: list[Record], body: memoryview) -> None:
        self.cache.put(result, records, body)
        if self.files is not None:
            self.files.put(result, body)
        if self.tails is not None:
            self.tails.local_commit((result.topic, result.partition), result.end_offset + 1)


#: Where :class:`llog.broker.app.BrokerApp` puts the broker in a request's ASGI scope.
BROKER_SCOPE_KEY = "llog.broker"


def broker_of(request: Request) -> Broker:
    """The broker serving ``request`` (the app puts it in every request's scope)."""
    return cast(Broker, request.scope[BROKER_SCOPE_KEY])


def listen_url(host: str, port: int, *, tls: bool = False) -> str:
    """``http://host:port`` (``https`` with ``tls``), an IPv6 address in brackets."""
    return f"{'https' if tls else 'http'}://{url_host(host)}:{port}"


def url_host(host: str) -> str:
    """``host`` as it goes in a URL (an IPv6 address in brackets)."""
    return f"[{host}]" if ":" in host else host


def peer_url_of(host: str, port: int, *, tls: bool = False) -> str:
    """The URL other brokers reach a broker listening on ``host:port`` at: a wildcard
    address stands for this host's name."""
    return listen_url(socket.gethostname() if host in ("", "0.0.0.0", "::") else host, port, tls=tls)
