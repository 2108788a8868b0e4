"""A writer process for the session-expiry test, to be paused with SIGSTOP.

    python tests/workers/paused_writer.py TOPIC

Opens one connection (``LLOG_*`` environment) and a :class:`llog.Writer`, stages one
blob of records ``a``, ``b`` for partition 0 and prints ``{"staged": data_key}``. Then it
waits for a line on stdin (the test stops and resumes it meanwhile), commits the blob,
appends ``c`` in a new blob and prints one JSON line per outcome: ``{"ok": start
offset}`` or ``{"error": type name}``; then ``done``.
"""

from __future__ import annotations

import json
import sys

import llog


def _say(obj: object) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _report(out: llog.AppendResult | llog.AppendFailure) -> None:
    if isinstance(out, llog.AppendResult):
        _say({"ok": out.start_offset})
    else:
        _say({"error": type(out.error).__name__})


def main(topic: str) -> None:
    with llog.connect() as conn, llog.Writer(conn) as writer:
        staged = writer.stage_shared([llog.AppendGroup(topic, 0, [b"a", b"b"])])
        _say({"staged": staged.data_key})
        sys.stdin.readline()
        for out in writer.commit_staged(staged):
            _report(out)
        for out in writer.append_shared([llog.AppendGroup(topic, 0, [b"c"])]):
            _report(out)
    print("done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
