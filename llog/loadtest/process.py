"""A cluster member run as a local child process (a broker or the compactor) that can
be killed with -9 and started again on the same port."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llog.devstack import DevStackError

#: What :func:`release_env` sets.
RELEASE_VARIABLES = ("PYTHONPATH", "PYTHONSAFEPATH")


def release_env(pythonpath: str) -> dict[str, str]:
    """The variables that make ``python -m llog`` import the packages first on
    ``pythonpath``: ``-m`` would put the working directory (this tree, when run from
    it) before them, unless told not to (``PYTHONSAFEPATH``)."""
    return {"PYTHONPATH": pythonpath, "PYTHONSAFEPATH": "1"}


class ManagedProcess:
    def __init__(self, name: str, argv: list[str], env: dict[str, str], port: int, log_path: Path,
                 host: str = "127.0.0.1") -> None:
        self.name = name
        self.argv = argv
        self.env = env
        self.port = port
        self.log_path = log_path
        self.url = f"http://{host}:{port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        #: The release it was started on (RELEASES.md), ``""`` for this tree.
        self.release = ""
        #: The version its ``/health`` named when it last became healthy (``""``: none).
        self.version = ""

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> ManagedProcess:
        with open(self.log_path, "ab") as out:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(
                self.argv, env=self.env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C in the terminal reaches the orchestrator only
            )
        self.starts += 1
        return self

    def wait_healthy(self, timeout: float = 60.0) -> dict[str, Any]:
        """Wait until ``GET /health`` answers 200; returns what it said."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise DevStackError(f"{self.name} exited; see {self.log_path}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as r:
                    if r.status == 200:
                        doc: dict[str, Any] = json.load(r)
                        self.version = str(doc.get("version", ""))
                        return doc
            except (OSError, ValueError):
                pass
            time.sleep(0.1)
        raise DevStackError(f"{self.name} not healthy after {timeout}s; see {self.log_path}")

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout``; returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def replace(self, release: str, pythonpath: str | None) -> dict[str, Any]:
        """Stop it (SIGTERM: a clean stop) and start it again on the same port running
        ``release``, whose packages are first on ``pythonpath`` (``None``: this tree's);
        returns the seconds the stop and the start took and the version its ``/health``
        names once it answers (``None``: none)."""
        def switch() -> None:
            self.env = {k: v for k, v in self.env.items() if k not in RELEASE_VARIABLES}
            if pythonpath:
                self.env.update(release_env(pythonpath))
            self.release = release

        return self._stop_start(switch)

    def restart(self) -> dict[str, Any]:
        """Stop it (SIGTERM: a clean stop) and start it again on the same port, release
        and settings; returns what :meth:`replace` does."""
        return self._stop_start(lambda: None)

    def _stop_start(self, between: Callable[[], None]) -> dict[str, Any]:
        t0 = time.monotonic()
        self.stop()
        t1 = time.monotonic()
        between()
        self.start()
        self.wait_healthy()
        return {"stop_s": round(t1 - t0, 3), "start_s": round(time.monotonic() - t1, 3),
                "version_after": self.version or None}

    def describe(self) -> dict[str, Any]:
        return {"pid": self.pid, "port": self.port, "url": self.url, "argv": self.argv,
                "log": str(self.log_path), "starts": self.starts, "release": self.release or None,
                "version": self.version or None}
