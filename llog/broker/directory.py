"""Where HTTP clients find the brokers of their zone (docs/zones.md): each broker
registers its HTTP address and zone at ``{root}/_brokers/http/{instance}`` under a lease
it keeps alive (protocol/README.md §3), and ``GET /brokers`` answers a client with the
live brokers of its zone, or all of them when its zone has none, as Metadata does for
Kafka clients. A broker that stops revokes its lease, so it leaves the list at once; one
that dies leaves it when the lease runs out."""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from llog.connection import Connection
from llog.errors import CoordinationError
from llog.state.cluster_format import FORMAT_VERSION
from llog.state.keys import prefix_range_end
from llog.version import __version__

log = logging.getLogger(__name__)

#: The HTTP header that names a zone: the caller's on a request, the broker's own on
#: every answer (as a Kafka client's ``client.id`` names its zone).
ZONE_HEADER = "llog-zone"


class _Zoned(Protocol):
    @property
    def zone(self) -> str | None: ...


Z = TypeVar("Z", bound=_Zoned)


def serving(brokers: Sequence[Z], zone: str | None) -> list[Z]:
    """The brokers that serve a client of ``zone``: those in it, or every one when it has
    none (or the client names no zone): a lost zone stops nobody."""
    if zone is None:
        return list(brokers)
    return [b for b in brokers if b.zone == zone] or list(brokers)


@dataclass(frozen=True)
class HttpBroker:
    """A live broker's HTTP API, as ``GET /brokers`` lists it."""

    url: str
    zone: str | None = None
    #: The llog release it runs (``llog/version.py``); empty in a registration that does not say.
    version: str = ""


class HttpDirectory:
    """This broker's HTTP registration (:meth:`start` to :meth:`close`) and the list of
    every registered one."""

    def __init__(self, conn: Connection, url: str, zone: str | None, ttl_s: int) -> None:
        self._conn = conn
        self.me = HttpBroker(url, zone, __version__)
        self._key = conn.keys.http_broker(uuid.uuid4().hex[:16])
        self._value = json.dumps({"url": url, **({"zone": zone} if zone else {}), "hostname": socket.gethostname(),
                                  "pid": os.getpid(), "version": __version__,
                                  "format": FORMAT_VERSION}).encode()
        self._ttl_s = max(2, ttl_s)
        self._lease = 0
        self._stop = threading.Event()
        self._tried = threading.Event()
        self._thread: threading.Thread | None = None
        self._cached: tuple[float, list[HttpBroker]] | None = None
        self._seen = [self.me]

    def start(self) -> None:
        """Register and keep the registration alive, from a thread of its own; wait up
        to a second for the first try. A broker starts (alive, not ready) while etcd is
        away: it registers once etcd answers."""
        self._thread = threading.Thread(target=self._keepalive, name="llog-http-directory", daemon=True)
        self._thread.start()
        self._tried.wait(1.0)

    def brokers(self, max_age_s: float = 1.0) -> list[HttpBroker]:
        """Every registered broker (this one included), by URL, each URL once (the
        workers of one broker share its address); read from etcd at most every
        ``max_age_s`` (blocking: call it off the event loop)."""
        now = time.monotonic()
        if self._cached is not None and now - self._cached[0] < max_age_s:
            return self._cached[1]
        listed = self._read()
        self._cached = (now, listed)
        return listed

    def _read(self) -> list[HttpBroker]:
        prefix = self._conn.keys.http_brokers_prefix()
        found = {self.me.url: self.me}
        for kv in self._conn.etcd.scan(prefix, prefix_range_end(prefix)):
            try:
                doc = json.loads(kv.value)
                zone = doc.get("zone")
                broker = HttpBroker(str(doc["url"]), str(zone) if zone else None, str(doc.get("version", "")))
            except (ValueError, KeyError, TypeError, AttributeError):
                log.warning("ignoring a malformed HTTP broker registration at %s", kv.key)
                continue
            found.setdefault(broker.url, broker)
        return [found[u] for u in sorted(found)]

    def cached(self) -> list[HttpBroker]:
        """Every registered broker as the keep-alive thread last read them (no I/O: for
        the event loop); this one alone before its first read."""
        return self._seen

    def close(self) -> None:
        """Deregister (once; a second call does nothing)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        lease, self._lease = self._lease, 0
        if lease:
            try:
                self._conn.etcd.revoke_lease(lease)
            except CoordinationError as exc:  # it ends with its TTL anyway
                log.warning("HTTP registration not revoked: %s", exc)

    def _register(self) -> None:
        lease = self._conn.etcd.grant_lease(self._ttl_s)
        self._lease = lease  # before the put: close() revokes it even if the put fails
        self._conn.etcd.put(self._key, self._value, lease=lease)

    def _keepalive(self) -> None:
        while True:
            try:
                if not self._lease or self._conn.etcd.refresh_lease(self._lease) <= 0:
                    self._register()
                self._seen = self._read()
            except CoordinationError as exc:
                log.warning("HTTP registration (GET /brokers) failed: %s", exc)
            self._tried.set()
            if self._stop.wait(self._ttl_s / 3):
                return
