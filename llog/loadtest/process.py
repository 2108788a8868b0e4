"""A cluster member run as a local child process (a broker or the compactor) that can
be killed with -9 and started again on the same port."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

from llog.devstack import DevStackError


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

    def wait_healthy(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise DevStackError(f"{self.name} exited; see {self.log_path}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
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

    def describe(self) -> dict[str, Any]:
        return {"pid": self.pid, "port": self.port, "url": self.url, "argv": self.argv,
                "log": str(self.log_path), "starts": self.starts}
