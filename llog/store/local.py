"""Object store in a local directory (``file://``), for embedded single-node use.

PUTs are atomic and durable: write a temp file in the target directory, fsync it,
rename it over the key, fsync the directory. Key segments are directories (a session's
blobs share one); a delete removes the directory it empties.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from llog.errors import ObjectNotFound, StoreError
from llog.metrics import Metrics
from llog.store.base import ObjectInfo, ObjectStore, check_key, check_range

_TMP_SUFFIX = ".llog-tmp"


class LocalStore(ObjectStore):
    def __init__(self, root: str | os.PathLike[str], metrics: Metrics | None = None) -> None:
        super().__init__(metrics)
        self.root = Path(root).absolute()
        self.root.mkdir(parents=True, exist_ok=True)
        self.uri = f"file://{self.root}"

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    def object_uri(self, key: str) -> str:
        return f"file://{self._path(key)}"

    def put(self, key: str, data: bytes, *, crc32: int | None = None) -> None:
        path = self._path(key)
        with self._measure("put"):
            fd, tmp = self._temp_file(path.parent)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, path)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
                raise
            dfd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        self.metrics.s3_bytes.labels("in").inc(len(data))

    @staticmethod
    def _temp_file(directory: Path) -> tuple[int, str]:
        for _ in range(8):
            directory.mkdir(parents=True, exist_ok=True)
            try:
                return tempfile.mkstemp(dir=directory, prefix=".", suffix=_TMP_SUFFIX)
            except FileNotFoundError:  # a delete removed the directory it had emptied
                continue
        raise StoreError(f"could not create a file in {directory}: it keeps disappearing")

    def get(self, key: str) -> bytes:
        with self._measure("get"):
            try:
                data = self._path(key).read_bytes()
            except (FileNotFoundError, IsADirectoryError):
                raise ObjectNotFound(key) from None
        self.metrics.s3_bytes.labels("out").inc(len(data))
        return data

    def get_upto(self, key: str, offset: int, length: int) -> bytes:
        check_range(key, offset, length)
        with self._measure("get_range"):
            try:
                with open(self._path(key), "rb") as f:
                    f.seek(offset)
                    data = f.read(length)
            except (FileNotFoundError, IsADirectoryError):
                raise ObjectNotFound(key) from None
        if not data:  # as S3 answers a range that starts past the end
            raise StoreError(f"range [{offset}, {offset + length}) is past the end of {key}")
        self.metrics.s3_bytes.labels("out").inc(len(data))
        return data

    def head(self, key: str) -> ObjectInfo | None:
        with self._measure("head"):
            try:
                st = self._path(key).stat()
            except FileNotFoundError:
                return None
        return ObjectInfo(key, st.st_size, st.st_mtime)

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        self.metrics.s3_ops.labels("list").inc()
        found: list[ObjectInfo] = []
        for dirpath, _dirs, files in os.walk(self.root):
            for name in files:
                if name.endswith(_TMP_SUFFIX):
                    continue
                full = Path(dirpath) / name
                key = full.relative_to(self.root).as_posix()
                if key.startswith(prefix):
                    try:
                        st = full.stat()
                    except FileNotFoundError:
                        continue
                    found.append(ObjectInfo(key, st.st_size, st.st_mtime))
        found.sort(key=lambda o: o.key)
        return iter(found)

    def delete(self, keys: Iterable[str]) -> int:
        n = 0
        with self._measure("delete"):
            for key in keys:
                n += 1
                path = self._path(key)
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                if path.parent != self.root:
                    # Only while empty; a concurrent PUT into it recreates it (_temp_file).
                    with contextlib.suppress(OSError):
                        path.parent.rmdir()
        return n
