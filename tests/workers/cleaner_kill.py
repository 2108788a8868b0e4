"""A key compaction pass (spec §10.2) that SIGKILLs itself at one protocol point.

    python tests/workers/cleaner_kill.py TOPIC PARTITION POINT

Runs ``clean_once`` on the partition and kills itself with SIGKILL when a key
compaction record reaches POINT (``after_put``, ``after_record``, ``after_<STAGE>``);
``none`` runs the pass to its end and prints its result and the process's peak
resident memory as one JSON line. Configuration comes from ``LLOG_*``.
"""

from __future__ import annotations

import json
import os
import signal
import sys

import llog
from compactor import Compactor, StageEvent


def main() -> None:
    topic, partition, point = sys.argv[1], int(sys.argv[2]), sys.argv[3]

    def hook(ev: StageEvent) -> None:
        if ev.point == point and ev.record.replaces is not None:
            os.kill(os.getpid(), signal.SIGKILL)

    with llog.Connection(llog.LlogConfig.from_env()) as conn, Compactor(conn, hook=hook) as c:
        res = c.clean_once(topic, partition)
    print(json.dumps({"outcome": res.outcome, "removed": res.removed, "groups": res.groups, "keys": res.keys,
                      "peak_rss_mib": round(_peak_rss_kib() / 1024, 1)}), flush=True)


def _peak_rss_kib() -> int:
    """This process's peak resident memory: ``VmHWM`` (``ru_maxrss`` keeps the parent's
    peak across ``exec`` on Linux, so it would report pytest's)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


if __name__ == "__main__":
    main()
