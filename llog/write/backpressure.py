"""Back-pressure on partitions compaction has fallen behind on (protocol/README.md,
"Back-pressure").

Every append adds an index key; compaction folds them below the partition's
``meta/compaction-cursor``. With the compactor down they would pile up without bound
in etcd, so a writer refuses appends to a partition whose index keys at or above the
cursor number ``LLOG_MAX_UNCOMPACTED_KEYS`` or more, with
:class:`~llog.errors.TooManyUncompactedKeys` (a retriable
:class:`~llog.errors.BackPressure`), before anything is PUT.

The check stays off the hot path's etcd budget: a partition's count is refreshed at
most every ``LLOG_BACKPRESSURE_CHECK_S``, the partitions of one call that are due
together in one etcd request (each one's cursor and count, at one revision); in
between the writer adds the appends it admitted itself. Other writers' appends show up
at the next refresh, so with ``W`` writers a partition can overshoot the bound by what
they append in one check interval.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from llog.connection import Connection
from llog.errors import TooManyUncompactedKeys
from llog.names import TopicPartition
from llog.state.control import decode_cursor

log = logging.getLogger(__name__)

#: Partitions whose counts one writer keeps; the least recently refreshed go first.
MAX_TRACKED_PARTITIONS = 4096


@dataclass
class _Count:
    #: The compaction cursor the count starts at (None: never compacted).
    cursor: int | None
    #: Uncompacted index keys at the last refresh, plus the appends admitted since.
    keys: int
    #: ``clock()`` at the last refresh.
    at: float


class UncompactedKeysGate:
    """Admits or refuses appends by their partitions' uncompacted index keys.
    Thread-safe."""

    def __init__(self, conn: Connection, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.conn = conn
        self.bound = conn.config.max_uncompacted_keys
        self.every_s = conn.config.backpressure_check_s
        self._clock = clock
        self._counts: dict[TopicPartition, _Count] = {}
        self._lock = threading.Lock()

    def admit(self, partitions: Iterable[TopicPartition]) -> None:
        """Count one append (one future index key) for each entry of ``partitions``,
        or raise :class:`TooManyUncompactedKeys` for the first partition at its bound
        and count none."""
        if self.bound <= 0:
            return
        wanted = list(partitions)
        now = self._clock()
        with self._lock:
            known = {tp: self._counts.get(tp) for tp in dict.fromkeys(wanted)}
        due = [tp for tp, c in known.items() if c is None or now - c.at >= self.every_s]
        if due:
            known.update(self._refresh(due, known, now))
        for tp, c in known.items():
            assert c is not None
            if c.keys >= self.bound:
                raise TooManyUncompactedKeys(tp[0], tp[1], c.keys, self.bound)
        with self._lock:
            for tp in wanted:
                got = self._counts.get(tp)
                if got is not None:
                    got.keys += 1

    def _refresh(
        self, due: list[TopicPartition], known: dict[TopicPartition, _Count | None], now: float
    ) -> dict[TopicPartition, _Count]:
        """Recount ``due`` partitions: one request for all of them, counting from the
        cursor each had last time, and one more per partition whose cursor moved."""
        keys, etcd = self.conn.keys, self.conn.etcd
        starts = {tp: c.cursor if (c := known[tp]) is not None else None for tp in due}
        got = etcd.get_and_count([
            (keys.compaction_cursor(t, p), keys.index(t, p, starts[(t, p)] or 0), keys.index_range_end(t, p))
            for t, p in due
        ])
        fresh: dict[TopicPartition, _Count] = {}
        for (t, p), (kv, n) in zip(due, got, strict=True):
            cursor = decode_cursor(kv.key, kv.value) if kv is not None else None
            if cursor != starts[(t, p)]:  # compaction moved the cursor: count from where it is now
                n = etcd.count(keys.index(t, p, cursor or 0), keys.index_range_end(t, p))
            fresh[(t, p)] = _Count(cursor, n, now)
            old = known[(t, p)]
            if n >= self.bound and (old is None or old.keys < self.bound):
                log.warning("%s/%s has %d uncompacted index keys (bound %d): refusing appends",
                            t, p, n, self.bound)
        with self._lock:
            for tp, c in fresh.items():
                self._counts.pop(tp, None)
                self._counts[tp] = c
            while len(self._counts) > MAX_TRACKED_PARTITIONS:
                del self._counts[next(iter(self._counts))]
        return fresh
