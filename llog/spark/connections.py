"""One :class:`Connection` per config in each Spark worker process.

Spark reuses its Python workers across tasks; opening etcd and S3 clients costs about
0.1 s, so tasks of one worker share them. Clients are created inside the task (never
pickled) and keyed by process id too, so a forked child never touches a parent's gRPC
channel. Everything is closed when the worker exits.
"""

from __future__ import annotations

import atexit
import os
import threading
from typing import Any

from llog.config import LlogConfig
from llog.connection import Connection
from llog.spark.options import config_from_dict

_lock = threading.Lock()
_open: dict[tuple[int, LlogConfig], Connection] = {}


def worker_connection(config: dict[str, Any]) -> Connection:
    """The worker's shared connection for ``config`` (a :func:`config_to_dict` dict)."""
    cfg = config_from_dict(config)
    key = (os.getpid(), cfg)
    with _lock:
        conn = _open.get(key)
        if conn is None:
            conn = Connection(cfg)
            _open[key] = conn
        return conn


def close_all() -> None:
    """Close this process's cached connections (registered with :mod:`atexit`)."""
    with _lock:
        mine = [k for k in _open if k[0] == os.getpid()]
        conns = [_open.pop(k) for k in mine]
    for c in conns:
        c.close()


atexit.register(close_all)
