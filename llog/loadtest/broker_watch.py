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

:class::class:`AdaptiveTimeout` is the backstop for a broker that answers its health check but
not a produce (stuck on a commit): a request's timeout follows the latencies just seen
(a multiple of their p99, within bounds), not a fixed worst case.

:class:`Hedger` does not wait for either: a request not answered within a few times
the median latency is sent to a second owner as well, and the first answer is taken
(the batches are idempotent: the broker that commits second answers with the first's
offsets), so one broker held up by its object store or its etcd member costs a
fraction of a second, not its timeout.
"""

from __future__ import annotations

import contextlib
import http.client
import logging
import socket
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TypeVar
from urllib.parse import urlsplit

from llog.loadtest.routing import Router
from llog.names import TopicPartition

log = logging.getLogger(__name__)

T = TypeVar("T")


class AdaptiveTimeout:
    """``factor`` x the p99 of the last ``window`` request latencies, within
    ``[floor_s, ceiling_s]`` (the ceiling until :data:`MIN_SEEN` latencies are known)."""

    MIN_SEEN = 20

    def __init__(self, floor_s: float, ceiling_s: float, *, factor: float = 4.0, window: int = 400) -> None:
        self.floor_s, self.ceiling_s, self.factor = floor_s, ceiling_s, factor
        self._seen: deque[float] = deque(maxlen=window)
        self._lock = threading.Lock()
        self._current = ceiling_s
        self._median: float | None = None

    def observe(self, seconds: float) -> None:
        with self._lock:
            self._seen.append(seconds)
            if len(self._seen) >= self.MIN_SEEN and len(self._seen) % 10 == 0:
                ranked = sorted(self._seen)
                p99 = ranked[min(len(ranked) - 1, int(len(ranked) * 0.99))]
                self._current = min(self.ceiling_s, max(self.floor_s, self.factor * p99))
                self._median = ranked[len(ranked) // 2]

    def seconds(self) -> float:
        return self._current

    def median(self) -> float | None:
        """The median latency seen, once :data:`MIN_SEEN` are known."""
        return self._median


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


class Hedger:
    """Runs a request on a pool thread and, if it is not answered within
    ``factor`` x the median latency (at least ``min_delay_s``), the same request to a
    second broker too; the first to succeed is the answer."""

    def __init__(self, workers: int, timeouts: AdaptiveTimeout, *, factor: float = 4.0,
                 min_delay_s: float = 0.25) -> None:
        self._pool = ThreadPoolExecutor(max(2, workers), thread_name_prefix="llog-hedge")
        # Attempts running (losers still finishing included): no hedge beyond the pool.
        self._slots = threading.BoundedSemaphore(max(2, workers))
        self._timeouts = timeouts
        self.factor, self.min_delay_s = factor, min_delay_s
        self.sent = self.won = 0

    def delay(self) -> float | None:
        median = self._timeouts.median()
        return None if median is None else max(self.min_delay_s, self.factor * median)

    def send(self, first: str, second: str | None, attempt: Callable[[str], T],
             abandon: Callable[[str], None]) -> tuple[str, T]:
        """``(broker, attempt(broker))`` of the first attempt to succeed; the error of the
        first broker's when none does. ``abandon(broker)`` is called for an attempt still
        running when the other's answer is taken (its connection is its own now)."""
        delay = self.delay()
        if second is None or delay is None or not self._slots.acquire(blocking=False):
            return first, attempt(first)  # on the caller's thread, as without hedging
        primary = self._pool.submit(self._holding, attempt, first)
        try:
            return first, primary.result(timeout=delay)
        except FutureTimeout:
            pass
        if not self._slots.acquire(blocking=False):
            return first, primary.result()
        hedge = self._pool.submit(self._holding, attempt, second)
        self.sent += 1
        running: dict[Future[T], str] = {primary: first, hedge: second}
        failure: BaseException | None = None
        while running:
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for f in done:
                broker = running.pop(f)
                exc = f.exception()
                if exc is None:
                    for other in running.values():
                        abandon(other)
                    self.won += broker == second
                    return broker, f.result()
                if broker == first or failure is None:
                    failure = exc
        assert failure is not None
        raise failure

    def _holding(self, attempt: Callable[[str], T], broker: str) -> T:
        try:
            return attempt(broker)
        finally:
            self._slots.release()

    def close(self) -> None:
        self._pool.shutdown(wait=True)

