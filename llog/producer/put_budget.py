"""A producer's WAL PUT budget: a token bucket of PUTs per second.

S3 bills every PUT alike, so a producer under light load that flushes as soon as it
can (a batch every ``batch_max_delay_ms``, as many in flight as allowed) pays for a
PUT per handful of records: at 200 single-record requests/s and S3 Standard latency
one broker made ~31 PUTs/s (issue 38). The budget holds a *due* batch until a token is
there, so under light load a batch collects records for up to ``1 / rate`` seconds and
the PUT rate stays at ``rate``; ``burst`` tokens let short bursts (an interactive
client, a test) through at full speed. Batches closed by size, an explicit flush or
close are never held: under heavy load the budget costs no throughput, and the PUT rate
is then what the bytes need (``load / batch_max_bytes``).
"""

from __future__ import annotations


class PutBudget:
    """Tokens refill at ``rate`` per second up to ``burst``; each PUT takes one.
    Not thread-safe: the accumulator calls it under its lock."""

    def __init__(self, rate: float, burst: int, now: float) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError(f"a PUT budget needs rate > 0 and burst >= 1 (rate {rate}, burst {burst})")
        self.rate = rate
        self.burst = float(burst)
        self._tokens = self.burst
        self._at = now

    def _refill(self, now: float) -> None:
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now

    def wait_s(self, now: float) -> float:
        """Seconds until a token is there (0: now)."""
        self._refill(now)
        return 0.0 if self._tokens >= 1.0 else (1.0 - self._tokens) / self.rate

    def take(self, now: float) -> None:
        """Spend a token for a PUT starting now. A PUT the budget does not hold (size,
        flush, close) spends one if there is one, never going into debt: debt would
        hold the next light-load batch for a PUT heavy load already paid for."""
        self._refill(now)
        self._tokens = max(0.0, self._tokens - 1.0)
