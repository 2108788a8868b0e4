"""How old an etcd key is, judged by its ``mod_revision`` on ONE clock: the compactor's.

Writers' clocks never decide what compaction or retention may touch (protocol/README.md,
"Clocks"). Instead a :class:`RevisionClock` samples etcd's revision, each sample taken
after the read returned, so every key at or below a sampled revision was written before
the sample's time on the compactor's ``time.monotonic()``. "At least X old" is then
"``mod_revision`` at most the newest revision sampled at least X ago".

A fresh process has no samples, so they are also persisted at
``{root}/_maintenance/revision-clock`` as ``(wall_ms, revision)`` pairs and converted
back into the monotonic timeline on load: the wall clocks of compactor processes are
then the only clocks involved, and their skew only shifts ages. Contradictory samples
(a later one with a lower revision, from a skewed clock) are resolved to the lower
revision. An age
that no sample can vouch for is "not old enough yet": it delays, and the next samples
make it judgeable once enough time has passed on this clock.
"""

from __future__ import annotations

import bisect
import logging
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import msgpack

from llog.connection import Connection
from llog.etcd.operations import Get, Put, mod_revision_is

log = logging.getLogger(__name__)

#: Samples closer than this to the previous one are not kept.
SPACING_S = 1.0
#: Samples kept; beyond this the older half is thinned to every second sample, so
#: the span grows while the resolution of old ages coarsens (conservatively).
MAX_SAMPLES = 256
#: The service persists its samples at most this often.
SAVE_INTERVAL_S = 30.0
_SAVE_ATTEMPTS = 4


@dataclass(frozen=True, slots=True)
class _Sample:
    at: float  # seconds on this process's monotonic clock
    revision: int


class RevisionClock:
    """Revision-to-time samples of one etcd, on this process's monotonic clock.
    Thread-safe.

    >>> clock = RevisionClock.load(conn)                            # doctest: +SKIP
    >>> clock.aged_revision(120_000)   # keys at or below it are >= 2 min old
    """

    def __init__(
        self,
        conn: Connection,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.conn = conn
        self._monotonic = monotonic
        self._wall = wall
        self._lock = threading.Lock()
        self._samples: list[_Sample] = []
        self._saved_at: float | None = None

    @classmethod
    def load(cls, conn: Connection, **kw: Callable[[], float]) -> RevisionClock:
        """A clock that starts from the persisted samples (if any)."""
        clock = cls(conn, **kw)
        kv = conn.etcd.get(conn.keys.revision_clock())
        if kv is not None:
            clock._merge(_decode(kv.key, kv.value), clock._monotonic(), clock._wall())
        return clock

    def observe(self) -> int:
        """Read etcd's current revision and keep it as a sample; return it."""
        revision = self.conn.etcd.status()["revision"]
        at = self._monotonic()  # after the read: everything at or below it is older
        with self._lock:
            last = self._samples[-1] if self._samples else None
            # A revision seen again adds nothing: its first sighting is the stronger.
            if last is None or (revision > last.revision and at - last.at >= SPACING_S):
                self._samples.append(_Sample(at, revision))
                self._samples = _thin(self._samples)
        return revision

    def aged_revision(self, age_ms: int) -> int:
        """The newest revision known to be at least ``age_ms`` old on this clock: every
        key whose ``mod_revision`` is at most it was last written that long ago or
        more. 0 when no sample is that old yet (no key qualifies); for ``age_ms <= 0``,
        a revision above every key's. Call :meth:`observe` first to sample now."""
        if age_ms <= 0:
            return sys.maxsize
        cutoff = self._monotonic() - age_ms / 1000
        with self._lock:
            samples = self._samples
            k = bisect.bisect_right([s.at for s in samples], cutoff)
            if k == 0:
                return 0
            # The revision at time t is at most that of any later sample.
            return min(s.revision for s in samples[k - 1 :])

    def save_if_due(self) -> None:
        """:meth:`save` if the last one is :data:`SAVE_INTERVAL_S` old (or none yet)."""
        now = self._monotonic()
        if self._saved_at is None or now - self._saved_at >= SAVE_INTERVAL_S:
            self.save()

    def save(self) -> None:
        """Merge the persisted samples with this process's and write them back
        (compare-and-swap on the key's ``mod_revision``; another process's save in
        between is merged on the next attempt)."""
        key = self.conn.keys.revision_clock()
        etcd = self.conn.etcd
        kv = etcd.get(key)
        for _ in range(_SAVE_ATTEMPTS):
            mono, wall = self._monotonic(), self._wall()
            if kv is not None:
                self._merge(_decode(key, kv.value), mono, wall)
            with self._lock:
                out = [[round((wall - (mono - s.at)) * 1000), s.revision] for s in self._samples]
            r = etcd.txn(
                [mod_revision_is(key, kv.mod_revision if kv is not None else 0)],
                [Put(key, msgpack.packb({"samples": out}))],
                [Get(key)],
            )
            if r.succeeded:
                self._saved_at = mono
                return
            got = r.responses[0]
            assert isinstance(got, list)
            kv = got[0] if got else None
        log.warning("could not save the revision clock to %s: it kept changing", key)

    def _merge(self, persisted: list[tuple[int, int]], mono: float, wall: float) -> None:
        with self._lock:
            by_revision = {s.revision: s.at for s in self._samples}
            for wall_ms, revision in persisted:
                at = mono - (wall - wall_ms / 1000)
                # A revision's first sighting says the most: everything at or below
                # it was written before then.
                by_revision[revision] = min(at, by_revision.get(revision, at))
            merged = sorted((_Sample(at, rev) for rev, at in by_revision.items()), key=lambda s: (s.at, s.revision))
            self._samples = _thin(merged)


def _thin(samples: list[_Sample]) -> list[_Sample]:
    while len(samples) > MAX_SAMPLES:
        half = len(samples) // 2
        samples = samples[:half:2] + samples[half:]
    return samples


def _decode(key: str, raw: bytes) -> list[tuple[int, int]]:
    """The persisted pairs; a value that does not decode is only a lost hint (logged,
    then overwritten by the next save), never a reason to stop compacting."""
    try:
        value = msgpack.unpackb(raw)
        return [(int(w), int(r)) for w, r in value["samples"]]
    except (ValueError, TypeError, KeyError, msgpack.UnpackException) as exc:
        log.warning("ignoring undecodable revision clock at %s: %s", key, exc)
        return []
