"""The live brokers' Kafka listeners, in etcd: each broker takes the lowest free node
id under ``{root}/_brokers/`` with a lease it keeps alive, so Metadata lists every
broker that is up, and a broker that dies drops out when its lease expires. A broker
restarted at the address it had takes its node id back (:meth:`BrokerRegistry.start`),
and each registration names the process that holds it (host name, pid, instance id)."""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from llog.connection import Connection
from llog.errors import CoordinationError
from llog.etcd.operations import KV, Put, lease_is, mod_revision_is
from llog.state.cluster_format import FORMAT_VERSION
from llog.state.keys import prefix_range_end
from llog.version import __version__

log = logging.getLogger(__name__)

#: Releases whose brokers ignore a peer's ``draining`` mark (an empty version is older still).
_BEFORE_DRAINING = ("0.1.", "0.2.")

MAX_NODE_ID = 1_000_000


@dataclass(frozen=True)
class BrokerNode:
    node_id: int
    host: str
    port: int
    #: The process registered: its host's name, pid and an id of its own (a pid repeats
    #: across restarts in a container). Empty in a registration that does not say.
    hostname: str = ""
    pid: int = 0
    instance: str = ""
    #: The zone it runs in (``LLOG_ZONE``; the Kafka ``rack``), ``None`` when not given.
    zone: str | None = None
    #: Its Kafka listeners for the clients of each zone: (zone, port), by zone.
    zone_ports: tuple[tuple[str, int], ...] = ()
    #: The llog release it runs (``llog/version.py``); empty in a registration that does not say.
    version: str = ""
    #: Stopping: it leads and coordinates nothing, but stays listed in Metadata, after it
    #: stops too, until its lease runs out or its restart takes the key over (librdkafka
    #: retires a broker gone from the list, and can wait forever on it as a coordinator).
    #: Not part of its identity: the same process, draining, is the same peer.
    draining: bool = field(default=False, compare=False)

    def port_for(self, zone: str | None) -> int:
        """The port a client that came to ``zone``'s listener is given: this broker's
        listener for that zone, or its own port when it has none (or no zone)."""
        return next((p for z, p in self.zone_ports if z == zone), self.port)

    def __str__(self) -> str:
        """How logs name it: ``node 3 (10.0.0.5:9092, pid 812 on host-a, instance 5f0c…)``."""
        process = f", pid {self.pid} on {self.hostname}, instance {self.instance}" if self.instance else ""
        zone = f", zone {self.zone}" if self.zone else ""
        version = f", llog {self.version}" if self.version else ""
        return f"node {self.node_id} ({self.host}:{self.port}{zone}{process}{version})"


def rendezvous(nodes: list[BrokerNode], key: str) -> BrokerNode:
    """The node with the highest hash of (node id, ``key``): every broker picks the same
    one from the same list, and a node joining or leaving moves only the keys it wins
    or held, not everyone's."""
    def weight(n: BrokerNode) -> bytes:
        return hashlib.blake2b(f"{n.node_id}/{key}".encode(), digest_size=8).digest()

    return max(nodes, key=weight)


def scan_brokers(conn: Connection) -> list[tuple[BrokerNode, KV]]:
    """Every broker registered (one etcd range read), with its key-value."""
    prefix = conn.keys.brokers_prefix()
    out = []
    for kv in conn.etcd.scan(prefix, prefix_range_end(prefix)):
        try:
            doc = json.loads(kv.value)
            zone = doc.get("zone")
            zone_ports = tuple(sorted((str(z), int(p)) for z, p in dict(doc.get("zone_ports", {})).items()))
            out.append((BrokerNode(int(kv.key[len(prefix):]), str(doc["host"]), int(doc["port"]),
                                   str(doc.get("hostname", "")), int(doc.get("pid", 0)),
                                   str(doc.get("instance", "")), str(zone) if zone else None, zone_ports,
                                   str(doc.get("version", "")), doc.get("draining") is True), kv))
        except (ValueError, KeyError, TypeError, AttributeError):
            log.warning("ignoring a malformed broker registration at %s", kv.key)
    return out


