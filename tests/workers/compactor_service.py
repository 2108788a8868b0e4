"""The compactor service as a child process, auditing every compaction step it takes.

    python tests/workers/compactor_service.py NAME AUDIT_PATH [STALL_S]

Configuration comes from ``LLOG_*``. Each protocol point this process passes is
appended to AUDIT_PATH as one JSON line (``proc``, ``point``, ``partition``,
``data_key``, ``stage``, ``owner``, ``revision``) so a test can prove no two processes
ran a partition's compaction at once. With STALL_S, the process dawdles that long
after creating each compaction record (a slow compactor, so a test can kill it with a
compaction in flight). Prints ``started OWNER PORT``; stops gracefully
on SIGTERM.
"""

from __future__ import annotations

import json
import sys
import threading
import time

import llog
from compactor import StageEvent
from compactor.service import CompactorService


def main() -> None:
    name, audit_path = sys.argv[1], sys.argv[2]
    stall = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    lock = threading.Lock()
    audit = open(audit_path, "a", buffering=1)  # noqa: SIM115 - closed below

    def hook(ev: StageEvent) -> None:
        line = json.dumps({
            "proc": name, "point": ev.point, "topic": ev.topic, "partition": ev.partition,
            "data_key": ev.record.data_key, "stage": ev.record.stage, "owner": ev.record.owner,
            "revision": ev.revision,
        })
        with lock:
            audit.write(line + "\n")
        if stall and ev.point == "after_record":
            time.sleep(stall)

    svc = CompactorService(llog.LlogConfig.from_env(), owner=name, hook=hook).start()
    print("started", svc.owner, svc.http_port, flush=True)
    try:
        svc.wait()
    finally:
        audit.close()


if __name__ == "__main__":
    main()
