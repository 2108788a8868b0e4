"""A broker of several processes (``llog broker --workers N``): this parent binds the
ports, forks N workers (``llog/broker/worker.py``) that serve them, restarts one that
dies, and stops them all on SIGINT/SIGTERM. The parent stays single-threaded and
connects to nothing (it reads the cluster's format from a child of its own), so a fork
of it is safe, and a worker starts with the broker's
modules imported already (a quarter of an exec'd worker's start-up CPU) and S3's
models parsed (half of what is left).

One Python process is one core: a broker of N workers uses N. The workers share the
HTTP port (the kernel hands each connection to one of them, all accepting on one
socket), and each also listens on a private port of its own, the address its peers'
readers ask it for blob bytes at (``peer_url``) and its siblings collect its metrics
from. Each worker is a whole broker with its own producer, caches and etcd connection,
so an HTTP client's requests are served by whichever worker took its connection: they
share nothing but storage and etcd, as brokers on separate hosts do. Kafka clients keep
state per broker (group coordinators, producer ids per connection), so each worker is
its own Kafka node: worker i listens on ``kafka_port + i`` (or any free port when
``kafka_port`` is 0) and registers under its own node id; Metadata lists every worker.

What a host's workers share: the PUT budget, split evenly, and ``tail_cache_dir`` when
it is set (a tmpfs: a consumer served by one worker then reads another's fresh appends
from files rather than by a peer read; it costs a file per commit, about a fifth of a
worker's single-record produce throughput, so it is not made by default).

The workers die with this process however it ends: each asks the kernel for SIGKILL
when its parent exits (``PR_SET_PDEATHSIG``), so ``kill -9`` of the broker leaves no
worker serving, as it leaves no single-process broker serving."""

from __future__ import annotations

import logging
import os
import pickle
import secrets
import select
import signal
import socket
import threading
import time
import uuid
from dataclasses import replace
from types import FrameType
from urllib.parse import urlsplit

from llog.broker.sockets import OnReady, listening_socket, zone_sockets
from llog.broker.state import WorkerPlace, listen_url, peer_url_of, url_host
from llog.broker.worker import WorkerProcess, WorkerSpec, fork_worker
from llog.config import LlogConfig
from llog.errors import LlogError
from llog.state.cluster_format import check_at_start

log = logging.getLogger(__name__)

#: A worker that dies within this long of its start is restarted only after it.
RESTART_BACKOFF_S = 1.0


