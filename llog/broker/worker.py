"""One worker process of a multi-process broker, forked by ``llog/broker/workers.py``
from the broker's parent process (single-threaded, with the broker's modules imported
already, so a worker starts without importing them again): it serves the sockets its
:class:`WorkerSpec` names until SIGINT/SIGTERM."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import socket
import sys
import traceback
from collections.abc import Iterable
from dataclasses import dataclass

from llog.broker.server import serve_sockets
from llog.broker.state import WorkerPlace
from llog.config import LlogConfig
from llog.gc_tuning import tune_gc

_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker process serves."""

    config: LlogConfig
    place: WorkerPlace
    parent_pid: int
    http_fd: int
    private_fd: int
    kafka_fd: int | None
    #: Where the worker writes ``ready <kafka port>`` once it serves (-1: nobody waits).
    ready_fd: int
    #: The parent's logging level (``llog -v``).
    log_level: int = logging.WARNING
    #: The Kafka listeners for the clients of each zone: (zone, fd).
    kafka_zone_fds: tuple[tuple[str, int], ...] = ()


class WorkerProcess:
    """A forked worker, as its parent sees it: what the supervisor asks of a
    ``subprocess.Popen`` (poll, wait, send_signal, kill)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self) -> int:
        if self.returncode is None:
            self.returncode = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def fork_worker(spec: WorkerSpec, others: Iterable[int]) -> WorkerProcess:
    """Fork a worker serving ``spec``; ``others``: descriptors of the parent's that
    are not this worker's (its siblings' sockets), closed in the worker."""
    pid = os.fork()
    if pid:
        return WorkerProcess(pid)
    code = 1
    try:  # the worker never returns into its parent's frames
        # Its own process group: a terminal's Ctrl-C reaches the parent only, which
        # passes it on, so each worker sees each signal once.
        os.setsid()
        for sig in (signal.SIGINT, signal.SIGTERM):  # the parent's handlers are not the worker's
            signal.signal(sig, signal.SIG_DFL)
        for fd in others:
            os.close(fd)
        _serve(spec)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):  # closed or gone: nothing more to say
                stream.flush()
        os._exit(code)


def _die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when the broker's parent process ends (Linux); a parent
    already gone by now is the same."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:
        os._exit(1)


def _serve(spec: WorkerSpec) -> None:
    _die_with_parent(spec.parent_pid)
    logging.basicConfig(level=spec.log_level, force=True,
                        format=f"%(asctime)s worker {spec.place.index} %(levelname)s %(name)s: %(message)s")
    sock = socket.socket(fileno=spec.http_fd)
    private = socket.socket(fileno=spec.private_fd)
    kafka = None if spec.kafka_fd is None else socket.socket(fileno=spec.kafka_fd)

    def ready(_url: str, kafka_port: int | None) -> None:
        tune_gc(spec.config.gc_threshold)  # after start-up: its objects are frozen
        if spec.ready_fd >= 0:
            os.write(spec.ready_fd, f"ready {'' if kafka_port is None else kafka_port}\n".encode())
            os.close(spec.ready_fd)

    zones = {zone: socket.socket(fileno=fd) for zone, fd in spec.kafka_zone_fds}
    serve_sockets(spec.config, sock, kafka_sock=kafka, kafka_zone_socks=zones, private_sock=private, place=spec.place,
                  on_ready=ready)
