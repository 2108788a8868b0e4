"""Bounded per-partition state for long-lived clients: a cache that forgets its least
recently written entries, and per-partition locks that are dropped only while unused.

A writer that appends to many partitions over its life would otherwise keep a cached
control state, producer state and lock for every partition it ever touched.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Iterator
from contextlib import contextmanager
from itertools import islice
from typing import TypeVar

_K = TypeVar("_K", bound=Hashable)
_V = TypeVar("_V")


class BoundedCache(OrderedDict[_K, _V]):
    """A dict of at most ``capacity`` entries; writing an entry makes it the newest,
    and writing past the capacity drops the oldest. Reads are plain dict reads (no
    lock, no reordering): for a writer's caches every use ends in a write anyway.
    Thread-safe for concurrent writes and pops."""

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity
        self._lock = threading.Lock()

    def __setitem__(self, key: _K, value: _V) -> None:
        with self._lock:
            super().__setitem__(key, value)
            self.move_to_end(key)
            while len(self) > self.capacity:
                self.popitem(last=False)

    def __delitem__(self, key: _K) -> None:
        with self._lock:
            super().__delitem__(key)

    def pop(self, key: _K, *default: _V | None) -> _V | None:  # type: ignore[override]
        with self._lock:
            return super().pop(key, *default)


class _Entry:
    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        #: Threads holding or waiting for the lock: the entry is dropped only at 0.
        self.users = 0


class PartitionLocks:
    """One lock per key, at most about ``capacity`` kept: an unused lock may be
    dropped, a held or awaited one never is, so two threads never hold different
    locks for one partition."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._mutex = threading.Lock()
        self._entries: OrderedDict[Hashable, _Entry] = OrderedDict()

    @contextmanager
    def hold(self, keys: Iterable[Hashable]) -> Iterator[None]:
        """Hold the locks of ``keys``, taken in the order given (callers sort them, so
        threads taking several never deadlock)."""
        with self._mutex:
            entries = []
            for k in keys:
                e = self._entries.get(k)
                if e is None:
                    e = self._entries[k] = _Entry()
                self._entries.move_to_end(k)
                e.users += 1
                entries.append(e)
        taken = 0
        try:
            for e in entries:
                e.lock.acquire()
                taken += 1
            yield
        finally:
            for e in entries[:taken]:
                e.lock.release()
            with self._mutex:
                for e in entries:
                    e.users -= 1
                self._trim()

    def __len__(self) -> int:
        return len(self._entries)

    def _trim(self) -> None:
        excess = len(self._entries) - self.capacity
        if excess <= 0:
            return
        # Oldest first, stopping at the first ``excess`` unused ones.
        idle = list(islice((k for k, e in self._entries.items() if e.users == 0), excess))
        for k in idle:
            del self._entries[k]
