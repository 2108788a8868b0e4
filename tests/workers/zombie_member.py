"""A group member that can be paused past its session, run as a child process.

    python tests/workers/zombie_member.py GROUP TOPIC MEMBER_ID RECORDS

Joins (session TTL 2 s), polls until it has RECORDS records, prints ``polled N``, then
waits for a line on stdin; on it, commits what it delivered and prints the outcome as
one JSON line (``{"ok": true}`` or ``{"error_type": ..., "error": ...}``). It never
polls again, so a pause (SIGSTOP) between the two leaves it holding its old session.
"""

from __future__ import annotations

import json
import sys

import llog
from llog.errors import LlogError
from llog.groups import Consumer


def main() -> None:
    group, topic, member_id, want = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    with llog.connect() as conn:
        consumer = Consumer(conn, group, [topic], member_id=member_id, session_ttl_s=2)
        print("joined", flush=True)
        got = 0
        while got < want:
            got += len(consumer.poll(max_records=want, timeout_s=0.2))
        print(f"polled {got}", flush=True)
        sys.stdin.readline()
        try:
            consumer.commit()
            outcome: dict[str, object] = {"ok": True}
        except LlogError as exc:
            outcome = {"error_type": type(exc).__name__, "error": str(exc)}
        print(json.dumps(outcome), flush=True)
        try:
            consumer.close(commit=False)
        except LlogError as exc:  # its session is long gone; nothing to hand back
            print(json.dumps({"close_error": str(exc)}), file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
