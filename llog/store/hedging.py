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
#: pool's threads start as needed). A store holding a third of its answers for 2 s
#: keeps dozens of losers running: with 32, hedges queued behind them for up to 0.8 s.
MAX_ATTEMPTS = 128
#: Times one PUT may be sent: the first and up to five hedges, each after twice the
#: wait of the one before (20 ms, 40, 80, ...: the last by about 0.6 s). One hedge
#: leaves a PUT slow when both draws are (9 % of PUTs when 30 % of a store's answers are
#: held), and with commits in order that stalls a writer every few batches; six sends
#: leave 0.07 %. Measured with a third of the answers held 2 s: the longest gap between
#: a producer's acknowledgements went from 2.1 s to 0.3 s.
SENDS = 6


class HedgedPuts:
    """PUTs of ``store`` hedged after a delay from the recent PUT latencies
    (:class:`LatencyWindow`); with ``quantile`` 0, every PUT is sent once, on the
    caller's thread."""

    def __init__(self, store: ObjectStore, metrics: Metrics, *, quantile: float, min_delay_s: float) -> None:
        self.store = store
        self.metrics = metrics
        self.window = LatencyWindow(quantile, min_delay_s)
        self._pool = ThreadPoolExecutor(MAX_ATTEMPTS, thread_name_prefix="llog-put") if quantile > 0 else None

    def put(self, key: str, data: bytes, *, crc32: int | None = None) -> None:
        """PUT ``data`` at ``key``: returns once an attempt has succeeded; raises the
        last attempt's error when all of them failed."""
        if self._pool is None:  # hedging off: nothing to time either
            self.store.put(key, data, crc32=crc32)
            return

        def attempt(n: int) -> None:
            if n:
                self.metrics.put_hedges.labels("sent").inc()
            t0 = time.perf_counter()
            self.store.put(key, data, crc32=crc32)
            self.window.record(time.perf_counter() - t0)

        if race(self._pool, attempt, self.window.delay(), SENDS):
            self.metrics.put_hedges.labels("won").inc()

    def close(self) -> None:
        """Wait for PUTs still running (a hedge's loser ends within the store's timeouts)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)


#: Latencies timed before a window's delay is taken from them.
MIN_SAMPLES = 20
#: The hedge delay until then: S3 Standard rarely takes longer for a PUT.
UNTIMED_DELAY_S = 0.25
#: Recent latencies a window keeps.
WINDOW = 200
#: The hedge delay is at most this many times the median: when more than
#: ``1 - quantile`` of the requests are slow (a store holding 30 % of its answers for
#: seconds), the quantile itself is one of the slow ones and a hedge after it comes too
#: late to help; the median stays fast while most requests are.
MEDIAN_FACTOR = 4.0


class LatencyWindow:
    """The recent latencies of one kind of request, and the hedge delay they give:
    their ``quantile``, but at most :data:`MEDIAN_FACTOR` x their median, and never
    under ``min_s`` (a store faster than that is not worth a second request); until
    :data:`MIN_SAMPLES` were recorded (the quantile of fewer says little),
    :data:`UNTIMED_DELAY_S`. The floor is a delay, not a switch: a fast store whose
    answers start being held (a third of them, say) is hedged from the first held one,
    not once the window has filled with slow answers."""

    def __init__(self, quantile: float, min_s: float) -> None:
        self.quantile = quantile
        self.min_s = min_s
        self._lock = threading.Lock()
        self._seconds: deque[float] = deque(maxlen=WINDOW)

    def record(self, seconds: float) -> None:
        with self._lock:
            self._seconds.append(seconds)

    def delay(self) -> float:
        with self._lock:
            if len(self._seconds) < MIN_SAMPLES:
                return max(self.min_s, UNTIMED_DELAY_S)
            ordered = sorted(self._seconds)
        q = ordered[min(len(ordered) - 1, int(self.quantile * len(ordered)))]
        return max(self.min_s, min(q, MEDIAN_FACTOR * ordered[len(ordered) // 2]))


def race(pool: Executor, attempt: Callable[[int], object], delay: float, sends: int) -> int:
    """Run ``attempt(0)`` on ``pool``; whenever no attempt has succeeded within the
    wait (``delay``, doubling after each), or every attempt running has failed, run the
    next (``attempt(1)``, ...), up to ``sends`` in all. Returns the number of the first
    attempt to succeed (of several at once, the lowest); raises the last error when
    every attempt failed."""
    running: dict[Future[object], int] = {}
    failure: BaseException | None = None
    sent = 0
    wait_s = delay
    while True:
        running[pool.submit(attempt, sent)] = sent
        sent += 1
        while True:
            more = sent < sends
            done, _ = wait(running, timeout=wait_s if more else None, return_when=FIRST_COMPLETED)
            for f in sorted(done, key=running.__getitem__):
                n = running.pop(f)
                exc = f.exception()
                if exc is None:
                    return n
                failure = exc
            if not running and not more:
                assert failure is not None
                raise failure
            if more and (not done or not running):
                break  # late, or every attempt so far failed: send the next
        if not done:
            wait_s *= 2
