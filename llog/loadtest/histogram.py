"""A mergeable latency histogram: log-spaced buckets 4% wide, so samples from many
processes and intervals combine exactly (a list of floats would not travel well)."""

from __future__ import annotations

import math
from collections.abc import Mapping

_GROWTH = 1.04
_LOG_GROWTH = math.log(_GROWTH)


class Histogram:
    def __init__(self, counts: Mapping[int, int] | None = None) -> None:
        self.counts: dict[int, int] = dict(counts or {})

    def add(self, ms: float) -> None:
        b = math.ceil(math.log(max(ms, 0.001)) / _LOG_GROWTH)
        self.counts[b] = self.counts.get(b, 0) + 1

    def merge(self, other: Histogram) -> None:
        for b, n in other.counts.items():
            self.counts[b] = self.counts.get(b, 0) + n

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def quantile(self, q: float) -> float | None:
        """Upper edge (ms) of the bucket holding the ``q`` quantile; None when empty."""
        total = self.total
        if total == 0:
            return None
        rank = q * total
        seen = 0
        for b in sorted(self.counts):
            seen += self.counts[b]
            if seen >= rank:
                return round(_GROWTH**b, 3)
        return round(_GROWTH ** max(self.counts), 3)

    def to_json(self) -> dict[str, int]:
        return {str(b): n for b, n in self.counts.items()}

    @classmethod
    def from_json(cls, doc: Mapping[str, int]) -> Histogram:
        return cls({int(b): int(n) for b, n in doc.items()})

    def figures(self) -> dict[str, float | None]:
        return {"p50_ms": self.quantile(0.5), "p90_ms": self.quantile(0.9), "p99_ms": self.quantile(0.99),
                "max_ms": self.quantile(1.0), "requests": self.total}
