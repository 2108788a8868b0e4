"""The live brokers' Kafka listeners, in etcd: each broker takes the lowest free node
id under ``{root}/_brokers/`` with a lease it keeps alive, so Metadata lists every
broker that is up, and a broker that dies drops out when its lease expires."""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from llog.connection import Connection
from llog.errors import CoordinationError
from llog.etcd import Put, absent
from llog.keys import prefix_range_end

log = logging.getLogger(__name__)

MAX_NODE_ID = 1_000_000


@dataclass(frozen=True)
class BrokerNode:
    node_id: int
    host: str
    port: int


def rendezvous(nodes: list[BrokerNode], key: str) -> BrokerNode:
    """The node with the highest hash of (node id, ``key``): every broker picks the same
    one from the same list, and a node joining or leaving moves only the keys it wins
    or held, not everyone's."""
    def weight(n: BrokerNode) -> bytes:
        return hashlib.blake2b(f"{n.node_id}/{key}".encode(), digest_size=8).digest()

    return max(nodes, key=weight)


class BrokerRegistry:
    """This broker's registration (:meth:`start` to :meth:`close`) and the live list."""

    def __init__(self, conn: Connection, host: str, port: int, ttl_s: int) -> None:
        self._conn = conn
        self.host, self.port = host, port
        self._ttl_s = max(2, ttl_s)
        self._lease = 0
        self.node_id = -1
        self._stop = threading.Event()
        self._closing = threading.Lock()
        self._thread: threading.Thread | None = None
        self._cached: tuple[float, list[BrokerNode]] | None = None
        #: Node ids of registered brokers not answering (:class:`PeerHealth`), which
        #: :meth:`live` leaves out.
        self.silent: Callable[[], frozenset[int]] = frozenset

    def start(self) -> int:
        """Register; returns this broker's node id."""
        self._register()
        self._cached = (time.monotonic(), self._read())
        self._thread = threading.Thread(target=self._keepalive, name="llog-kafka-registry", daemon=True)
        self._thread.start()
        return self.node_id

    def live(self, max_age_s: float = 1.0) -> list[BrokerNode]:
        """Every registered broker that answers, by node id: this one included even if
        its key has just expired (it is serving), unless it is stopping (then only when
        there is no other)."""
        silent = self.silent() | ({self.node_id} if self._stop.is_set() else frozenset())
        return ([n for n in self.registered(max_age_s) if n.node_id not in silent]
                or [BrokerNode(self.node_id, self.host, self.port)])

    def registered(self, max_age_s: float = 1.0) -> list[BrokerNode]:
        """Every registered broker, by node id (this one included); read from etcd at
        most every ``max_age_s``."""
        now = time.monotonic()
        if self._cached is not None and now - self._cached[0] < max_age_s:
            return self._cached[1]
        nodes = self._read()
        self._cached = (now, nodes)
        return nodes

    def _read(self) -> list[BrokerNode]:
        prefix = self._conn.keys.brokers_prefix()
        out = {}
        for kv in self._conn.etcd.scan(prefix, prefix_range_end(prefix)):
            try:
                doc = json.loads(kv.value)
                node = BrokerNode(int(kv.key[len(prefix):]), str(doc["host"]), int(doc["port"]))
            except (ValueError, KeyError, TypeError):
                log.warning("ignoring a malformed broker registration at %s", kv.key)
                continue
            out[node.node_id] = node
        out[self.node_id] = BrokerNode(self.node_id, self.host, self.port)
        return [out[k] for k in sorted(out)]

    def coordinator(self, key: str) -> BrokerNode:
        """The broker that coordinates group ``key`` (:func:`rendezvous`). From the
        list the keep-alive thread refreshes (no I/O: callers are on the event loop)."""
        return rendezvous(self.live(max_age_s=float("inf")), key)

    def stop_leading(self) -> None:
        """From now on :meth:`live` (Metadata's leaders, FindCoordinator) leaves this
        broker out while another is there; :meth:`close` then deregisters it."""
        self._stop.set()

    def close(self) -> None:
        """Deregister (the key goes with its lease, so the other brokers stop naming this
        one at once); once is enough, a second call does nothing."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._closing:
            lease, self._lease = self._lease, 0
        if lease:
            self._conn.etcd.revoke_lease(lease)

    def _register(self) -> None:
        etcd, keys = self._conn.etcd, self._conn.keys
        self._lease = etcd.grant_lease(self._ttl_s)
        value = json.dumps({"host": self.host, "port": self.port}).encode()
        prefix = keys.brokers_prefix()
        taken = {kv.key[len(prefix):] for kv in etcd.scan(prefix, prefix_range_end(prefix))}
        # The id held before (a lease lost in a pause) first, so clients keep their connections.
        candidates = itertools.chain([self.node_id] if self.node_id >= 0 else [],
                                     (i for i in range(MAX_NODE_ID) if str(i) not in taken))
        for node_id in candidates:
            key = keys.broker(node_id)
            if etcd.txn([absent(key)], [Put(key, value, lease=self._lease)]).succeeded:
                self.node_id = node_id
                return
        raise CoordinationError(f"no free Kafka node id under {keys.brokers_prefix()}")

    def _keepalive(self) -> None:
        while not self._stop.wait(self._ttl_s / 3):
            try:
                if self._conn.etcd.refresh_lease(self._lease) <= 0:
                    log.warning("Kafka node %d lost its registration lease; registering again", self.node_id)
                    self._register()
                self._cached = (time.monotonic(), self._read())
            except CoordinationError as exc:
                log.warning("Kafka registration keep-alive failed: %s", exc)
