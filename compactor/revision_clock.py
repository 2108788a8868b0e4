"""Which etcd revision was current some time ago, by this process's clock alone.

The service samples etcd's revision (with :func:`time.monotonic`) each time one of its
maintenance jobs runs. "The revision at least ``age`` seconds old" is then the newest
sample taken that long ago: a key whose ``mod_revision`` is at or below it was last
written at least ``age`` seconds ago, whatever any writer's wall clock says. Until the
process has been up that long there is no such sample, and nothing is judged old.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable

#: Samples kept at most: closer ones are skipped, which only makes ages err long.
MAX_SAMPLES = 1000


class RevisionClock:
    """``(monotonic time, revision)`` samples kept for ``horizon_s``. Thread-safe."""

    def __init__(self, horizon_s: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.horizon_s = horizon_s
        self._clock = clock
        self._times: list[float] = []
        self._revisions: list[int] = []
        self._lock = threading.Lock()

    def observe(self, revision: int) -> None:
        """Record that etcd is at ``revision`` now."""
        now = self._clock()
        with self._lock:
            if self._times and now - self._times[-1] < self.horizon_s / MAX_SAMPLES:
                return
            self._times.append(now)
            self._revisions.append(revision)
            # Keep the newest sample older than the horizon: it answers revision_before().
            drop = bisect.bisect_right(self._times, now - self.horizon_s) - 1
            if drop > 0:
                del self._times[:drop]
                del self._revisions[:drop]

    def revision_before(self, age_s: float) -> int | None:
        """The newest sampled revision at least ``age_s`` seconds old, or ``None``."""
        with self._lock:
            i = bisect.bisect_right(self._times, self._clock() - age_s)
            return self._revisions[i - 1] if i else None
