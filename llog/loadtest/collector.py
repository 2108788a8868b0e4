"""Samples the cluster every interval: each broker's and the compactor's ``/metrics``
(JSON) and every process's CPU time and RSS from ``/proc``, appended to
``collector.jsonl``. The last scrape of each process incarnation (name, pid) is kept:
a broker killed with -9 loses its counters, so its totals are the last ones seen."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Target:
    name: str
    pid: int
    metrics_url: str | None  # JSON /metrics, or None for processes without one


def proc_stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (its third field on),
    None if there is no such process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def proc_usage(pid: int) -> tuple[float, int] | None:
    """``(cpu seconds, rss bytes)`` of a live process, None if it is gone."""
    fields = proc_stat(pid)
    if fields is None:
        return None
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    cpu = (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime (fields 14, 15 of stat)
    rss = 0
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) * 1024
            break
    return cpu, rss


def flatten(snapshot: dict[str, list[dict[str, Any]]]) -> dict[str, float]:
    """``{name{k=v,...}: value}`` without histogram buckets (they dwarf the rest)."""
    out: dict[str, float] = {}
    for name, samples in snapshot.items():
        if name.endswith(("_bucket", "_created")):
            continue
        for s in samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s["labels"].items()))
            out[f"{name}{{{labels}}}" if labels else name] = float(s["value"])
    return out


class Collector:
    """A background thread sampling ``targets()`` every ``interval_s`` until :meth:`stop`."""

    def __init__(self, targets: Callable[[], list[Target]], out: Path, interval_s: float, t0: float) -> None:
        self.targets = targets
        self.interval_s = interval_s
        self.t0 = t0
        self._out = open(out, "a")  # noqa: SIM115 - closed in stop()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="llog-loadtest-collector", daemon=True)
        self.last: dict[tuple[str, int], dict[str, float]] = {}
        self._prev_cpu: dict[tuple[str, int], tuple[float, float]] = {}
        self.peak_rss: dict[str, int] = {}
        self.cpu_seconds: dict[tuple[str, int], float] = {}

    def start(self) -> Collector:
        self._thread.start()
        return self

    def _loop(self) -> None:
        k = 1
        while not self._stop.wait(max(0.0, self.t0 + k * self.interval_s - time.monotonic())):
            self.sample()
            k += 1

    def sample(self) -> None:
        now = time.monotonic()
        line: dict[str, Any] = {"t": round(now - self.t0, 3), "processes": {}, "metrics": {}}
        for tgt in self.targets():
            key = (tgt.name, tgt.pid)
            usage = proc_usage(tgt.pid)
            if usage is not None:
                cpu, rss = usage
                prev = self._prev_cpu.get(key)
                pct = None if prev is None else round(100 * (cpu - prev[0]) / max(1e-9, now - prev[1]), 1)
                self._prev_cpu[key] = (cpu, now)
                self.cpu_seconds[key] = cpu
                self.peak_rss[tgt.name] = max(self.peak_rss.get(tgt.name, 0), rss)
                line["processes"][tgt.name] = {"pid": tgt.pid, "cpu_s": cpu, "cpu_pct": pct, "rss_bytes": rss}
            if tgt.metrics_url is not None:
                flat = _scrape(tgt.metrics_url)
                if flat is not None:
                    self.last[key] = flat
                    line["metrics"][tgt.name] = flat
        if not self._out.closed:
            self._out.write(json.dumps(line) + "\n")
            self._out.flush()

    def total(self, prefix: str, name_prefix: str = "") -> float:
        """Sum of every kept series starting with ``prefix`` over the incarnations of
        processes whose name starts with ``name_prefix``."""
        return sum(v for (name, _), flat in self.last.items() if name.startswith(name_prefix)
                   for k, v in flat.items() if k.startswith(prefix))

    def series(self, prefix: str) -> dict[str, float]:
        """Series starting with ``prefix`` summed over every process incarnation."""
        out: dict[str, float] = {}
        for flat in self.last.values():
            for k, v in flat.items():
                if k.startswith(prefix):
                    out[k] = out.get(k, 0.0) + v
        return out

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()  # a last scrape of whoever is still up
        self._out.close()


def _scrape(url: str) -> dict[str, float] | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return flatten(json.loads(r.read()))
    except (OSError, ValueError) as exc:
        log.debug("scrape %s failed: %s", url, exc)
        return None
