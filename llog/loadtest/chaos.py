"""Scheduled faults: kill -9 a broker or the compactor at set times after the load
starts, and start it again ``restart_after_s`` later (same port, same log)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from llog.errors import LlogError
from llog.loadtest.process import ManagedProcess
from llog.loadtest.scenario import ChaosEvent

log = logging.getLogger(__name__)


class Chaos:
    """A thread running the scenario's chaos events; :attr:`events` records what
    happened. :meth:`stop` cancels whatever has not run yet."""

    def __init__(self, events: Sequence[ChaosEvent], processes: Mapping[str, ManagedProcess], t0: float) -> None:
        steps: list[tuple[float, str, str]] = []
        for e in events:
            steps.append((e.at_s, "kill", e.target))
            if e.restart_after_s >= 0:
                steps.append((e.at_s + e.restart_after_s, "restart", e.target))
        self._steps = sorted(steps)
        self._processes = processes
        self._t0 = t0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="llog-loadtest-chaos", daemon=True)
        self.events: list[dict[str, Any]] = []

    def start(self) -> Chaos:
        self._thread.start()
        return self

    def _run(self) -> None:
        for at, action, target in self._steps:
            if self._stop.wait(max(0.0, self._t0 + at - time.monotonic())):
                return
            proc = self._processes[target]
            entry: dict[str, Any] = {"planned_s": at, "action": action, "target": target, "pid": proc.pid}
            try:
                if action == "kill":
                    proc.kill9()
                else:
                    proc.start()
                    entry["new_pid"] = proc.pid
                    proc.wait_healthy()
                entry["ok"] = True
            except LlogError as exc:
                entry.update(ok=False, error=str(exc))
            entry["done_s"] = round(time.monotonic() - self._t0, 3)
            log.warning("chaos: %s %s at %.1fs (ok=%s)", action, target, entry["done_s"], entry["ok"])
            self.events.append(entry)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
