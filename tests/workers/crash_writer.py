"""Writers that SIGKILL themselves at one commit-protocol point, as child processes.

    python tests/workers/crash_writer.py TOPIC PARTITIONS

Reads lines ``ROUND POINT KILL_AT CALLS`` on stdin. For each line it forks one child
that opens its own connection (``LLOG_*`` environment) and a :class:`llog.Writer` whose
fault hook kills the process with SIGKILL at the ``KILL_AT``-th time the writer reaches
``POINT`` ("after_put", "after_commit" or "after_settle"). The child makes ``CALLS``
``append_shared`` calls, each with one small group for every partition, then (only
reached for "after_settle") ``settle_all``. It prints, one JSON line each:

* ``{"attempt": CALL, "groups": [[partition, [record id, ...]], ...]}`` before a call,
* ``{"ack": CALL, "p", "s", "e", "ids"}`` for each acknowledged group, before going on,
* ``{"failed": CALL, "p", "error"}`` for a group that did not commit,
* ``{"settling": N}`` before ``settle_all`` with N partitions left pending.

The parent waits for the child and prints ``{"status": [signal, exit code]}``. A record's
value is its id. Forking from a process that has imported everything but opened no
connection keeps a round cheap.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import sys

import llog
from llog.state.control import read_control


def _say(obj: object) -> None:
    # The child dies by SIGKILL: anything not flushed at once is lost.
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def run_child(topic: str, partitions: int, rnd: int, point: str, kill_at: int, calls: int) -> None:
    # Commits of one call run on several threads: next() on a count is atomic.
    seen = itertools.count(1)

    def hook(at: str, _data_key: str) -> None:
        if at == point and next(seen) == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    with llog.connect() as conn, llog.Writer(conn, fault_hook=hook) as writer:
        for call in range(calls):
            # 1..3 records per group, varying with round, call and partition.
            groups = [
                (p, [f"r{rnd}.c{call}.p{p}.{j}" for j in range(1 + (rnd + call + p) % 3)])
                for p in range(partitions)
            ]
            _say({"attempt": call, "groups": groups})
            outs = writer.append_shared(
                [llog.AppendGroup(topic, p, [i.encode() for i in ids]) for p, ids in groups]
            )
            for (p, ids), res in zip(groups, outs, strict=True):
                if isinstance(res, llog.AppendResult):
                    _say({"ack": call, "p": p, "s": res.start_offset, "e": res.end_offset, "ids": ids})
                else:
                    _say({"failed": call, "p": p, "error": repr(res.error)})
        left = sum(
            read_control(conn, topic, p).control.pending is not None for p in range(partitions)
        )
        _say({"settling": left})
        writer.settle_all()


def main() -> None:
    topic, partitions = sys.argv[1], int(sys.argv[2])
    print("ready", flush=True)
    for line in sys.stdin:
        rnd, point, kill_at, calls = line.split()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                run_child(topic, partitions, int(rnd), point, int(kill_at), int(calls))
            except BaseException as exc:  # report, then exit without the parent's cleanup
                _say({"error": repr(exc)})
                code = 3
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
        code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1
        print(json.dumps({"status": [sig, code]}), flush=True)


if __name__ == "__main__":
    main()
