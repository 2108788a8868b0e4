"""Progress lines on stderr for long produce/consume runs."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """Counts records and bytes; prints a rate line at most every ``interval_s`` seconds
    (only when enabled, by default when stderr is a terminal) and a total at the end."""

    def __init__(self, verb: str, *, enabled: bool | None = None, interval_s: float = 2.0,
                 out: TextIO | None = None) -> None:
        self.verb = verb
        self.out = out or sys.stderr
        self.enabled = self.out.isatty() if enabled is None else enabled
        self.interval_s = interval_s
        self.records = 0
        self.bytes = 0
        self._start = self._last = time.monotonic()

    def add(self, records: int, nbytes: int) -> None:
        self.records += records
        self.bytes += nbytes
        now = time.monotonic()
        if self.enabled and now - self._last >= self.interval_s:
            self._last = now
            self._line(now, final=False)

    def done(self) -> None:
        self._line(time.monotonic(), final=True)

    def _line(self, now: float, *, final: bool) -> None:
        secs = max(now - self._start, 1e-9)
        mib = self.bytes / 2**20
        prefix = "" if final else "... "
        self.out.write(
            f"{prefix}{self.verb} {self.records:,} record(s), {mib:,.1f} MiB in {secs:.1f}s "
            f"({self.records / secs:,.0f} rec/s, {mib / secs:,.1f} MiB/s)\n"
        )
        self.out.flush()
