"""Live progress of a load-test run: one line per interval while the load runs.

The generator processes append a cumulative sample to ``client/samples-<i>.jsonl``
every interval; :class:`LiveProgress` reads the newest line of each file and reports
the phase, elapsed time, acknowledged records/s over the last interval, the newest
interval's p99 produce latency and how many faults chaos has injected so far.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llog.loadtest.histogram import Histogram

#: Where progress lines go (the CLI prints them to stderr).
Report = Callable[[str], None]


def _last_line(path: Path) -> dict[str, Any] | None:
    try:
        with path.open("rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - 65536))
            lines = f.read().splitlines()
    except OSError:
        return None
    for raw in reversed(lines):
        try:
            doc: dict[str, Any] = json.loads(raw)
            return doc
        except ValueError:  # a line still being written
            continue
    return None


class LiveProgress:
    """A thread printing a progress line every ``interval_s`` until :meth:`stop`."""

    def __init__(
        self, client_dir: Path, processes: int, duration_s: float, interval_s: float,
        faults: Callable[[], int], report: Report,
    ) -> None:
        self._files = [client_dir / f"samples-{i}.jsonl" for i in range(processes)]
        self._duration_s = duration_s
        self._interval_s = interval_s
        self._faults = faults
        self._report = report
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="llog-loadtest-progress", daemon=True)
        self._prev: tuple[float, int] = (0.0, 0)

    def start(self) -> LiveProgress:
        self._t0 = time.monotonic()
        self._thread.start()
        return self

    def line(self) -> str:
        """The current progress line."""
        samples = [s for s in (_last_line(f) for f in self._files) if s is not None]
        elapsed = time.monotonic() - self._t0
        acked = sum(int(s.get("acked_records", 0)) for s in samples)
        rate = 0.0
        if elapsed > self._prev[0]:
            rate = (acked - self._prev[1]) / (elapsed - self._prev[0])
        self._prev = (elapsed, acked)
        hist = Histogram()
        for s in samples:
            hist.merge(Histogram.from_json(s.get("hist", {})))
        p99 = hist.figures()["p99_ms"]
        phase = "load" if elapsed <= self._duration_s else "drain"
        return (f"[{phase} {elapsed:5.1f}/{self._duration_s:.0f} s] acked {acked:,} ({rate:,.0f} rec/s), "
                f"p99 {'-' if p99 is None else f'{p99:.0f} ms'}, faults {self._faults()}")

    def _loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            self._report(self.line())

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
