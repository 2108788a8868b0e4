"""The object-store interface every backend implements."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from llog.errors import InvalidInput, StoreError
from llog.metrics import Metrics


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int
    #: Last modification time, seconds since the epoch.
    modified: float


class ObjectStore(ABC):
    """Whole-object PUT, whole and range GET, list, delete. Keys are ``/``-separated
    relative paths; a backend maps them under its own root (bucket prefix, directory)."""

    uri: str

    def __init__(self, metrics: Metrics | None) -> None:
        self.metrics = metrics if metrics is not None else Metrics()

    @abstractmethod
    def object_uri(self, key: str) -> str:
        """The object's URI for other readers (``s3://bucket/...``, ``file:///...``)."""

    @abstractmethod
    def put(self, key: str, data: bytes, *, crc32: int | None = None) -> None:
        """Store ``data`` at ``key`` atomically: readers see all of it or nothing.
        ``crc32`` is the CRC-32 of ``data`` when the caller already has it: S3 checks
        the upload against it (and boto3 skips computing its own)."""

    @abstractmethod
    def get(self, key: str) -> bytes:
        """The whole object; :class:`ObjectNotFound` if absent."""

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        """Exactly ``length`` bytes at ``offset``; :class:`ObjectNotFound` if absent,
        :class:`StoreError` if the object is shorter."""
        data = self.get_upto(key, offset, length)
        if len(data) != length:
            raise StoreError(f"short read of {key}: wanted {length} bytes at {offset}, got {len(data)}")
        return data

    @abstractmethod
    def get_upto(self, key: str, offset: int, length: int) -> bytes:
        """Up to ``length`` bytes at ``offset``, fewer where the object ends first (one
        range GET either way); :class:`ObjectNotFound` if absent, :class:`StoreError` if
        the object ends at or before ``offset``."""

    @abstractmethod
    def head(self, key: str) -> ObjectInfo | None:
        """Size and modification time, or ``None`` if absent."""

    @abstractmethod
    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        """Every object whose key starts with ``prefix``, in key order."""

    @abstractmethod
    def delete(self, keys: Iterable[str]) -> int:
        """Delete the keys (absent ones are fine); return how many were requested."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""

    def __enter__(self) -> ObjectStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _measure(self, op: str) -> Iterator[None]:
        self.metrics.s3_ops.labels(op).inc()
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.metrics.s3_latency.labels(op).observe(time.perf_counter() - t0)


def check_key(key: str) -> str:
    """Reject keys that could escape a backend's root or confuse S3 listings."""
    if not key or key.startswith("/") or "\\" in key or "\0" in key:
        raise InvalidInput(f"invalid object key {key!r}")
    if any(part in ("", ".", "..") for part in key.split("/")):
        raise InvalidInput(f"invalid object key {key!r}")
    return key


def check_range(key: str, offset: int, length: int) -> None:
    if offset < 0 or length <= 0:
        raise InvalidInput(f"invalid range [{offset}, +{length}) of {key}")
