"""One build at a time: the pytest-xdist workers share ``.cache/`` (the Java client and
Spark's Kafka jars, franz-go's and sarama's programs, kafkajs); the first worker to need
a client builds it under an exclusive lock while the others wait, and then find it
built. A build replaces what it made in one rename, so a client another worker is
running is never half-written."""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

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
