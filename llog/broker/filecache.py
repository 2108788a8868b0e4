"""The tail cache shared by brokers on one host (``LLOG_TAIL_CACHE_DIR``).

Each committed group is one file ``<dir>/<root>/<owner>/<topic>/<partition>/<start>-<count>``
holding the group's batch body (``llog.codec.batch``, the bytes the WAL slice holds),
written to a temporary name and renamed, so a reader sees whole files only. A broker
reading another broker's commit after an etcd watch wake-up then reads a local file
instead of S3: a lookup looks in every owner's directory. Each broker deletes its own
oldest files beyond its byte budget; a lookup that finds no file falls back to
storage, so a deleted or not-yet-written file is never an error.

``<owner>`` is ``<broker id>-<pid>``, one directory per broker process, next to
``<owner>.lock`` which the broker holds an exclusive ``flock`` on for its lifetime.
The kernel releases the lock when the process dies, however it dies (``kill -9``
included), so a lock that can be taken marks a dead broker's files: every broker
removes those at start and then every ``SWEEP_INTERVAL_S`` (on a tmpfs they would
otherwise hold memory until reboot), and its own directory when it stops.

Files are written by one background thread, in commit order, never on the produce
path: creating a file costs 0.2-1 ms on a disk-backed directory, which before the
ack would have halved a broker's produce throughput. A file holds the append's body
exactly as its WAL slice does, handed over by the producer, so nothing is encoded
twice. The queue is bounded (``max_bytes``); when the disk falls behind, commits are
left out of the files (counted in ``llog_tail_cache_files_dropped_total``) and readers
go to storage for them. A tmpfs (``/dev/shm/...``) makes the files nearly free.
Like the in-memory cache, the files are asked only for offsets at or above the
partition's compaction cursor (llog/broker/fetch.py): below it key compaction may have
removed records they hold.
"""

from __future__ import annotations

import fcntl
import itertools
import logging
import os
import queue
import shutil
import threading
import time
from collections import deque
from pathlib import Path

from llog.codec import batch, bodies
from llog.metrics import Metrics
from llog.records import ConsumedRecord, new_consumed_record
from llog.writer import AppendResult

log = logging.getLogger(__name__)

#: Seconds between two looks for dead brokers' files, after the one at start.
SWEEP_INTERVAL_S = 60.0
_LOCK_SUFFIX = ".lock"


