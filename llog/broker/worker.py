"""One worker process of a multi-process broker (``python -m llog.broker.worker``,
started by ``llog/broker/workers.py``): reads its :class:`WorkerSpec` from stdin and
serves the sockets it inherited until SIGINT/SIGTERM."""

from __future__ import annotations

import ctypes
import logging
import os
import pickle
import signal
import socket
import sys

from llog.broker.server import serve_sockets
from llog.broker.workers import WorkerSpec
from llog.gc_tuning import tune_gc

_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when the broker's parent process ends (Linux); a parent
    already gone by now is the same."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:
        os._exit(1)


def main() -> None:
    spec: WorkerSpec = pickle.load(sys.stdin.buffer)
    _die_with_parent(spec.parent_pid)
    logging.basicConfig(level=spec.log_level, format=f"%(asctime)s worker {spec.place.index} %(levelname)s "
                                                      "%(name)s: %(message)s")
    sock = socket.socket(fileno=spec.http_fd)
    private = socket.socket(fileno=spec.private_fd)
    kafka = None if spec.kafka_fd is None else socket.socket(fileno=spec.kafka_fd)

    def ready(_url: str, kafka_port: int | None) -> None:
        tune_gc(spec.config.gc_threshold)  # after start-up: its objects are frozen
        if spec.ready_fd >= 0:
            os.write(spec.ready_fd, f"ready {'' if kafka_port is None else kafka_port}\n".encode())
            os.close(spec.ready_fd)

    serve_sockets(spec.config, sock, kafka_sock=kafka, private_sock=private, place=spec.place, on_ready=ready)


if __name__ == "__main__":
    main()