class BrokerRegistry:
    """This broker's registration (:meth:`start` to :meth:`close`) and the live list."""

    def __init__(self, conn: Connection, host: str, port: int, ttl_s: int, zone: str | None = None,
                 zone_ports: dict[str, int] | None = None) -> None:
        self._conn = conn
        self.host, self.port, self.zone = host, port, zone
        self.zone_ports = tuple(sorted((zone_ports or {}).items()))
        self.hostname, self.instance = socket.gethostname(), uuid.uuid4().hex[:12]
        self._ttl_s = max(2, ttl_s)
        self._lease = 0
        self.node_id = -1
        self._stop = threading.Event()
        self._draining = threading.Event()
        self._closing = threading.Lock()
        self._thread: threading.Thread | None = None
        self._cached: tuple[float, list[BrokerNode]] | None = None
        #: Node ids of registered brokers not answering (:class:`PeerHealth`), which
        #: :meth:`live` leaves out.
        self.silent: Callable[[], frozenset[int]] = frozenset

    def start(self) -> int:
        """Register; returns this broker's node id: the one registered at this address
        from this host by an earlier process, if its lease has not run out yet (it was
        killed), so clients find this broker under the id they knew; else the lowest free."""
        self._register()
        self._cached = (time.monotonic(), self._read())
        self._thread = threading.Thread(target=self._keepalive, name="llog-kafka-registry", daemon=True)
        self._thread.start()
        return self.node_id

    def live(self, max_age_s: float = 1.0) -> list[BrokerNode]:
        """Every registered broker that answers and is not draining, by node id: this
        one included even if its key has just expired (it is serving), unless it is
        draining (then only when there is no other)."""
        silent = self.silent() | ({self.node_id} if self._draining.is_set() else frozenset())
        return [n for n in self.registered(max_age_s) if n.node_id not in silent and not n.draining] or [self.me]

    def known_live(self) -> list[BrokerNode]:
        """:meth:`live` as last read (the keep-alive reads it again every third of the
        TTL), never waiting on etcd: for the event loop."""
        return self.live(max_age_s=float("inf"))

    @property
    def me(self) -> BrokerNode:
        return BrokerNode(self.node_id, self.host, self.port, self.hostname, os.getpid(), self.instance, self.zone,
                          self.zone_ports, __version__, self._draining.is_set())

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
        out = {node.node_id: node for node, _kv in self._scan()}
        out[self.node_id] = self.me
        return [out[k] for k in sorted(out)]

    def _scan(self) -> list[tuple[BrokerNode, KV]]:
        return scan_brokers(self._conn)

    def coordinator(self, key: str) -> BrokerNode:
        """The broker that coordinates group ``key`` (:func:`rendezvous`). From the
        list the keep-alive thread refreshes (no I/O: callers are on the event loop)."""
        return rendezvous(self.live(max_age_s=float("inf")), key)

    def stop_leading(self) -> None:
        """From now on :meth:`live` (Metadata's leaders, FindCoordinator) leaves this
        broker out while another is there; :meth:`drain` then tells the others."""
        self._draining.set()

    def drain(self) -> None:
        """Say in the registration that this broker is draining (after
        :meth:`stop_leading`): the other brokers leave it out of their leaders and
        coordinators as they read it, and still list it in Metadata. Among peers of an
        earlier release, which read no such mark and would go on naming it a leader,
        the registration is deleted instead (:meth:`close` revoking it), as 0.2.0 did."""
        try:
            if not self.peers_read_draining():
                self.close(revoke=True)
                return
            with self._closing:
                key = self._conn.keys.broker(self.node_id)
                if self._lease:  # still this lease's key (not taken over after a lost lease)
                    self._conn.etcd.txn([lease_is(key, self._lease)], [Put(key, self._value(), lease=self._lease)])
        except CoordinationError as exc:  # the peers go on naming it until its lease goes
            log.warning("Kafka node %d could not mark its registration draining: %s", self.node_id, exc)

    def peers_read_draining(self) -> bool:
        """Whether every other registered broker reads the ``draining`` mark (0.3.0 on):
        one of an earlier release would go on naming a draining broker as a leader."""
        return all(n.version and not n.version.startswith(_BEFORE_DRAINING)
                   for n in self.registered(max_age_s=0) if n.node_id != self.node_id)

    def close(self, *, revoke: bool = False) -> None:
        """Stop keeping the registration alive; once is enough, a second call does
        nothing. Unless ``revoke`` (how a broker stops among peers that read no
        ``draining`` mark, :meth:`drain`), the key is left to expire with its lease
        (``ttl_s``): a broker that drained says so in it (leader and coordinator of
        nothing), and one restarted on its address takes it over meanwhile, so it
        never leaves Metadata's broker list. librdkafka retires a broker gone from that list and
        can keep it as the group coordinator it waits for, forever
        (``send_offsets_to_transaction``, librdkafka #5511); a broker killed with
        ``-9`` was never subject to that, its key outliving it the same way."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._closing:
            lease, self._lease = self._lease, 0
        if lease and revoke:
            self._conn.etcd.revoke_lease(lease)

    def _register(self) -> None:
        etcd, keys = self._conn.etcd, self._conn.keys
        self._lease = etcd.grant_lease(self._ttl_s)
        value = self._value()
        registered = self._scan()
        taken = {node.node_id for node, _kv in registered}
        # This address registered from this host by another process is an earlier one
        # of this broker, stopped or killed before its lease ran out: no other process of this host
        # can listen where this one does. Its key is taken over (bound to this lease).
        earlier = sorted(((node.node_id, kv.mod_revision, node) for node, kv in registered
                          if (node.host, node.port, node.hostname) == (self.host, self.port, self.hostname)
                          and node.instance != self.instance), key=lambda c: c[0])
        # The id held before (a lease lost in a pause) first, so clients keep their connections.
        candidates = itertools.chain(
            [(self.node_id, 0, None)] if self.node_id >= 0 else [], earlier,
            ((i, 0, None) for i in range(MAX_NODE_ID) if i not in taken))
        for node_id, revision, was in candidates:
            key = keys.broker(node_id)
            if etcd.txn([mod_revision_is(key, revision)], [Put(key, value, lease=self._lease)]).succeeded:
                self.node_id = node_id
                if was is not None:
                    log.info("Kafka node %d taken back from an earlier process at this address: was %s", node_id, was)
                return
        raise CoordinationError(f"no free Kafka node id under {keys.brokers_prefix()}")

    def _value(self) -> bytes:
        """This broker's registration (protocol/README.md, ``_brokers/nodes``)."""
        doc: dict[str, object] = {"host": self.host, "port": self.port, "hostname": self.hostname,
                                  "pid": os.getpid(), "instance": self.instance, "version": __version__,
                                  "format": FORMAT_VERSION}
        if self.zone is not None:
            doc["zone"] = self.zone
        if self.zone_ports:
            doc["zone_ports"] = dict(self.zone_ports)
        if self._draining.is_set():
            doc["draining"] = True
        return json.dumps(doc).encode()

    def _keepalive(self) -> None:
        while not self._stop.wait(self._ttl_s / 3):
            try:
                if self._conn.etcd.refresh_lease(self._lease) <= 0:
                    log.warning("Kafka node %d lost its registration lease; registering again", self.node_id)
                    self._register()
                self._cached = (time.monotonic(), self._read())
            except CoordinationError as exc:
                log.warning("Kafka registration keep-alive failed: %s", exc)
