"""Runs one document's python blocks in one namespace, one block per request, so later
blocks use what earlier ones defined (as a reader pasting them in order would).

Protocol (tests/docs_runner.py): one JSON line ``{"name": ..., "code": ...}`` per block on
stdin; one JSON line ``{"ok": bool, "output": str}`` back on the original stdout. While
a block runs, file descriptors 1 and 2 point at one output file, so the output of the
block's threads and child processes (a Spark JVM) is captured too. EOF on stdin ends
the worker, stopping a SparkSession a block left active.
"""

from __future__ import annotations

import json
import linecache
import os
import sys
import tempfile
import traceback
from typing import Any


def _run(code: str, name: str, namespace: dict[str, Any]) -> bool:
    # Tracebacks then quote the block's own lines.
    linecache.cache[name] = (len(code), None, code.splitlines(True), name)
    try:
        exec(compile(code, name, "exec"), namespace)
        return True
    except BaseException:  # the block's failure, whatever it is, is the answer
        traceback.print_exc()
        return False
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def _stop_spark() -> None:
    if "pyspark" in sys.modules:
        from pyspark.sql import SparkSession

        session = SparkSession.getActiveSession()
        if session is not None:
            session.stop()


def main() -> None:
    answers = os.fdopen(os.dup(1), "w")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "output")
        # O_APPEND: what a block's threads write later lands at the end, never over what
        # the reader's handle (its own file offset) has yet to read.
        sink = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        os.dup2(sink, 1)
        os.dup2(sink, 2)
        namespace: dict[str, Any] = {"__name__": "__main__"}
        with open(path, "rb") as out:
            for request in sys.stdin:
                block = json.loads(request)
                ok = _run(block["code"], block["name"], namespace)
                output = out.read().decode(errors="replace")
                answers.write(json.dumps({"ok": ok, "output": output}) + "\n")
                answers.flush()
        _stop_spark()


if __name__ == "__main__":
    main()
