"""The tail cache shared by brokers on one host (``LLOG_TAIL_CACHE_DIR``).

Each committed group is one file ``<dir>/<root>/<topic>/<partition>/<start>-<count>``
holding the group's batch body (``llog.codec.batch``, the bytes the WAL slice holds),
written to a temporary name and renamed, so a reader sees whole files only. A broker
reading another broker's commit after an etcd watch wake-up then reads a local file
instead of S3. Each broker deletes its own oldest files beyond its byte budget; a
lookup that finds no file falls back to storage, so a deleted file is never an error.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections import deque
from pathlib import Path

from llog.codec import batch
from llog.records import ConsumedRecord, Record
from llog.writer import AppendResult

log = logging.getLogger(__name__)


class FileTailCache:
    def __init__(self, directory: str | Path, root_prefix: str, max_bytes: int, max_files: int = 4096) -> None:
        self.base = Path(directory) / root_prefix
        self.max_bytes = max_bytes
        # Lookups list a partition's directory: keep it short even for tiny records.
        self.max_files = max_files
        self._lock = threading.Lock()
        self._mine: deque[tuple[Path, int]] = deque()
        self._bytes = 0

    def _dir(self, topic: str, partition: int) -> Path:
        return self.base / topic / str(partition)  # topic names are path-safe ([A-Za-z0-9._-])

    def put(self, result: AppendResult, records: list[Record]) -> None:
        body = batch.encode(records)
        d = self._dir(result.topic, result.partition)
        path = d / f"{result.start_offset}-{result.count}"
        try:
            d.mkdir(parents=True, exist_ok=True)
            tmp = d / f".{uuid.uuid4().hex}.tmp"
            tmp.write_bytes(body)
            os.replace(tmp, path)
        except OSError as exc:
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
            names = os.listdir(self._dir(topic, partition))
        except OSError:
            return None
        spans: dict[int, tuple[int, str]] = {}
        for name in names:
            first, sep, n = name.partition("-")
            if sep and first.isdigit() and n.isdigit():
                spans[int(first)] = (int(n), name)
        holder = next((s for s, (n, _) in spans.items() if s <= offset < s + n), None)
        out: list[ConsumedRecord] = []
        used = 0
        want = offset
        while holder is not None:
            count, fname = spans[holder]
            try:
                b = batch.decode((self._dir(topic, partition) / fname).read_bytes())
            except (OSError, batch.BatchFormatError):
                break  # pruned meanwhile, or damaged: storage has the truth
            for i, (ts, key, value, headers) in enumerate(b.rows(want - holder), start=want):
                size = len(value) + (len(key) if key is not None else 0)
                if out and used + size > max_bytes:
                    return out
                out.append(ConsumedRecord(topic, partition, i, ts, key, value, headers))
                used += size
            want = holder + count
            holder = want if want in spans else None
        return out or None
