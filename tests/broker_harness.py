"""A broker child process (``python -m llog broker``, forked: tests/forked_llog.py), a
tiny JSON-over-HTTP client, and the fixtures the broker test modules import: ``conn``
(with topic ``t`` of 4 partitions) and ``broker`` (one broker process on it), and their module-wide
counterparts ``shared_conn`` and ``shared_broker`` for tests whose requests must change
nothing (a broker started once per module and worker count, not once per case)."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import select
import signal
import ssl
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from llog.config import LlogConfig
from llog.connection import Connection
from llog.topic.admin import Topics
from tests import forked_llog
from tests.conftest import Servers, config_env, new_root_prefix, suite_config
from tests.forked_llog import ForkedProcess


class BrokerProcess:
    def __init__(self, proc: subprocess.Popen[str] | ForkedProcess, url: str) -> None:
        self.proc = proc
        self.url = url
        self.killed = False
        #: Sent with every request (credentials, for a broker that asks for them).
        self.headers: dict[str, str] = {}
        #: How an ``https://`` broker's certificate is checked (set it to trust the test's).
        self.tls: ssl.SSLContext | None = None
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80

    def request(
        self, method: str, path: str, body: Any = None, *, raw: bytes | None = None,
        headers: dict[str, str] | None = None, timeout: float = 120.0,
    ) -> tuple[int, Any]:
        """``(status, decoded JSON body or text)``; ``raw`` sends bytes as they are."""
        status, _headers, decoded = self.exchange(method, path, body, raw=raw, headers=headers, timeout=timeout)
        return status, decoded

    def exchange(
        self, method: str, path: str, body: Any = None, *, raw: bytes | None = None,
        headers: dict[str, str] | None = None, timeout: float = 120.0,
    ) -> tuple[int, dict[str, str], Any]:
        """:meth:`request` with the response headers (names in lower case) too."""
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        conn = (http.client.HTTPSConnection(self.host, self.port, timeout=timeout, context=self.tls)
                if self.url.startswith("https://") else http.client.HTTPConnection(self.host, self.port,
                                                                                   timeout=timeout))
        try:
            conn.request(method, path, body=data,
                         headers={"content-type": "application/json", **self.headers, **(headers or {})})
            resp = conn.getresponse()
            text = resp.read().decode()
        finally:
            conn.close()
        got = {k.lower(): v for k, v in resp.getheaders()}
        try:
            return resp.status, got, json.loads(text)
        except ValueError:
            return resp.status, got, text

    def kill(self) -> None:
        """SIGKILL: the broker gets no chance to clean up."""
        self.proc.kill()
        self.proc.wait()
        self.killed = True

    def post(self, path: str, body: Any, **kw: Any) -> tuple[int, Any]:
        return self.request("POST", path, body, **kw)

    def prometheus(self, name: str, **labels: str) -> float | None:
        """The sum of ``name``'s samples in ``/metrics/prometheus`` whose labels include
        ``labels`` (a broker of workers labels each worker's); ``None``: no such sample."""
        from prometheus_client.parser import text_string_to_metric_families

        status, text = self.request("GET", "/metrics/prometheus")
        assert status == 200
        found = [s.value for f in text_string_to_metric_families(text) for s in f.samples
                 if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
        return sum(found) if found else None

    def metric(self, name: str, **labels: str) -> float:
        """The sum of ``name``'s samples whose labels include ``labels``."""
        status, snap = self.request("GET", "/metrics")
        assert status == 200
        return sum(float(s["value"]) for s in snap.get(name, [])
                   if all(s["labels"].get(k) == v for k, v in labels.items()))


class PeakRss:
    """A process's resident memory: its peak since :meth:`reset`, over what it held
    then (Linux ``/proc``: writing 5 to ``clear_refs`` restarts the peak)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.baseline = 0

    def _status(self, field: str) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
        raise AssertionError(f"/proc/{self.pid}/status has no {field}")

    def reset(self) -> None:
        Path(f"/proc/{self.pid}/clear_refs").write_text("5")
        self.baseline = self._status("VmRSS")

    def growth(self) -> int:
        """Bytes the peak rose over the baseline."""
        return self._status("VmHWM") - self.baseline


#: A broker starts in about a second; on the suite's starved two cores, in under 30.
START_S = 120.0


def children(pid: int) -> list[int]:
    """The pids of process ``pid``'s children (a broker's workers)."""
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _abort_with_stacks(pid: int) -> None:
    """SIGABRT to a broker that hangs and to its workers (PYTHONFAULTHANDLER: each
    prints its threads' stacks to the test's stderr), workers first."""
    with contextlib.suppress(OSError):
        for child in children(pid):
            with contextlib.suppress(OSError):
                os.kill(child, signal.SIGABRT)
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGABRT)


@contextmanager
def broker_process(cfg: LlogConfig, *args: str, **env: str) -> Iterator[BrokerProcess]:
    """Start a broker on a free port; stop it with SIGTERM and require a clean exit
    (unless the test killed it)."""
    # PYTHONFAULTHANDLER: a broker that will not stop is sent SIGABRT, which then
    # prints every thread's stack to the test's captured stderr.
    full_env = {**config_env(cfg), "PYTHONFAULTHANDLER": "1", **env}
    argv = ["--port", "0", *args]
    proc: subprocess.Popen[str] | ForkedProcess = (
        forked_llog.popen(["broker", *argv], full_env) if forked_llog.forkable(full_env) else
        subprocess.Popen([sys.executable, "-m", "llog", "broker", *argv], env=full_env, stdout=subprocess.PIPE,
                         text=True))
    try:
        assert proc.stdout is not None
        if not select.select([proc.stdout], [], [], START_S)[0]:
            _abort_with_stacks(proc.pid)
            raise AssertionError(f"the broker did not start within {START_S:.0f} s (its stacks on stderr)")
        line = proc.stdout.readline()
        assert "listening on " in line, f"broker did not start: {line!r}"
        broker = BrokerProcess(proc, line.rsplit(" ", 1)[1].strip())
        yield broker
        if not broker.killed:
            proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGABRT)
                proc.wait()
                raise AssertionError("the broker did not stop within 60 s of SIGTERM (stacks on stderr)") from None
            assert code == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# Registered under the names the tests ask for ("conn" overrides conftest's), and
# defined under others so importing them does not shadow those parameter names.
@pytest.fixture(name="conn")
def conn_with_topic_t(config: LlogConfig) -> Iterator[Connection]:
    with Connection(config) as c:
        Topics(c).create("t", 4)
        yield c


@pytest.fixture(name="broker", params=[1, 2], ids=["1-worker", "2-workers"])
def broker_on_topic_t(config: LlogConfig, conn: Connection, request: pytest.FixtureRequest) -> Iterator[BrokerProcess]:
    """One broker on topic ``t``: a single process, and (a second run of each test) a
    broker of two worker processes sharing its port (``llog broker --workers 2``)."""
    with workers_broker(config, request.param) as b:
        yield b


@contextmanager
def workers_broker(cfg: LlogConfig, workers: int) -> Iterator[BrokerProcess]:
    """``llog broker --workers N`` once its workers are up."""
    with broker_process(cfg, "--workers", str(workers)) as b:
        if workers > 1:
            assert b.proc.stdout is not None and "worker processes" in b.proc.stdout.readline()
        yield b


@pytest.fixture(name="shared_conn", scope="module")
def shared_conn_with_topic_t(servers: Servers) -> Iterator[Connection]:
    """``conn`` for a whole module: a root prefix of its own with topic ``t``."""
    with Connection(suite_config(servers, new_root_prefix())) as c:
        Topics(c).create("t", 4)
        yield c


@pytest.fixture(name="shared_broker", scope="module", params=[1, 2], ids=["1-worker", "2-workers"])
def shared_broker_on_topic_t(shared_conn: Connection, request: pytest.FixtureRequest) -> Iterator[BrokerProcess]:
    """``broker`` for a whole module, on ``shared_conn``: for the cases of a test that
    sends what must be refused and change nothing, each case checking that nothing
    changed since the module began (so a case that wrongly wrote fails the ones after it
    too)."""
    with workers_broker(shared_conn.config, request.param) as b:
        yield b
