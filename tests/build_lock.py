"""One build at a time: the pytest-xdist workers share ``.cache/`` (the Java client and
Spark's Kafka jars, franz-go's and sarama's programs, kafkajs); the first worker to need
a client builds it under an exclusive lock while the others wait, and then find it
built. A build replaces what it made in one rename, so a client another worker is
running is never half-written. :func:`once_per_run` does the same for a fixture's
result within one pytest run."""

from __future__ import annotations

import fcntl
import os
import pickle
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import pytest

T = TypeVar("T")

LOCKS = Path(__file__).resolve().parent.parent / ".cache" / "locks"


@contextmanager
def exclusive(name: str) -> Iterator[None]:
    """Hold ``.cache/locks/{name}.lock`` (across processes) for the block."""
    LOCKS.mkdir(parents=True, exist_ok=True)
    with open(LOCKS / f"{name}.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def once_per_run(tmp_path_factory: pytest.TempPathFactory, name: str, compute: Callable[[], T]) -> T:
    """``compute()``'s result, computed by the first xdist worker of this run to ask and
    loaded (unpickled) by the others, which wait for it: a costly module fixture whose
    result is plain data then runs once, not once per worker. A compute that raises
    leaves nothing, so the next worker to ask computes (and fails) itself."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return compute()
    result = tmp_path_factory.getbasetemp().parent / f"{name}.pickle"  # the run's, shared by its workers
    with exclusive(name):
        if result.is_file():
            value: T = pickle.loads(result.read_bytes())
            return value
        value = compute()
        partial = result.with_suffix(".partial")
        partial.write_bytes(pickle.dumps(value))
        partial.rename(result)
        return value
