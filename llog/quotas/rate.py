"""How fast a client goes and how long it must wait: Kafka's sampled rate and its
throttle time (``ClientQuotaManager``, KIP-219).

The rate is the sum of the values recorded in the last ``samples`` windows of
``window_s`` each, over the time they span, but never over less than one whole window
(a client's first burst is measured over a second, not over the milliseconds it took).
Kafka pads that span to ``samples - 1`` windows, so a new client's first ten seconds'
worth of its quota pass at once: with a 5 MiB/s quota, 50 MiB in a burst that the other
tenants of a broker wait behind (bench/tenants.py measured it); here one second's worth
does. A client over its quota T at a measured rate O over a span W waits
``(O - T) / T * W``, W the time its windows really span: the delay that brings the rate
back to T if it records nothing more."""

from __future__ import annotations

from dataclasses import dataclass, field

#: Kafka's defaults: ``quota.window.num`` (11) windows of ``quota.window.size.seconds`` (1).
SAMPLES = 11
WINDOW_S = 1.0


@dataclass
class SampledRate:
    """Values recorded over time (bytes, or seconds of request handling), as a rate per
    second over the last ``samples`` windows."""

    window_s: float = WINDOW_S
    samples: int = SAMPLES
    #: (window start, sum of the values recorded in it), oldest first.
    _windows: list[list[float]] = field(default_factory=list)

    def record(self, value: float, now: float) -> None:
        """Add ``value`` at time ``now`` (seconds, monotonic)."""
        self._purge(now)
        if not self._windows or now >= self._windows[-1][0] + self.window_s:
            self._windows.append([now, 0.0])
        self._windows[-1][1] += value

    def span(self, now: float) -> float:
        """The seconds the rate is measured over at ``now``."""
        self._purge(now)
        elapsed = now - self._windows[0][0] if self._windows else 0.0
        return max(elapsed, self.window_s)

    def rate(self, now: float) -> float:
        """Values per second at ``now``."""
        span = self.span(now)
        return sum(v for _, v in self._windows) / span

    def throttle_s(self, bound: float, now: float) -> float:
        """How long to wait, at ``now``, to be back within ``bound`` per second: 0 when
        within it."""
        rate = self.rate(now)
        if rate <= bound:
            return 0.0
        if bound <= 0:
            return self.samples * self.window_s
        # Kafka's (O - T) / T * W, with W the time the windows really span: then after
        # the wait the total over the longer span is T exactly (over the padded span, a
        # client new within the second would still be over when its wait ends).
        total = sum(v for _, v in self._windows)
        return max(0.0, total / bound - (now - self._windows[0][0]))

    def _purge(self, now: float) -> None:
        # A window is dropped once it started ``samples`` windows ago or more (Kafka: at
        # most ``samples`` windows are kept).
        horizon = now - self.samples * self.window_s
        while self._windows and self._windows[0][0] <= horizon:
            self._windows.pop(0)
