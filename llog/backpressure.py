"""Back-pressure on partitions compaction has fallen behind on (protocol/README.md,
"Back-pressure").

Every append adds an index key; compaction folds them below the partition's
``meta/compaction-cursor``. With the compactor down they would pile up without bound
in etcd, so a writer refuses appends to a partition whose index keys at or above the
cursor number ``LLOG_MAX_UNCOMPACTED_KEYS`` or more, with
:class:`~llog.errors.TooManyUncompactedKeys` (a retriable
:class:`~llog.errors.BackPressure`), before anything is PUT.

The check stays off the hot path's etcd budget: each partition's count is refreshed by
one etcd request (the cursor and the count, at one revision) at most every
``LLOG_BACKPRESSURE_CHECK_S``; in between the writer adds the appends it admitted
itself. Other writers' appends show up at the next refresh, so with ``W`` writers a
partition can overshoot the bound by what they append in one check interval.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from llog.codec.meta import CompactionCursor, MetaFormatError
from llog.connection import Connection
from llog.errors import CorruptMetadata, TooManyUncompactedKeys

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
        self._counts: dict[tuple[str, int], _Count] = {}
        self._lock = threading.Lock()

    def admit(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Count one append (one future index key) for each entry of ``partitions``,
        or raise :class:`TooManyUncompactedKeys` for the first partition at its bound
        and count none."""
        if self.bound <= 0:
            return
        wanted = list(partitions)
        now = self._clock()
        for tp in dict.fromkeys(wanted):
            with self._lock:
                c = self._counts.get(tp)
            if c is None or now - c.at >= self.every_s:
                c = self._refresh(tp, c, now)
            if c.keys >= self.bound:
                raise TooManyUncompactedKeys(tp[0], tp[1], c.keys, self.bound)
        with self._lock:
            for tp in wanted:
                got = self._counts.get(tp)
                if got is not None:
                    got.keys += 1

    def _refresh(self, tp: tuple[str, int], old: _Count | None, now: float) -> _Count:
        topic, partition = tp
        keys = self.conn.keys
        ckey = keys.compaction_cursor(topic, partition)
        end = keys.index_range_end(topic, partition)
        cursor = old.cursor if old is not None else None
        kv, n = self.conn.etcd.get_and_count(ckey, keys.index(topic, partition, cursor or 0), end)
        moved = _cursor(ckey, kv.value) if kv is not None else None
        if moved != cursor:  # compaction moved the cursor: count from where it is now
            cursor = moved
            n = self.conn.etcd.count(keys.index(topic, partition, cursor or 0), end)
        c = _Count(cursor, n, now)
        with self._lock:
            self._counts.pop(tp, None)
            self._counts[tp] = c
            while len(self._counts) > MAX_TRACKED_PARTITIONS:
                del self._counts[next(iter(self._counts))]
        if n >= self.bound and (old is None or old.keys < self.bound):
            log.warning("%s/%s has %d uncompacted index keys (bound %d): refusing appends",
                        topic, partition, n, self.bound)
        return c


def _cursor(key: str, raw: bytes) -> int:
    try:
        return CompactionCursor.decode(raw).offset
    except MetaFormatError as exc:
        raise CorruptMetadata(key, str(exc)) from exc
