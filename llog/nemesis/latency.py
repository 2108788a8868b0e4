"""Named S3 latency profiles: the delay the proxy adds before a response's first byte.

Each profile is a lognormal distribution given by its median and p99 (``sigma =
ln(p99 / median) / z99``), a shape that fits request latencies: most requests close to
the median, a long right tail. Draws come from a seeded generator, so a run is
repeatable in the sequence of delays it draws.

- ``standard`` (S3 Standard): median 60 ms, p99 200 ms. AWS's "Performance design
  patterns for Amazon S3" gives roughly 100-200 ms for small-object (and first-byte)
  latency; this distribution puts p90 at about 116 ms and p99 at 200 ms, so the slow
  requests the guideline describes are there, while the median matches the measurements
  of llog issue 22 (a lognormal of median 60 ms, p99 200 ms), so figures compare.
- ``express`` (S3 Express One Zone): median 3 ms, p99 9 ms. AWS describes Express One
  Zone as "consistent single-digit millisecond data access"; p99 stays under 10 ms.
- ``none``: no delay (the local server's own ~1 ms).
- ``fixed:<ms>``: every request delayed exactly ``ms`` milliseconds.
"""

from __future__ import annotations

import math
import random
import threading
from collections import deque
from dataclasses import dataclass

from llog.errors import ConfigError

#: The standard normal quantile at 0.99.
Z99 = 2.326347874


@dataclass(frozen=True)
class LatencyProfile:
    """A lognormal delay of ``median_ms`` and ``p99_ms`` (equal: a fixed delay; 0: none)."""

    name: str
    median_ms: float
    p99_ms: float
    source: str = ""

    @property
    def mu(self) -> float:
        return math.log(self.median_ms) if self.median_ms > 0 else 0.0

    @property
    def sigma(self) -> float:
        if self.median_ms <= 0 or self.p99_ms <= self.median_ms:
            return 0.0
        return math.log(self.p99_ms / self.median_ms) / Z99

    def draw_ms(self, rng: random.Random) -> float:
        """One delay in milliseconds."""
        if self.median_ms <= 0:
            return 0.0
        if self.sigma == 0.0:
            return self.median_ms
        return rng.lognormvariate(self.mu, self.sigma)


PROFILES: dict[str, LatencyProfile] = {
    "none": LatencyProfile("none", 0.0, 0.0, "no added delay"),
    "standard": LatencyProfile(
        "standard", 60.0, 200.0,
        "S3 Standard: AWS performance guidelines (~100-200 ms small-object latency); llog issue 22",
    ),
    "express": LatencyProfile(
        "express", 3.0, 9.0, "S3 Express One Zone: AWS, 'single-digit millisecond data access'"
    ),
}


def profile(name: str) -> LatencyProfile:
    """The profile called ``name``: one of :data:`PROFILES` or ``fixed:<ms>``."""
    if name in PROFILES:
        return PROFILES[name]
    kind, sep, arg = name.partition(":")
    if kind == "fixed" and sep:
        try:
            ms = float(arg)
        except ValueError:
            ms = -1.0
        if ms >= 0:
            return LatencyProfile(name, ms, ms, "fixed delay")
    raise ConfigError(f"unknown S3 latency profile {name!r}: one of {sorted(PROFILES)} or fixed:<ms>")


class LatencySampler:
    """Draws delays from one profile with a seeded generator and keeps the last
    ``keep`` draws (milliseconds) for a run's report and the tests. Thread-safe."""

    def __init__(self, prof: LatencyProfile, seed: int = 0, keep: int = 100_000) -> None:
        self.profile = prof
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._draws: deque[float] = deque(maxlen=keep)

    def draw_ms(self) -> float:
        with self._lock:
            ms = self.profile.draw_ms(self._rng)
            self._draws.append(ms)
        return ms

    def draws(self) -> list[float]:
        """The draws kept so far, oldest first."""
        with self._lock:
            return list(self._draws)


def quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (nearest rank)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]