class FileTailCache:
    def __init__(
        self, directory: str | Path, root_prefix: str, broker_id: str, max_bytes: int, metrics: Metrics,
        max_files: int = 4096, sweep_interval_s: float = SWEEP_INTERVAL_S,
    ) -> None:
        self.base = Path(directory) / root_prefix
        self.base.mkdir(parents=True, exist_ok=True)
        name = f"{broker_id}-{os.getpid()}"
        self._lock_path = self.base / f"{name}{_LOCK_SUFFIX}"
        self._lock_fd = _hold_lock(self._lock_path)
        #: This broker's files (the other owners' directories are only read).
        self.own = self.base / name
        self._sweep()
        self.sweep_interval_s = sweep_interval_s
        self._metrics = metrics
        self.max_bytes = max_bytes
        # Lookups list a partition's directory: keep it short even for tiny records.
        self.max_files = max_files
        self._lock = threading.Lock()
        self._mine: deque[tuple[Path, int]] = deque()
        self._bytes = 0
        self._made: set[Path] = set()
        self._seq = itertools.count()
        self._queue: queue.SimpleQueue[tuple[AppendResult, bytes] | None] = queue.SimpleQueue()
        self._queued_bytes = 0  # bounded by max_bytes: beyond it, commits are dropped
        self._thread = threading.Thread(target=self._run, name="llog-tail-files", daemon=True)
        self._thread.start()

    def _dir(self, topic: str, partition: int) -> Path:
        # Topic names are path-safe (llog.names.TOPIC_NAME_PATTERN).
        return self.own / topic / str(partition)

    def put(self, result: AppendResult, body: bytes | memoryview) -> None:
        """Queue a committed append's body (the bytes of its WAL slice) for its file;
        never blocks."""
        data = bytes(body)  # a copy: a view would keep the whole shared blob alive
        with self._lock:
            if self._queued_bytes + len(data) > self.max_bytes:
                self._metrics.tail_cache_files_dropped.inc()
                return
            self._queued_bytes += len(data)
        self._queue.put((result, data))

    def close(self) -> None:
        """Write what is queued, stop the writer thread, then remove this broker's files
        (readers of them fall back to storage) and its lock."""
        self._queue.put(None)
        self._thread.join()
        try:
            shutil.rmtree(self.own, ignore_errors=True)
            self._lock_path.unlink(missing_ok=True)
        finally:
            os.close(self._lock_fd)

    def _sweep(self) -> None:
        try:
            remove_dead_owners(self.base)
        except OSError as exc:  # best-effort like the files: the next sweep tries again
            log.warning("tail cache sweep of %s failed: %s", self.base, exc)

    def _run(self) -> None:
        next_sweep = time.monotonic() + self.sweep_interval_s
        while True:
            if time.monotonic() >= next_sweep:
                self._sweep()
                next_sweep = time.monotonic() + self.sweep_interval_s
            try:
                item = self._queue.get(timeout=max(0.0, next_sweep - time.monotonic()))
            except queue.Empty:
                continue
            if item is None:
                return
            result, body = item
            try:
                self._write(result, body)
            except Exception:  # the cache is best-effort: never lose the writer thread
                log.exception("tail cache writer failed for %s/%s", result.topic, result.partition)
            finally:
                with self._lock:
                    self._queued_bytes -= len(body)

    def _write(self, result: AppendResult, body: bytes) -> None:
        d = self._dir(result.topic, result.partition)
        path = d / f"{result.start_offset}-{result.count}"
        try:
            if d not in self._made:
                d.mkdir(parents=True, exist_ok=True)
                self._made.add(d)
            tmp = d / f".{next(self._seq)}.tmp"
            with open(tmp, "wb") as f:
                f.write(body)
            os.replace(tmp, path)
        except OSError as exc:
            self._made.discard(d)  # removed under us: made again by the next put
            log.warning("tail cache file %s not written: %s", path, exc)
            return
        with self._lock:
            self._mine.append((path, len(body)))
            self._bytes += len(body)
            while self._mine and (self._bytes > self.max_bytes or len(self._mine) > self.max_files):
                old, size = self._mine.popleft()
                self._bytes -= size
                old.unlink(missing_ok=True)

    def get(self, topic: str, partition: int, offset: int, max_bytes: int) -> list[ConsumedRecord] | None:
        """Records from ``offset`` on, contiguous across files, at least one and then up
        to ``max_bytes``; ``None`` when no file holds ``offset``."""
        try:
            owners = os.listdir(self.base)
        except OSError:
            return None
        # Strings, not Paths: a partition directory can hold thousands of names.
        spans: dict[int, tuple[int, str, str]] = {}
        tail = f"{topic}/{partition}"
        for owner in owners:
            if owner.endswith(_LOCK_SUFFIX):
                continue
            d = f"{self.base}/{owner}/{tail}"
            try:
                names = os.listdir(d)
            except OSError:
                continue
            for name in names:
                first, sep, n = name.partition("-")
                if sep and first.isdigit() and n.isdigit():
                    spans[int(first)] = (int(n), d, name)
        holder = next((s for s, (n, _, _) in spans.items() if s <= offset < s + n), None)
        out: list[ConsumedRecord] = []
        used = 0
        want = offset
        while holder is not None:
            count, d, name = spans[holder]
            try:
                with open(f"{d}/{name}", "rb") as f:
                    b = bodies.decode(f.read())
            except (OSError, batch.BatchFormatError):
                break  # pruned meanwhile, or damaged: storage has the truth
            for i, (ts, key, value, headers) in enumerate(b.rows(want - holder), start=want):
                size = (len(value) if value is not None else 0) + (len(key) if key is not None else 0)
                if out and used + size > max_bytes:
                    return out
                out.append(new_consumed_record(topic, partition, i, ts, key, value, headers))
                used += size
            want = holder + count
            holder = want if want in spans else None
        return out or None


def _hold_lock(path: Path) -> int:
    """Create ``path`` and hold an exclusive flock on it; the open descriptor. A sweep
    may unlink a lock file between our open and flock (taking it for a dead one): then
    the lock held is on a removed file, so create it again."""
    while True:
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)


def remove_dead_owners(base: Path) -> list[str]:
    """Remove the directory of every owner under ``base`` whose lock no live process
    holds, then the lock file; the names removed."""
    removed = []
    for entry in os.listdir(base):
        if not entry.endswith(_LOCK_SUFFIX):
            continue
        lock = base / entry
        try:
            fd = os.open(lock, os.O_RDWR)
        except FileNotFoundError:
            continue  # removed by another broker's sweep
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # its broker is alive
            try:
                if os.stat(lock).st_ino != os.fstat(fd).st_ino:
                    continue  # swept meanwhile
            except FileNotFoundError:
                continue
            owner = entry[: -len(_LOCK_SUFFIX)]
            shutil.rmtree(base / owner, ignore_errors=True)
            lock.unlink()  # last, under the lock: a sweep stopped half-way is redone
            removed.append(owner)
        finally:
            os.close(fd)
    if removed:
        log.info("removed the tail cache files of %d dead broker(s) under %s: %s", len(removed), base, removed)
    return removed
