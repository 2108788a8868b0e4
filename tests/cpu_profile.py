"""CPU-seconds per test: where a CPU-bound suite spends its two cores.

    python -m tests.cpu_profile .cache/test-reports/cpu.json -- make test     (make cpu-profile)

Runs the command with this module loaded into every pytest process as a plugin (through
``PYTEST_ADDOPTS``): each writes the test it is running to a file named for its pid.
Meanwhile it samples ``/proc`` once a second and gives each process's CPU since the last
sample to the test its nearest pytest ancestor was running then (etcd, S3 servers,
brokers, JVMs and clients a test started are its descendants), or to "(no test)" (the
install, lint, and processes that left their parent). Writes ``by_test``, ``by_file`` and
``by_program`` (CPU-seconds) and the machine's busy share per second to the JSON file and
prints the 30 costliest tests. A process that lives less than a second may be missed or
given to the test of the next sample; the totals are for finding the heavy tests, not
for accounting to the second.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Generator, Mapping
from pathlib import Path
from typing import Any

import pytest

#: Where the pytest processes write the test they run (set by :func:`main`).
MARKS_ENV = "LLOG_TEST_CPU_MARKS"
NO_TEST = "(no test)"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    """The plugin: the test this process runs, from its setup to its teardown."""
    marks = os.environ.get(MARKS_ENV)
    if marks:
        _mark(Path(marks), item.nodeid)
    try:
        return (yield)
    finally:
        if marks:
            _mark(Path(marks), "")


def _mark(marks: Path, nodeid: str) -> None:
    path = marks / str(os.getpid())
    path.with_suffix(".tmp").write_text(nodeid)
    path.with_suffix(".tmp").replace(path)


def attribute(procs: Mapping[int, tuple[int, int]], ticks: Mapping[int, int],
              marks: Mapping[int, str]) -> dict[str, int]:
    """CPU ticks by test: ``procs`` is pid -> (parent pid, ticks used since the last
    sample), ``marks`` pid -> the test that pytest process runs ("" between tests)."""
    out: dict[str, int] = collections.Counter()
    for pid, used in ticks.items():
        owner, hops = pid, 0
        while owner not in marks and owner in procs and hops < 64:
            owner, hops = procs[owner][0], hops + 1
        out[marks.get(owner) or NO_TEST] += used
    return out


class Sampler(threading.Thread):
    """Samples ``/proc`` every ``interval`` seconds until :meth:`stop`."""

    def __init__(self, marks: Path, interval: float = 1.0) -> None:
        super().__init__(name="cpu-sampler", daemon=True)
        self.marks, self.interval = marks, interval
        self._stop_event = threading.Event()
        self.by_test: collections.Counter[str] = collections.Counter()
        self.by_program: collections.Counter[str] = collections.Counter()
        self.busy: list[float] = []
        self._last: dict[int, tuple[int, int]] = {}  # pid -> (start time, ticks)
        self._programs: dict[int, str] = {}

    def run(self) -> None:
        machine = _machine()
        while not self._stop_event.wait(self.interval):
            self._sample()
            now = _machine()
            self.busy.append(round(1 - (now[0] - machine[0]) / max(1, now[1] - machine[1]), 3))
            machine = now
        self._sample()

    def stop(self) -> None:
        self._stop_event.set()
        self.join()

    def _sample(self) -> None:
        procs: dict[int, tuple[int, int]] = {}
        used: dict[int, int] = {}
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            pid = int(name)
            stat = _stat(pid)
            if stat is None:
                continue
            ppid, start, ticks = stat
            procs[pid] = (ppid, ticks)
            before = self._last.get(pid)
            used[pid] = ticks - before[1] if before and before[0] == start else ticks
            if not before or before[0] != start or (used[pid] and self._programs.get(pid) in ("bash", "sh")):
                self._programs[pid] = _program(pid)  # new, or exec'd since (a script's java)
            self._last[pid] = (start, ticks)
            self.by_program[self._programs[pid]] += used[pid]
        self.by_test.update(attribute(procs, {p: u for p, u in used.items() if u}, _marks(self.marks)))


def _stat(pid: int) -> tuple[int, int, int] | None:
    """(parent pid, start time, user + system ticks)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return int(fields[1]), int(fields[19]), int(fields[11]) + int(fields[12])


def _program(pid: int) -> str:
    """A short name: ``java``, ``etcd``, ``python -m llog broker``, ``python X.py``."""
    try:
        argv = [a.decode(errors="replace") for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    except OSError:
        return "?"
    if not argv:
        return "?"
    exe = os.path.basename(argv[0])
    if exe.startswith("python"):
        if "-m" in argv:
            i = argv.index("-m")
            return " ".join(["python -m", *argv[i + 1:i + 3]])
        if "-c" in argv:
            return "python -c"  # pytest-xdist's workers, Spark's forked Python workers
        script = next((a for a in argv[1:] if not a.startswith("-")), "")
        return f"python {os.path.basename(script)[:40]}"
    return exe


def _marks(marks: Path) -> dict[int, str]:
    out = {}
    for path in marks.iterdir():
        if path.name.isdigit():
            try:
                out[int(path.name)] = path.read_text()
            except OSError:
                continue
    return out


def _machine() -> tuple[int, int]:
    """(idle ticks, all ticks) of the whole machine."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return fields[3] + fields[4], sum(fields)


def report(sampler: Sampler) -> dict[str, Any]:
    hz = os.sysconf("SC_CLK_TCK")
    by_file: collections.Counter[str] = collections.Counter()
    for test, ticks in sampler.by_test.items():
        by_file[test.split("::")[0]] += ticks
    return {name: {k: round(v / hz, 2) for k, v in counter.most_common()}
            for name, counter in (("by_test", sampler.by_test), ("by_file", by_file),
                                  ("by_program", sampler.by_program))} | {"busy": sampler.busy}


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print(__doc__, file=sys.stderr)
        return 2
    out, command = Path(argv[0]), argv[2:]
    with tempfile.TemporaryDirectory(prefix="llog-cpu-") as marks:
        env = {**os.environ, MARKS_ENV: marks,
               "PYTEST_ADDOPTS": f"{os.environ.get('PYTEST_ADDOPTS', '')} -p tests.cpu_profile".strip()}
        sampler = Sampler(Path(marks))
        sampler.start()
        proc = subprocess.Popen(command, env=env)
        try:
            code = proc.wait()
        except KeyboardInterrupt:
            proc.send_signal(signal.SIGINT)
            code = proc.wait()
        sampler.stop()
    data = report(sampler)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1))
    for test, seconds in list(data["by_test"].items())[:30]:
        print(f"{seconds:8.1f}  {test}")
    print(f"CPU-seconds by test, file and program: {out}")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
