"""A consumer-group member for the group tests, run as a child process.

    python tests/workers/group_member.py GROUP TOPIC OUT_FILE MEMBER_ID

Consumes with commit-after-process: each polled batch is appended to OUT_FILE (one
JSON line per record, fsynced) and only then committed. Exits cleanly on SIGTERM.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading

import llog
from llog.groups import Consumer


def main() -> None:
    group, topic, out_path, member_id = sys.argv[1:5]
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with llog.connect() as conn, open(out_path, "a") as out, Consumer(
        conn, group, [topic], member_id=member_id, session_ttl_s=3, rebalance_interval_s=0.2
    ) as consumer:
        print("joined", flush=True)
        while not stop.is_set():
            recs = consumer.poll(max_records=50, timeout_s=0.2)
            if not recs:
                continue
            for r in recs:
                out.write(json.dumps([r.topic, r.partition, r.offset, r.value.decode()]) + "\n")
            out.flush()
            os.fsync(out.fileno())
            consumer.commit()
        consumer.commit()


if __name__ == "__main__":
    main()
