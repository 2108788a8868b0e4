"""How a generator process stops waiting on a broker that stopped answering.

A paused broker accepts connections and never answers, so a request to it costs its
whole timeout, and every thread that picked it waits that long at the same moment.
:class:`BrokerWatch` asks each broker's ``GET /health`` every ``interval_s`` on a
thread of its own; one that does not answer within ``timeout_s`` (or refuses the
connection) is taken out of rotation at once, and the requests in flight to it are
cut (their sockets shut down), so the threads waiting on them re-send their batches
to another owner now: the batches carry their producer id and sequence, so a first
attempt that did commit is answered with its original offsets, never stored twice.
It is back in rotation as soon as it answers.

:class:`AdaptiveTimeout` is the backstop for a broker that answers its health check but
not a produce (stuck on a commit): a request's timeout follows the latencies just seen
(a multiple of their p99, within bounds), not a fixed worst case.
"""

from __future__ import annotations

import contextlib
import http.client
import logging
import socket
import threading
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from urllib.parse import urlsplit

from llog.loadtest.routing import Router
from llog.names import TopicPartition

log = logging.getLogger(__name__)


class AdaptiveTimeout:
    """``factor`` x the p99 of the last ``window`` request latencies, within
    ``[floor_s, ceiling_s]`` (the ceiling until :data:`MIN_SEEN` latencies are known)."""

    MIN_SEEN = 20

    def __init__(self, floor_s: float, ceiling_s: float, *, factor: float = 4.0, window: int = 400) -> None:
        self.floor_s, self.ceiling_s, self.factor = floor_s, min(max(floor_s, ceiling_s), ceiling_s), factor
        self._seen: deque[float] = deque(maxlen=window)
        self._lock = threading.Lock()
        self._current = ceiling_s

    def observe(self, seconds: float) -> None:
        with self._lock:
            self._seen.append(seconds)
            if len(self._seen) >= self.MIN_SEEN and len(self._seen) % 10 == 0:
                ranked = sorted(self._seen)
                p99 = ranked[min(len(ranked) - 1, int(len(ranked) * 0.99))]
                self._current = min(self.ceiling_s, max(self.floor_s, self.factor * p99))

    def seconds(self) -> float:
        return self._current


class BrokerWatch:
    """Health checks of ``urls`` (broker name -> base URL) feeding ``router``; the
    requests a sender registers with :meth:`sending` are cut when their broker goes
    silent. :meth:`close` stops the threads."""

    def __init__(
        self, urls: Mapping[str, str], router: Router, partitions: Iterable[TopicPartition], *,
        interval_s: float = 0.25, timeout_s: float = 0.5,
    ) -> None:
        self._urls = dict(urls)
        self._router = router
        self._partitions = list(partitions)
        self.interval_s, self.timeout_s = interval_s, timeout_s
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._inflight: dict[str, set[socket.socket]] = {b: set() for b in self._urls}
        self._threads = [threading.Thread(target=self._check, args=(b,), name=f"llog-watch-{b}", daemon=True)
                         for b in self._urls]
        self.cuts = 0

    def start(self) -> BrokerWatch:
        for t in self._threads:
            t.start()
        return self

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join()

    @contextlib.contextmanager
    def sending(self, broker: str, sock: socket.socket | None) -> Iterator[None]:
        """Around the wait for one answer on ``sock``, which is cut if ``broker`` goes silent."""
        if sock is None:
            yield
            return
        with self._lock:
            self._inflight[broker].add(sock)
        try:
            yield
        finally:
            with self._lock:
                self._inflight[broker].discard(sock)

    def _check(self, broker: str) -> None:
        u = urlsplit(self._urls[broker])
        conn: http.client.HTTPConnection | None = None
        while not self._stop.wait(self.interval_s):
            try:
                if conn is None:
                    conn = http.client.HTTPConnection(u.hostname or "127.0.0.1", u.port or 80, timeout=self.timeout_s)
                conn.request("GET", "/health")
                resp = conn.getresponse()
                resp.read()
                ok = resp.status < 500
            except (OSError, http.client.HTTPException):
                ok = False
                if conn is not None:
                    conn.close()
                conn = None
            if ok:
                self._router.set_silent(broker, False)
                continue
            if self._router.alive(broker):
                log.warning("broker %s did not answer its health check within %.2f s: out of rotation, "
                            "requests in flight to it cut", broker, self.timeout_s)
            self._router.set_silent(broker, True, self._partitions)
            self._cut(broker)
        if conn is not None:
            conn.close()

    def _cut(self, broker: str) -> None:
        with self._lock:
            socks = list(self._inflight[broker])
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
                self.cuts += 1
