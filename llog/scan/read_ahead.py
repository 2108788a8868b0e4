"""How far a reader's scans read ahead (protocol/README.md §9 step 9).

A scan keeps some range GETs in flight while the consumer decodes what came back. At a
local object store's ~1 ms two GETs keep up; at S3 Standard's 60-200 ms a scan with
two in flight is bound by round trips (a few dozen slices a second), whatever the
bandwidth. So the depth adapts: when the consumer reaches a GET that has not
answered yet, it waited on latency and the depth doubles; when a whole window's worth
of GETs in a row had answered before they were needed, it steps back by one. One
:class:`ReadAhead` is shared by a reader's scans, so what one request learned about the
store's latency holds for the next (a broker's long-polls are short scans).
"""

from __future__ import annotations

import threading

from prometheus_client import Gauge


class ReadAhead:
    """The number of GETs a scan keeps in flight: between ``least`` and ``most``."""

    def __init__(self, least: int, most: int, gauge: Gauge | None = None) -> None:
        self.least = max(1, least)
        self.most = max(self.least, most)
        self._depth = self.least
        self._ready_run = 0
        self._lock = threading.Lock()
        self._gauge = gauge
        self._show()

    @property
    def depth(self) -> int:
        return self._depth

    def taken(self, was_ready: bool) -> None:
        """The consumer took its oldest GET: already answered (``was_ready``) or not."""
        with self._lock:
            if not was_ready:
                self._ready_run = 0
                self._depth = min(self.most, self._depth * 2)
            else:
                self._ready_run += 1
                if self._ready_run < self._depth:
                    return
                self._ready_run = 0
                self._depth = max(self.least, self._depth - 1)
        self._show()

    def _show(self) -> None:
        if self._gauge is not None:
            self._gauge.set(self._depth)