def worker_configs(config: LlogConfig, private_urls: list[str]) -> list[LlogConfig]:
    """Each worker's settings: its share of the PUT budget, and its own peer URL (the
    private port, on the host of a configured ``peer_url`` if there is one)."""
    n = config.broker_workers
    out = []
    for url in private_urls:
        peer_url = url
        if config.peer_url is not None:
            configured = urlsplit(config.peer_url)
            peer_url = f"{configured.scheme}://{url_host(configured.hostname or '')}:{urlsplit(url).port}"
        out.append(replace(
            config, peer_url=peer_url,
            broker_put_rate=config.broker_put_rate / n, broker_put_burst=max(1, config.broker_put_burst // n),
        ))
    return out


def check_format(config: LlogConfig) -> None:
    """:func:`check_at_start` for this parent, run in a short-lived child of it: gRPC
    keeps threads and state in a process after its channel is closed, and a worker
    forked from such a process can hang in its first etcd call (1 fork in 100 on the
    development machine), so the parent never opens a channel. The child's error is
    raised here, as the check's own (or as an :class:`LlogError` with its message)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: check, say what failed, and exit without unwinding the parent's stack
        status = 1
        try:
            os.close(r)
            check_at_start(config)
            status = 0
        except Exception as exc:
            try:
                told = pickle.dumps(exc)
                pickle.loads(told)  # an error whose type cannot be rebuilt goes by its message
            except Exception:
                told = pickle.dumps(LlogError(str(exc)))
            os.write(w, told)
        finally:
            os._exit(status)
    os.close(w)
    with os.fdopen(r, "rb") as pipe:
        told = pipe.read()
    _, status = os.waitpid(pid, 0)
    if told:
        raise pickle.loads(told)
    if status:
        raise LlogError(f"the cluster's format could not be checked (its process ended with status {status})")


class _Worker:
    def __init__(self, spec: WorkerSpec, others: tuple[int, ...]) -> None:
        self.spec = spec
        self.others = others  # the parent's descriptors that are its siblings'
        self.proc: WorkerProcess | None = None
        self.started = 0.0

    def start(self, ready_fd: int) -> None:
        self.started = time.monotonic()
        self.proc = fork_worker(replace(self.spec, ready_fd=ready_fd), self.others)


def serve_workers(config: LlogConfig, *, host: str, port: int, on_ready: OnReady | None = None) -> int:
    """Serve with ``config.broker_workers`` processes until SIGINT/SIGTERM; returns 0
    when every worker stopped cleanly, else 1."""
    n = config.broker_workers
    check_format(config)  # once, before forking: not once per worker
    sockets = [listening_socket(host, port, "broker")]
    try:
        privates = [listening_socket(host, 0, f"broker worker {i}") for i in range(n)]
        sockets += privates
        kafkas = []
        zones: list[dict[str, socket.socket]] = [{} for _ in range(n)]
        if config.kafka_port is not None:
            from llog.kafka.listener import tls_context  # llog.kafka builds on llog.broker

            tls_context(config)  # a bad certificate is one error here, not one per worker
            for i in range(n):
                kport = config.kafka_port + i if config.kafka_port else 0
                kafkas.append(listening_socket(config.kafka_host or host, kport, f"Kafka listener of worker {i}"))
                sockets.append(kafkas[-1])
                zones[i] = zone_sockets(config, host, i)
                sockets += zones[i].values()
        tls = config.broker_tls_cert_file is not None
        private_urls = [peer_url_of(*s.getsockname()[:2], tls=tls) for s in privates]
        place_urls = tuple(listen_url(*s.getsockname()[:2], tls=tls) for s in privates)
        broker_id, secret = uuid.uuid4().hex[:16], secrets.token_urlsafe(24)
        configs = worker_configs(config, private_urls)
        if config.object_store.startswith("s3://"):
            from llog.store.s3 import warm_data_loader

            warm_data_loader()  # parsed once here, not once per worker (nor again at each restart)
        workers = []
        for i in range(n):
            own = {s.fileno() for s in (sockets[0], privates[i], *(kafkas[i:i + 1]), *zones[i].values())}
            workers.append(_Worker(
                WorkerSpec(configs[i], WorkerPlace(i, place_urls, broker_id, secret), os.getpid(), sockets[0].fileno(),
                           privates[i].fileno(), kafkas[i].fileno() if kafkas else None, -1,
                           logging.getLogger().getEffectiveLevel(),
                           tuple((z, s.fileno()) for z, s in zones[i].items())),
                tuple(s.fileno() for s in sockets if s.fileno() not in own),
            ))
        return _Supervisor(workers).run(listen_url(*sockets[0].getsockname()[:2], tls=tls), on_ready)
    finally:
        for s in sockets:
            s.close()


class _Supervisor:
    def __init__(self, workers: list[_Worker]) -> None:
        self.workers = workers
        self.stopping = threading.Event()

    def run(self, url: str, on_ready: OnReady | None) -> int:
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            kafka_port = self._start_all()
            if kafka_port is False:
                return 1
            if on_ready is not None and not self.stopping.is_set():
                on_ready(url, kafka_port)
            return self._supervise()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            for w in self.workers:  # only after a failure are any left
                if w.proc is not None and w.proc.poll() is None:
                    w.proc.kill()
                    w.proc.wait()

    def _on_signal(self, sig: int, _frame: FrameType | None) -> None:
        self.stopping.set()
        for w in self.workers:
            if w.proc is not None and w.proc.poll() is None:
                w.proc.send_signal(sig)

    def _start_all(self) -> int | bool | None:
        """Start every worker and wait until each serves: worker 0's Kafka port, or
        ``False`` when one failed to start (its error is on stderr)."""
        pipes: dict[int, int] = {}
        for i, w in enumerate(self.workers):
            r, wfd = os.pipe()
            try:
                w.start(wfd)
            finally:
                os.close(wfd)
            pipes[r] = i
        ports: dict[int, int | None] = {}
        buffers: dict[int, bytes] = {}
        try:
            while pipes:
                ready, _, _ = select.select(list(pipes), [], [])
                for r in ready:
                    chunk = os.read(r, 64)
                    if chunk:
                        buffers[r] = buffers.get(r, b"") + chunk
                        continue
                    i = pipes.pop(r)
                    os.close(r)
                    words = buffers.get(r, b"").split()
                    if words[:1] != [b"ready"]:
                        self._stop_all()
                        proc = self.workers[i].proc
                        code = None if proc is None else proc.wait()
                        if not self.stopping.is_set():
                            log.error("broker worker %d did not start (exit status %s)", i, code)
                        return False
                    ports[i] = int(words[1]) if len(words) > 1 else None
        finally:
            for r in pipes:
                os.close(r)
        return ports.get(0)

    def _supervise(self) -> int:
        while not self.stopping.wait(0.2):
            for i, w in enumerate(self.workers):
                assert w.proc is not None
                code = w.proc.poll()
                if code is None or self.stopping.is_set():
                    continue
                log.error("broker worker %d (pid %d) exited with status %d; starting it again", i, w.proc.pid, code)
                if time.monotonic() - w.started < RESTART_BACKOFF_S and self.stopping.wait(RESTART_BACKOFF_S):
                    break
                w.start(-1)
                if self.stopping.is_set():  # the signal came while it started: it did not get it
                    assert w.proc is not None
                    w.proc.send_signal(signal.SIGTERM)
        return self._stop_all()

    def _stop_all(self) -> int:
        """Stop every worker (SIGTERM unless a signal was passed on already) and wait."""
        status = 0
        for w in self.workers:
            if w.proc is not None and w.proc.poll() is None and not self.stopping.is_set():
                w.proc.send_signal(signal.SIGTERM)
        for i, w in enumerate(self.workers):
            if w.proc is None:
                continue
            code = w.proc.wait()
            if code != 0:
                log.error("broker worker %d exited with status %d", i, code)
                status = 1
        return status

