"""Runs one document's examples in order against the suite's servers: python blocks in
one worker process (tests/docs_python_worker.py) that keeps their namespace, sh blocks
with bash at the repository root, servers in the background until the document ends."""

from __future__ import annotations

import json
import os
import re
import selectors
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import IO

from llog.local_ports import free_port
from tests.docs_blocks import REPO, Block

WORKER = Path(__file__).resolve().parent / "docs_python_worker.py"

#: Around every sh block: like lines pasted into a shell, every command runs, and the
#: block fails if any failed; ``curl`` fails on an HTTP error status, as a reader would.
SH_PRELUDE = (
    "set -o pipefail\nfailed=0\ntrap 'failed=$?' ERR\n"
    'curl() { command curl --silent --show-error --fail-with-body "$@"; }\n'
)
SH_EPILOGUE = '\nexit "$failed"\n'

#: The port the documents' examples use for a broker; each document gets a free one instead.
DOC_PORT = re.compile(r"(?<=localhost:)8080\b|(?<=--port )8080\b")
#: ... and for its Kafka listener.
DOC_KAFKA_PORT = re.compile(r"(?<=localhost:)9092\b|(?<=--kafka-port )9092\b")


class BlockFailed(AssertionError):
    """A block exited non-zero, raised, or did not finish in time; carries its output."""

    def __init__(self, block: Block, why: str, output: str) -> None:
        super().__init__(f"{block.test_id}: {why}\n--- block ---\n{block.code}--- output ---\n{output}")


class _Server:
    """A background process started from a block, in a process group of its own."""

    def __init__(self, command: str, env: dict[str, str], log_path: Path) -> None:
        self.log_path = log_path
        with log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                ["bash", "-c", command], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_healthy(self, url: str, timeout: float) -> str | None:
        """``None`` once ``url`` answers 200, else why not."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return f"the server exited with {self.proc.returncode} before {url} answered"
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    if resp.status == 200:
                        return None
            except OSError:
                pass
            time.sleep(0.1)
        return f"{url} did not answer 200 within {timeout:.0f} s"

    def stop(self, timeout: float = 60.0) -> int | None:
        """SIGTERM to the server's group; its exit code (``None`` if it had to be killed)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
                return None
        return self.proc.returncode


class DocumentRun:
    """The state one document's blocks share: environment (its own key root), a python
    worker, a port for its broker, the servers its blocks started, a scratch directory."""

    def __init__(self, doc: str, env: dict[str, str], workdir: Path) -> None:
        self.doc = doc
        self.env = env
        self.workdir = workdir
        self.port = free_port()
        self.kafka_port = free_port()
        self.worker: subprocess.Popen[str] | None = None
        self.servers: list[_Server] = []

    # -- python ---------------------------------------------------------------------
    def run_python(self, block: Block, timeout: float) -> str:
        """Run ``block`` in the document's namespace; what it printed."""
        worker = self._worker()
        assert worker.stdin is not None and worker.stdout is not None
        worker.stdin.write(json.dumps({"name": block.test_id, "code": self._localize(block.code)}) + "\n")
        worker.stdin.flush()
        line = _readline(worker.stdout, timeout)
        if line is None:
            self._stop_worker()
            raise BlockFailed(block, f"no answer within {timeout:.0f} s (worker stopped)", "")
        if not line:
            self.worker = None
            raise BlockFailed(block, f"the python worker died (exit {worker.wait()})", "")
        answer = json.loads(line)
        if not answer["ok"]:
            raise BlockFailed(block, "the block raised", answer["output"])
        output: str = answer["output"]
        return output

    def _worker(self) -> subprocess.Popen[str]:
        if self.worker is None:
            self.worker = subprocess.Popen(
                [sys.executable, str(WORKER)], cwd=self.workdir, env=self.env,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            )
        return self.worker

    def _stop_worker(self) -> None:
        worker, self.worker = self.worker, None
        if worker is None:
            return
        assert worker.stdin is not None
        worker.stdin.close()  # EOF: the worker stops Spark and exits
        try:
            worker.wait(120)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()

    # -- sh ---------------------------------------------------------------------------
    def run_sh(self, block: Block, timeout: float) -> None:
        proc = subprocess.Popen(
            ["bash", "-c", SH_PRELUDE + self._localize(block.code) + SH_EPILOGUE], cwd=REPO, env=self.env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )
        try:
            output, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            output, _ = proc.communicate()
            raise BlockFailed(block, f"did not finish within {timeout:.0f} s", output) from None
        if proc.returncode != 0:
            raise BlockFailed(block, f"exit status {proc.returncode}", output)

    def start_server(self, block: Block, timeout: float = 60.0) -> None:
        """Start the block in the background; it must answer ``/health`` on our port."""
        server = _Server(self._localize(block.code), self.env, self.workdir / f"server-{block.line}.log")
        self.servers.append(server)
        why = server.wait_healthy(f"http://127.0.0.1:{self.port}/health", timeout)
        if why:
            raise BlockFailed(block, why, server.log())

    def ensure_broker(self, block: Block) -> None:
        """A broker on our port for a block that talks to one, unless one is up."""
        if not any(s.proc.poll() is None for s in self.servers):
            self.start_server(Block(block.path, block.line, "sh",
                                    f"llog broker --port {self.port} --kafka-port {self.kafka_port}\n"))

    def _localize(self, code: str) -> str:
        return DOC_KAFKA_PORT.sub(str(self.kafka_port), DOC_PORT.sub(str(self.port), code))

    def close(self) -> list[str]:
        """Stop the worker and every server; what went wrong stopping them."""
        self._stop_worker()
        problems = []
        for server in self.servers:
            code = server.stop()
            if code != 0:
                problems.append(f"{self.doc}: a server exited with {code} on SIGTERM:\n{server.log()}")
        self.servers = []
        return problems


def _readline(stream: IO[str], timeout: float) -> str | None:
    """One line from a pipe, or ``None`` after ``timeout`` seconds."""
    with selectors.DefaultSelector() as sel:
        sel.register(stream, selectors.EVENT_READ)
        if not sel.select(timeout):
            return None
    return stream.readline()
