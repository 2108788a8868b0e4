"""A connection to one llog deployment: config, etcd, object store, key layout, metrics.

Writers, readers and admin tools share a :class:`Connection`; open one with
:func:`connect` and close it (or use ``with``) when done.
"""

from __future__ import annotations

import os
import threading

from llog.codec.etcd_values.maps import MetaFormatError
from llog.codec.etcd_values.topic import TopicMeta
from llog.config import LlogConfig
from llog.environment import warn_unknown
from llog.errors import CorruptMetadata, UnknownPartition, UnknownTopic
from llog.etcd.auth import EtcdSecurity
from llog.etcd.client import Etcd
from llog.etcd.operations import KV
from llog.metrics import Metrics
from llog.names import check_partition, check_topic
from llog.state.keys import KeyLayout
from llog.store import ObjectStore, open_store
from llog.store.blob_cache import BlobCache
from llog.store.peers import PeerBlobs
from llog.tls import peer_context


class Connection:
    """Owns (or borrows) an :class:`Etcd` and an :class:`ObjectStore`."""

    def __init__(
        self,
        config: LlogConfig | None = None,
        *,
        etcd: Etcd | None = None,
        store: ObjectStore | None = None,
        metrics: Metrics | None = None,
        peer_token: str | None = None,
    ) -> None:
        self.config = config if config is not None else LlogConfig.from_env()
        self.metrics = metrics if metrics is not None else Metrics()
        if self.config.zone is not None:
            self.metrics.zone.labels(self.config.zone).set(1)
        self.keys = KeyLayout(self.config.root_prefix.strip("/"))
        self._owns_etcd = etcd is None
        self._owns_store = store is None
        self.etcd = etcd if etcd is not None else Etcd(
            self.config.etcd_endpoints, timeout=self.config.etcd_timeout_s,
            attempt_timeout=self.config.etcd_attempt_timeout_s, keepalive_s=self.config.etcd_keepalive_s,
            metrics=self.metrics, security=EtcdSecurity.of(self.config),
            # A process given a zone starts on the first member listed, its zone's own
            # (docs/zones.md), so its requests do not cross a zone to reach etcd.
            first_member=0 if self.config.zone is not None else None,
        )
        try:
            self.store = store if store is not None else open_store(self.config, self.metrics)
        except BaseException:
            if self._owns_etcd:
                self.etcd.close()
            raise
        self._topics: dict[str, TopicMeta] = {}
        self._topics_lock = threading.Lock()
        cfg = self.config
        # Peer reads are between brokers: a process without a peer_url of its own (the
        # SDK, Spark, the compactor) reads storage, at no etcd cost per writer session.
        peers = None if not (cfg.read_peers and cfg.peer_url) else PeerBlobs(
            self.etcd, self.keys, self.metrics, own_url=cfg.peer_url, timeout_s=cfg.read_peer_timeout_s,
            token=cfg.broker_token or peer_token, tls=peer_context(cfg), zone=cfg.zone,
        )
        #: Chunks of shared WAL blobs, for every reader of this connection.
        self.blob_cache = BlobCache(
            self.store, self.keys.wal_prefix(), max_bytes=cfg.read_cache_bytes,
            chunk_bytes=cfg.read_cache_chunk_bytes, metrics=self.metrics, peers=peers,
        )

    # Topic definitions never change partition count downward, so a positive cache
    # entry stays valid; misses always go to etcd.
    def topic(self, topic: str, *, refresh: bool = False) -> TopicMeta:
        """The topic's definition; :class:`UnknownTopic` if it does not exist."""
        check_topic(topic)
        if not refresh:
            cached = self._topics.get(topic)
            if cached is not None:
                return cached
        meta = topic_of(topic, self.etcd.get(self.keys.topic_meta(topic)))
        with self._topics_lock:
            self._topics[topic] = meta
        return meta

    def cached_topic(self, topic: str) -> TopicMeta | None:
        """The topic's definition if this connection has it, without I/O."""
        return self._topics.get(topic)

    def check_partition(self, topic: str, partition: int) -> TopicMeta:
        """Validate ``topic``/``partition``: the topic's name, the partition number,
        then both against the topic's definition (:class:`UnknownTopic`,
        :class:`UnknownPartition`)."""
        check_topic(topic)
        check_partition(topic, partition)
        meta = self.topic(topic)
        if partition >= meta.partitions:
            meta = self.topic(topic, refresh=True)
            if partition >= meta.partitions:
                raise UnknownPartition(topic, partition, meta.partitions)
        return meta

    def forget_topic(self, topic: str) -> None:
        with self._topics_lock:
            self._topics.pop(topic, None)

    def close(self) -> None:
        try:
            if self._owns_store:
                self.store.close()
        finally:
            if self._owns_etcd:
                self.etcd.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(config: LlogConfig | None = None, **overrides: object) -> Connection:
    """Open a connection from ``config`` (default: the ``LLOG_*`` environment) with
    field ``overrides`` applied, e.g. ``connect(object_store="file:///tmp/llog")``."""
    if config is None:
        warn_unknown(os.environ)  # an application's settings come from its environment
    base = config if config is not None else LlogConfig.from_env()
    if overrides:
        base = LlogConfig.from_env({}, **{**_fields(base), **overrides})
    return Connection(base)


def _fields(cfg: LlogConfig) -> dict[str, object]:
    from dataclasses import asdict

    return asdict(cfg)


def topic_of(topic: str, kv: KV | None) -> TopicMeta:
    """The definition in ``kv``, a read of ``topic``'s ``meta/topic`` (its revision the
    key's ``create_revision``): :class:`UnknownTopic` if absent, :class:`CorruptMetadata`
    if it does not decode."""
    if kv is None:
        raise UnknownTopic(topic)
    try:
        return TopicMeta.decode(kv.value, kv.create_revision)
    except MetaFormatError as exc:
        raise CorruptMetadata(kv.key, str(exc)) from exc
