"""Compactors that SIGKILL themselves at one protocol point, as child processes.

    python tests/workers/compactor_crash.py TOPIC

Reads lines ``PARTITION=POINT PARTITION=POINT ...`` on stdin; for each line forks one
child process per pair, each running ``compact_once`` on its partition and killing
itself with SIGKILL when the compaction reaches POINT, waits for all of them and
prints their wait statuses as one JSON line (``{"partition": [signal, exit code]}``).
Forking from a process that has imported everything but opened no connection keeps a
round cheap; each child opens its own. Configuration comes from ``LLOG_*``.
"""

from __future__ import annotations

import json
import os
import signal
import sys

import llog
from compactor import StageEvent, compact_once


def run_child(topic: str, partition: int, point: str) -> None:
    def hook(ev: StageEvent) -> None:
        if ev.point == point:
            os.kill(os.getpid(), signal.SIGKILL)

    with llog.connect() as conn:
        compact_once(conn, topic, partition, hook=hook)


def main() -> None:
    topic = sys.argv[1]
    print("ready", flush=True)
    for line in sys.stdin:
        pids: dict[int, int] = {}
        for item in line.split():
            part, point = item.split("=", 1)
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    run_child(topic, int(part), point)
                except BaseException:
                    code = 3
                os._exit(code)
            pids[pid] = int(part)
        out: dict[int, list[int]] = {}
        for pid, part in pids.items():
            _, status = os.waitpid(pid, 0)
            out[part] = [os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0,
                         os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1]
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
