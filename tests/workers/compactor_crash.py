"""Compactors that SIGKILL themselves at one protocol point, as child processes.

    python tests/workers/compactor_crash.py TOPIC

Reads lines ``PARTITION=POINT PARTITION=POINT ...`` on stdin; for each line forks one
child process per pair, each running ``compact_once`` on its partition and killing
itself with SIGKILL when the compaction reaches POINT, waits for all of them and
prints their wait statuses as one JSON line (``{"partition": [signal, exit code]}``).
Forking keeps a round cheap: the parent imports everything and builds the object
store client (the slow part of a connection) without ever using it, so each child
inherits an idle client with no sockets open; each child opens its own etcd channel.
Configuration comes from ``LLOG_*``.
"""

from __future__ import annotations

import json
import os
import signal
import sys

import llog
from compactor import StageEvent, compact_once
from llog.metrics import Metrics
from llog.store import ObjectStore, open_store


def run_child(config: llog.LlogConfig, store: ObjectStore, metrics: Metrics, topic: str, partition: int,
              point: str) -> None:
    def hook(ev: StageEvent) -> None:
        if ev.point == point:
            os.kill(os.getpid(), signal.SIGKILL)

    with llog.Connection(config, store=store, metrics=metrics) as conn:
        compact_once(conn, topic, partition, hook=hook)


def main() -> None:
    topic = sys.argv[1]
    config = llog.LlogConfig.from_env()
    metrics = Metrics()
    store = open_store(config, metrics)
    print("ready", flush=True)
    for line in sys.stdin:
        pids: dict[int, int] = {}
        for item in line.split():
            part, point = item.split("=", 1)
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    run_child(config, store, metrics, topic, int(part), point)
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
