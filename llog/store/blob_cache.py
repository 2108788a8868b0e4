"""A process's cache of shared WAL blobs, by object and chunk (protocol/README.md §9
step 9).

One flush puts a small slice of every partition into one shared blob, so readers of
several partitions at the tail (a broker's consumers, a ``scan_many``) want the same
object at about the same time. Each small read of a WAL object fetches the aligned
``chunk_bytes`` around it instead (one range GET; S3 answers a range past the end of
a small blob with what there is), and every later read inside that chunk, of any
partition, is served from memory. Reads of a chunk being fetched wait for that one
GET (single-flight). Large reads (bulk scans of big blobs) and compacted objects go
to storage as before: caching them would evict the tail for bytes read once.

Caching by key is safe because an object key names one immutable object: a writer
never rewrites a key (a new blob gets a new id, protocol/README.md §5), and a read
reaches a key only through the index entry or pending that names it, so the chunks of
a blob that compaction or retention stopped naming are never served to a read that
resolved after. What can go wrong is damage (a corrupt or truncated object) or
deletion: the reader drops the object's chunks (:meth:`BlobCache.discard`) before it
re-resolves, so a retry goes to storage. Bounded in bytes; least recently used chunks
go first.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from concurrent.futures import Future

from llog.errors import StoreError
from llog.metrics import Metrics
from llog.store.base import ObjectStore
from llog.store.peers import PeerBlobs

#: ``(object key, chunk number)``.
ChunkId = tuple[str, int]


class BlobCache:
    """Thread-safe; ``max_bytes`` of chunks of objects under ``prefix``."""

    def __init__(
        self, store: ObjectStore, prefix: str, *, max_bytes: int, chunk_bytes: int, metrics: Metrics,
        peers: PeerBlobs | None = None,
    ) -> None:
        self.store = store
        #: Asked for a chunk before the store (the broker that wrote the blob).
        self.peers = peers
        self.prefix = prefix
        self.max_bytes = max_bytes
        self.chunk_bytes = chunk_bytes
        self._lock = threading.Lock()
        self._chunks: OrderedDict[ChunkId, bytes] = OrderedDict()
        self._loading: dict[ChunkId, Future[bytes]] = {}
        #: Chunks discarded while their GET was in flight: not kept when it answers.
        self._dropped: set[ChunkId] = set()
        self._bytes = 0
        self._requests = metrics.read_cache_requests
        self._held = metrics.read_cache_bytes
        self._evictions = metrics.read_cache_evictions

    def covers(self, key: str, length: int) -> bool:
        """Whether a read of ``length`` bytes of ``key`` goes through the cache: small
        reads of WAL blobs, when the cache is on."""
        return self.max_bytes > 0 and length <= self.chunk_bytes // 2 and key.startswith(self.prefix)

    def read(self, key: str, offset: int, length: int) -> bytes:
        """Exactly ``length`` bytes of ``key`` at ``offset``, from cached chunks or one
        GET of the chunks that hold them. Raises what the store raised
        (:class:`ObjectNotFound`, :class:`StoreError`); a range past the object's end is
        a :class:`StoreError`, as from :meth:`ObjectStore.get_range`."""
        numbers = self._chunk_numbers(offset, length)
        out = self._cut([self._chunk(key, n) for n in numbers], numbers, offset, length)
        if len(out) != length:
            raise StoreError(f"range [{offset}, {offset + length}) is past the end of {key}")
        return out

    def keep_object(self, key: str, data: bytes) -> None:
        """Hold a whole object this process just wrote (write-through), so its other
        readers, and peers (:meth:`peek`), are served from memory."""
        if not self.covers(key, 0):
            return
        c = self.chunk_bytes
        with self._lock:
            for n in range(max(1, -(-len(data) // c))):
                if (key, n) not in self._chunks:
                    self._keep((key, n), data[n * c : (n + 1) * c])

    def peek(self, key: str, offset: int, length: int) -> bytes | None:
        """Up to ``length`` bytes of ``key`` at ``offset`` if this cache holds them all
        (fewer where the object ends), without any I/O; else ``None``."""
        numbers = self._chunk_numbers(offset, length)
        parts: list[bytes] = []
        with self._lock:
            for n in numbers:
                part = self._chunks.get((key, n))
                if part is None:
                    return None
                parts.append(part)
                if len(part) < self.chunk_bytes:  # the object ends in this chunk
                    break
        return self._cut(parts, numbers, offset, length) or None

    def discard(self, key: str) -> None:
        """Forget every chunk of ``key`` (found gone or damaged): the next read GETs it
        from storage."""
        if self.peers is not None:
            self.peers.distrust(key)
        with self._lock:
            for cid in [cid for cid in self._chunks if cid[0] == key]:
                self._bytes -= len(self._chunks.pop(cid))
            self._dropped.update(cid for cid in self._loading if cid[0] == key)
            self._held.set(self._bytes)

    @property
    def nbytes(self) -> int:
        """Bytes held."""
        return self._bytes

    @property
    def chunks(self) -> int:
        """Chunks held."""
        return len(self._chunks)

    def _chunk_numbers(self, offset: int, length: int) -> range:
        """The chunks that hold ``[offset, offset + length)``."""
        c = self.chunk_bytes
        return range(offset // c, (offset + length - 1) // c + 1)

    def _cut(self, parts: list[bytes], numbers: range, offset: int, length: int) -> bytes:
        """Bytes ``[offset, offset + length)`` of chunks ``numbers`` (``parts``, the
        first of them up to where the object ends); fewer where it ends first."""
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        rel = offset - numbers.start * self.chunk_bytes
        return data[rel : rel + length]

    def _chunk(self, key: str, n: int) -> bytes:
        cid = (key, n)
        with self._lock:
            data = self._chunks.get(cid)
            if data is not None:
                self._chunks.move_to_end(cid)
                self._requests.labels("hit").inc()
                return data
            waiting = self._loading.get(cid)
            if waiting is None:
                mine: Future[bytes] = Future()
                self._loading[cid] = mine
        if waiting is not None:
            self._requests.labels("wait").inc()
            return waiting.result()
        self._requests.labels("miss").inc()
        try:
            data = self._fetch(key, n)
        except BaseException as exc:
            with self._lock:
                del self._loading[cid]
                self._dropped.discard(cid)
            mine.set_exception(exc)
            raise
        with self._lock:
            del self._loading[cid]
            if cid in self._dropped:
                self._dropped.discard(cid)
            else:
                self._keep(cid, data)
        mine.set_result(data)
        return data

    def _fetch(self, key: str, n: int) -> bytes:
        start = n * self.chunk_bytes
        got = None if self.peers is None else self.peers.fetch(key, start, self.chunk_bytes)
        return got if got is not None else self.store.get_upto(key, start, self.chunk_bytes)

    def _keep(self, cid: ChunkId, data: bytes) -> None:
        if len(data) > self.max_bytes:
            return
        self._chunks[cid] = data
        self._bytes += len(data)
        while self._bytes > self.max_bytes:
            _, old = self._chunks.popitem(last=False)
            self._bytes -= len(old)
            self._evictions.inc()
        self._held.set(self._bytes)
