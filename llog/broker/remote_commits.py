"""Appends other brokers commit to the partitions this broker's consumers watch, read
into the tail cache as the watch announces them (protocol/README.md §9, "remote
tails").

A watch event on a partition's control key that carries another broker's pending is
a committed append (§4.3: an append exists iff a txn set it as pending) and says
where its body is: data key, byte range, first offset, record count. That is all a
read needs, so the broker reads the body at once, through the blob cache (one GET,
or one peer read, per blob for every partition in it), checks it (CRC, count) and
keeps its records in the tail cache; only then does it raise the partition's known
end and wake the consumers, who are served from memory on the event loop instead of
each resolving the offset in etcd and reading the blob on a worker thread.

Appends are announced in each partition's offset order: a later append whose read
finishes first waits for the earlier ones, so a consumer woken by it never finds the
earlier records missing (and reads storage for them).

Nothing here is a source of truth: an append whose read fails, or that is too large
for the caches, is announced anyway and its consumers read it from storage as
before.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from llog.broker.tailcache import TailCache
from llog.codec import bodies
from llog.codec.etcd_values.partition import Pending
from llog.errors import LlogError
from llog.metrics import Metrics
from llog.names import TopicPartition
from llog.store.blob_cache import BlobCache

log = logging.getLogger(__name__)


class RemoteCommits:
    """Reads announced appends into ``cache``; calls ``announce(tp, next_offset)`` once
    each is cached or its read failed, and every earlier append of ``tp`` it was given
    is too. One job per blob at a time: the appends of one flush (one per partition)
    queue behind the first read of their blob, which the others then find in the blob
    cache."""

    def __init__(
        self, blob_cache: BlobCache, cache: TailCache, metrics: Metrics, *, workers: int,
        announce: Callable[[TopicPartition, int], None],
    ) -> None:
        self._blobs = blob_cache
        self._cache = cache
        self._announce = announce
        self._outcomes = metrics.tail_remote_appends
        self._lock = threading.Lock()
        #: Per blob with a job running: the appends it has still to read.
        self._waiting: dict[str, list[tuple[TopicPartition, Pending]]] = {}
        #: Per partition, its appends given and not yet announced: first offset ->
        #: (next offset after it, whether it is done).
        self._flights: dict[TopicPartition, dict[int, tuple[int, bool]]] = {}
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="llog-remote-tail")
        self._closed = False

    def add(self, tp: TopicPartition, pending: Pending) -> bool:
        """Start reading ``pending`` (another broker's append to ``tp``); ``False`` when
        it will not be read (too large for the blob cache, or closing): the caller
        announces it itself."""
        if self._closed or not self._blobs.covers(pending.data_key, pending.byte_length):
            self._outcomes.labels("skipped").inc()
            with self._lock:
                flights = self._flights.get(tp)
                if not flights:  # nothing earlier in flight: the caller announces it now
                    return False
                flights[pending.start_offset] = (pending.end_offset + 1, True)  # in its turn
            return True
        with self._lock:
            self._flights.setdefault(tp, {})[pending.start_offset] = (pending.end_offset + 1, False)
            waiting = self._waiting.get(pending.data_key)
            if waiting is not None:
                waiting.append((tp, pending))
                return True
            self._waiting[pending.data_key] = [(tp, pending)]
        try:
            self._pool.submit(self._drain, pending.data_key)
        except RuntimeError:  # the pool shut down meanwhile: closing
            with self._lock:
                self._waiting.pop(pending.data_key, None)
                self._flights.pop(tp, None)
            return False
        return True

    def close(self) -> None:
        self._closed = True
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _drain(self, key: str) -> None:
        while True:
            with self._lock:
                items = self._waiting[key]
                if not items:
                    del self._waiting[key]
                    return
                self._waiting[key] = []
            for tp, pending in items:
                self._read(tp, pending)
                self._finished(tp, pending)

    def _finished(self, tp: TopicPartition, p: Pending) -> None:
        """``p`` is cached (or failed): announce the end of the run of done appends at
        the start of ``tp``'s flights, if ``p`` completed one."""
        upto = None
        with self._lock:
            flights = self._flights.get(tp, {})
            flights[p.start_offset] = (p.end_offset + 1, True)
            while flights:
                first = min(flights)
                end, done = flights[first]
                if not done:
                    break
                del flights[first]
                upto = end
            if not flights:
                self._flights.pop(tp, None)
        if upto is not None:
            self._announce(tp, upto)

    def _read(self, tp: TopicPartition, p: Pending) -> None:
        try:
            data = self._blobs.read(p.data_key, p.byte_offset, p.byte_length)
            body = bodies.open_body(data)
            if len(body) != p.msg_count:
                raise bodies.BatchFormatError(f"body holds {len(body)} records, the pending says {p.msg_count}")
            self._cache.put_stored(tp[0], tp[1], p.start_offset, body)
        except bodies.BatchFormatError as exc:
            # Damaged, in storage or on the way from a peer: its consumers' read goes to
            # storage (not to the cache, nor to the peer), which reports what is wrong.
            self._blobs.discard(p.data_key)
            log.warning("remote append %s/%s@%d in %s does not decode: %s", *tp, p.start_offset, p.data_key, exc)
            self._outcomes.labels("failed").inc()
            return
        except LlogError as exc:
            # Its consumers read it from storage, which reports what is wrong.
            log.debug("remote append %s/%s@%d in %s not cached: %s", *tp, p.start_offset, p.data_key, exc)
            self._outcomes.labels("failed").inc()
            return
        except Exception:  # a bug here must not stop the announcements that follow
            log.exception("remote append %s/%s@%d in %s not cached", *tp, p.start_offset, p.data_key)
            self._outcomes.labels("failed").inc()
            return
        self._outcomes.labels("cached").inc()
