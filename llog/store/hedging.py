"""Hedged PUTs of WAL blobs: a PUT slower than most is sent again.

A producer commits its blobs in order, so one slow PUT holds back every batch behind
it: at S3 Standard latency (median tens of milliseconds, p99 a couple of hundred) the
tail of PUT latency becomes the produce latency of everything in flight. AWS's advice
for latency-sensitive S3 clients is to retry the slow requests; a hedge does so without
giving up the first: once a PUT has taken longer than the ``quantile`` of the recent
ones, the same bytes go to the same key again and whichever answer comes first is the
PUT's (about ``1 - quantile`` more PUT requests). Both write identical bytes to a key
nobody else writes (a WAL blob's key names its writer's session and a fresh id), so
either landing, or both in any order, leaves the same object. The loser still finishes
on its pool thread (a boto3 call cannot be called off); one that lands after the blob
was compacted and vacuumed leaves an unreferenced blob of an ended session, which a
later vacuum pass removes (spec §11).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ThreadPoolExecutor, wait

from llog.metrics import Metrics
from llog.store.base import ObjectStore

#: PUT attempts running at once, the losers of hedges still finishing included (the
#: pool's threads start as needed).
MAX_ATTEMPTS = 32


class HedgedPuts:
    """PUTs of ``store`` hedged after the ``quantile`` of the recent PUT latencies
    while that is at least ``min_delay_s``; otherwise (and with ``quantile`` 0) every PUT
    is sent once, on the caller's thread."""

    def __init__(self, store: ObjectStore, metrics: Metrics, *, quantile: float, min_delay_s: float) -> None:
        self.store = store
        self.metrics = metrics
        self.window = LatencyWindow(quantile, min_delay_s)
        self._pool = ThreadPoolExecutor(MAX_ATTEMPTS, thread_name_prefix="llog-put") if quantile > 0 else None

    def put(self, key: str, data: bytes, *, crc32: int | None = None) -> None:
        """PUT ``data`` at ``key``: returns once an attempt has succeeded; raises an
        attempt's error when both failed."""
        if self._pool is None:  # hedging off: nothing to time either
            self.store.put(key, data, crc32=crc32)
            return
        delay = self.window.delay()

        def attempt() -> None:
            t0 = time.perf_counter()
            self.store.put(key, data, crc32=crc32)
            self.window.record(time.perf_counter() - t0)

        def hedge() -> None:
            self.metrics.put_hedges.labels("sent").inc()
            attempt()

        if delay is None:
            attempt()
            return
        if race(self._pool, attempt, hedge, delay):
            self.metrics.put_hedges.labels("won").inc()

    def close(self) -> None:
        """Wait for PUTs still running (a hedge's loser ends within the store's timeouts)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)


#: Latencies timed before a window gives a delay: the quantile of fewer says little.
MIN_SAMPLES = 20
#: Recent latencies a window keeps.
WINDOW = 200


class LatencyWindow:
    """The recent latencies of one kind of request, and the hedge delay they give:
    their ``quantile``, or ``None`` (no hedging) while it is under ``min_s`` (the
    requests are fast: a second one would not pay for handing the first to another
    thread) or fewer than :data:`MIN_SAMPLES` were recorded."""

    def __init__(self, quantile: float, min_s: float) -> None:
        self.quantile = quantile
        self.min_s = min_s
        self._lock = threading.Lock()
        self._seconds: deque[float] = deque(maxlen=WINDOW)

    def record(self, seconds: float) -> None:
        with self._lock:
            self._seconds.append(seconds)

    def delay(self) -> float | None:
        with self._lock:
            if len(self._seconds) < MIN_SAMPLES:
                return None
            ordered = sorted(self._seconds)
        q = ordered[min(len(ordered) - 1, int(self.quantile * len(ordered)))]
        return q if q >= self.min_s else None


def race(pool: Executor, first: Callable[[], object], second: Callable[[], object], delay: float) -> bool:
    """Run ``first`` on ``pool``; once it has taken ``delay`` seconds, or failed, run
    ``second`` too. Returns when either has returned: whether ``second`` did so first
    (a tie goes to ``first``). When both fail, ``second``'s error is raised."""
    a: Future[object] = pool.submit(first)
    done, _ = wait([a], timeout=delay)
    if done and a.exception() is None:
        return False
    b: Future[object] = pool.submit(second)
    pending = {b} if done else {a, b}
    while pending:
        finished, pending = wait(pending, return_when=FIRST_COMPLETED)
        for f in sorted(finished, key=lambda f: f is not a):
            if f.exception() is None:
                return f is b
    b.result()
    raise AssertionError("unreachable: second failed without an error")
