"""The fetch pipeline (protocol/README.md §9 step 9): the range GETs of a list of
partition scans, as many in flight as the reader's :class:`ReadAhead` says (and at
most ``read_inflight_bytes`` of them), the window running on from one partition into
the next."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from llog.connection import Connection
from llog.errors import CorruptBlob, LlogError, ObjectNotFound, StoreError
from llog.scan.partition import PartitionScan
from llog.scan.read_ahead import ReadAhead
from llog.scan.slices import Fetch

T = TypeVar("T")

#: A GET in flight: the scan it serves, what it fetches, its bytes to come.
InFlight = tuple[PartitionScan, Fetch, Future[bytes]]


class FetchPipeline:
    """The GETs of ``scans`` in order, each ``get`` run on ``pool``, at most ``depth``
    in flight (``ahead.depth``, and no more than ``max_bytes`` but for the first). A
    scan's slices that raise stop the feeding there; the error reaches the consumer once
    everything before it was taken. ``conn``'s store tells a short object from an
    outage."""

    def __init__(
        self,
        scans: list[PartitionScan],
        get: Callable[[Fetch], bytes],
        pool: ThreadPoolExecutor,
        conn: Connection,
        ahead: ReadAhead,
        max_bytes: int,
    ) -> None:
        self._scans = scans
        self._get = get
        self._pool = pool
        self._conn = conn
        self._ahead = ahead
        self._max_bytes = max_bytes
        self._inflight_bytes = 0
        self._inflight: deque[InFlight] = deque()
        #: The scan whose fetches are queued next.
        self._feeding = 0

    def take(self) -> InFlight | None:
        """The oldest GET in flight, with the window topped up behind it (so ``depth``
        GETs stay in flight while it is decoded and consumed); ``None`` at the end.
        Raises what the next scan's slices raised once nothing precedes it."""
        self._top_up()
        if not self._inflight:
            failed = self._scans[self._feeding].failed if self._feeding < len(self._scans) else None
            if failed is not None:
                raise failed
            return None
        taken = self._inflight.popleft()
        self._inflight_bytes -= taken[1].byte_length
        self._ahead.taken(taken[2].done())
        self._top_up()
        return taken

    def bytes_of(self, f: Fetch, fut: Future[bytes]) -> bytes:
        """What ``fut`` fetched. A range past the object's end raises
        :class:`CorruptBlob` (the blob is shorter than the index says: damage, not an
        outage); :class:`ObjectNotFound` passes through for the caller to re-resolve."""
        try:
            return fut.result()
        except ObjectNotFound:
            raise
        except StoreError as exc:
            short = self._past_end(f)
            if short is None:
                raise
            raise short from exc

    def submit(self, fn: Callable[..., T], *args: object) -> Future[T]:
        """``fn(*args)`` on the pipeline's thread pool (decoding that can run beside
        the consumer)."""
        return self._pool.submit(fn, *args)

    def restart_from(self, sc: PartitionScan) -> None:
        """Drop every GET in flight and feed again from ``sc``; the scans after it
        start over (nothing of them was yielded yet)."""
        self.close()
        self._inflight.clear()
        self._inflight_bytes = 0
        at = self._scans.index(sc)
        for later in self._scans[at + 1 : self._feeding + 1]:
            later.restart()
        self._feeding = at

    def forget(self, data_key: str) -> None:
        """Drop what the blob cache holds of ``data_key``: it was found gone or damaged,
        so a retry must read storage again."""
        self._conn.blob_cache.discard(data_key)

    def close(self) -> None:
        """Cancel the GETs in flight (those already running finish unread)."""
        for _, _, fut in self._inflight:
            fut.cancel()

    def _top_up(self) -> None:
        scans = self._scans
        while self._feeding < len(scans) and self._room():
            sc = scans[self._feeding]
            if sc.failed is not None:  # its slices raised: nothing more of it, or after it
                return
            try:
                nxt = next(sc.fetches, None)
            except LlogError as exc:
                # Raised when the consumer reaches this point of the scan, not before.
                sc.failed = exc
                return
            if nxt is None:
                self._feeding += 1
                continue
            self._inflight.append((sc, nxt, self._pool.submit(self._get, nxt)))
            self._inflight_bytes += nxt.byte_length

    def _room(self) -> bool:
        """Whether another GET may start: under the read-ahead depth and, unless none
        is in flight, under the byte bound (the next GET's size is not known yet, so
        the bound can be passed by one GET)."""
        if not self._inflight:
            return True
        return len(self._inflight) < self._ahead.depth and self._inflight_bytes < self._max_bytes

    def _past_end(self, f: Fetch) -> CorruptBlob | None:
        """:class:`CorruptBlob` for the first slice of ``f`` past the end of its object."""
        self.forget(f.data_key)
        info = self._conn.store.head(f.data_key)
        if info is None:
            return None
        for s in f.slices:
            if s.byte_offset + s.byte_length > info.size:
                return CorruptBlob(
                    s.data_key, s.byte_offset, s.byte_length, f"the object ends at byte {info.size}"
                )
        return None
