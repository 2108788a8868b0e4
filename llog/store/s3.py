"""Object store on S3 or any S3-compatible server, through botocore (boto3's core)."""

from __future__ import annotations

import base64
import builtins
import functools
from collections.abc import Iterable, Iterator
from typing import Any

import botocore.session
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from botocore.handlers import convert_body_to_file_like_object
from botocore.utils import determine_content_length

from llog.errors import ObjectNotFound, StoreError
from llog.metrics import Metrics
from llog.store.base import ObjectInfo, ObjectStore, check_key, check_range

_NOT_FOUND = {"NoSuchKey", "404", "NotFound"}
_DELETE_BATCH = 1000  # S3 DeleteObjects limit
#: Bodies below this go without ``Expect: 100-continue`` (the AWS SDK for Go's default).
EXPECT_CONTINUE_MIN_BYTES = 2 * 1024 * 1024


def _expect_continue_for_large_bodies(request: Any, **_: Any) -> None:
    """Ask for ``100 Continue`` before sending a large PutObject body only. The wait
    costs a round trip on the write path's critical path, and pays off only when a
    large body would be refused (a throttled or misconfigured request)."""
    size = determine_content_length(request.body)
    if size is not None and size >= EXPECT_CONTINUE_MIN_BYTES:
        request.headers["Expect"] = "100-continue"
    elif "Expect" in request.headers:
        del request.headers["Expect"]


@functools.cache
def _data_loader() -> Any:
    """botocore's loader of its data files, one per process: it keeps what it parsed,
    and parsing S3's service model again was ~80 % of making a client (0.11 CPU-s of
    0.13; every Connection to S3 makes one)."""
    return botocore.session.Session().get_component("data_loader")


def _session() -> Any:
    """A botocore session of its own (its own credentials) over the process's data loader."""
    session = botocore.session.Session()
    session.register_component("data_loader", _data_loader())
    return session


def warm_data_loader() -> None:
    """Parse what an S3 client is made from (S3's service model, endpoint rules,
    partitions) into the process's data loader now, connecting to nothing: processes
    forked from this one then make their clients without parsing it again (~0.2 of a
    forked broker worker's ~0.4 CPU-s to start)."""
    # Explicit (unused) credentials: the standard chain could ask the instance metadata service.
    _session().create_client("s3", region_name="us-east-1", aws_access_key_id="-", aws_secret_access_key="-")


def s3_client(endpoint_url: str | None, region: str | None, config: Config) -> Any:
    """An S3 client of a session of its own (credentials from the standard AWS chain,
    read when it is made) over the process's data loader."""
    return _session().create_client("s3", endpoint_url=endpoint_url, region_name=region or "us-east-1",
                                    config=config)


class S3Store(ObjectStore):
    """``s3://bucket/prefix``. Credentials come from the standard AWS chain
    (environment, profile, instance role); retries use botocore's standard mode. ``sse``:
    server-side encryption asked for on every PUT (``AES256``, or ``aws:kms`` with
    ``sse_kms_key_id`` or the bucket's default key)."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        max_attempts: int = 5,
        timeout_s: float = 60.0,
        max_pool_connections: int = 32,
        metrics: Metrics | None = None,
        client: Any = None,
        sse: str | None = None,
        sse_kms_key_id: str | None = None,
    ) -> None:
        super().__init__(metrics)
        self._sse: dict[str, str] = {} if sse is None else {"ServerSideEncryption": sse}
        if sse_kms_key_id is not None:
            self._sse["SSEKMSKeyId"] = sse_kms_key_id
        self.bucket = bucket
        self.max_attempts = max_attempts
        self.prefix = f"{prefix.strip('/')}/" if prefix.strip("/") else ""
        self.uri = f"s3://{bucket}/{self.prefix}"
        self._client = client or s3_client(endpoint_url, region, Config(
            retries={"max_attempts": max_attempts, "mode": "standard"},
            connect_timeout=timeout_s,
            read_timeout=timeout_s,
            max_pool_connections=max_pool_connections,
            s3={"addressing_style": "path"} if endpoint_url else None,
        ))
        self._client.meta.events.register(
            "before-sign.s3.PutObject", _expect_continue_for_large_bodies, unique_id="llog-expect-threshold"
        )
        # botocore wraps a bytes body in a BytesIO, then hashes it (SigV4 over http) and
        # sends it through 8 KiB reads, each one a copy. Left as bytes, it takes the path
        # botocore gives a bytearray body: one hash call and one sendall, about 0.8 ms
        # less CPU per 2 MiB PUT on the bench machine. Retries resend bytes as they are
        # (only file-like bodies need a rewind). botocore asks for 100 Continue only for
        # file-like bodies, so the handler above sets it for large ones itself.
        self._client.meta.events.unregister("before-parameter-build.s3.PutObject", convert_body_to_file_like_object)

    def _k(self, key: str) -> str:
        return self.prefix + check_key(key)

    def object_uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{self._k(key)}"

    def _error(self, exc: Exception, key: str, op: str) -> Exception:
        if isinstance(exc, ClientError):
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in _NOT_FOUND:
                return ObjectNotFound(key)
        return StoreError(f"S3 {op} of s3://{self.bucket}/{self._k(key)} failed: {exc}")

    def put(self, key: str, data: bytes, *, crc32: int | None = None) -> None:
        extra: dict[str, Any] = dict(self._sse)
        if crc32 is not None:
            extra["ChecksumCRC32"] = base64.b64encode(crc32.to_bytes(4, "big")).decode()
        with self._measure("put"):
            try:
                self._client.put_object(Bucket=self.bucket, Key=self._k(key), Body=data, **extra)
            except (ClientError, BotoCoreError) as exc:
                raise self._error(exc, key, "PUT") from exc
        self.metrics.s3_bytes.labels("in").inc(len(data))

    def _get_object(self, key: str, byte_range: str | None = None) -> bytes:
        """One GET with its body read whole. botocore retries a request that fails, but
        not a body cut off on the way (a connection dropped mid-body: an incomplete
        read, a reset, a read timeout); such a GET is sent again, up to
        ``max_attempts`` in all, since objects never change."""
        for attempt in range(1, self.max_attempts + 1):
            if byte_range is None:
                resp = self._client.get_object(Bucket=self.bucket, Key=self._k(key))
            else:
                resp = self._client.get_object(Bucket=self.bucket, Key=self._k(key), Range=byte_range)
            try:
                data: bytes = resp["Body"].read()
                return data
            except BotoCoreError:
                if attempt == self.max_attempts:
                    raise
                self.metrics.s3_ops.labels("body_retry").inc()
        raise AssertionError("unreachable")

    def get(self, key: str) -> bytes:
        with self._measure("get"):
            try:
                data = self._get_object(key)
            except (ClientError, BotoCoreError) as exc:
                raise self._error(exc, key, "GET") from exc
        self.metrics.s3_bytes.labels("out").inc(len(data))
        return data

    def get_upto(self, key: str, offset: int, length: int) -> bytes:
        check_range(key, offset, length)
        with self._measure("get_range"):
            try:
                data = self._get_object(key, f"bytes={offset}-{offset + length - 1}")
            except ClientError as exc:
                code = str(exc.response.get("Error", {}).get("Code", ""))
                if code == "InvalidRange":
                    raise StoreError(
                        f"range [{offset}, {offset + length}) is past the end of {key}"
                    ) from exc
                raise self._error(exc, key, "range GET") from exc
            except BotoCoreError as exc:
                raise self._error(exc, key, "range GET") from exc
        self.metrics.s3_bytes.labels("out").inc(len(data))
        return data

    def head(self, key: str) -> ObjectInfo | None:
        with self._measure("head"):
            try:
                resp = self._client.head_object(Bucket=self.bucket, Key=self._k(key))
            except ClientError as exc:
                err = self._error(exc, key, "HEAD")
                if isinstance(err, ObjectNotFound):
                    return None
                raise err from exc
            except BotoCoreError as exc:
                raise self._error(exc, key, "HEAD") from exc
        return ObjectInfo(key, int(resp["ContentLength"]), resp["LastModified"].timestamp())

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        paginator = self._client.get_paginator("list_objects_v2")
        cut = len(self.prefix)
        try:
            for page in paginator.paginate(Bucket=self.bucket, Prefix=self.prefix + prefix):
                self.metrics.s3_ops.labels("list").inc()
                for obj in page.get("Contents", []):
                    yield ObjectInfo(
                        obj["Key"][cut:], int(obj["Size"]), obj["LastModified"].timestamp()
                    )
        except (ClientError, BotoCoreError) as exc:
            # Not _error(): a listing prefix ends in "/", which is no valid object key.
            raise StoreError(f"S3 LIST of s3://{self.bucket}/{self.prefix}{prefix} failed: {exc}") from exc

    def delete(self, keys: Iterable[str]) -> int:
        batch: builtins.list[str] = []
        n = 0
        for key in keys:
            batch.append(self._k(key))
            if len(batch) == _DELETE_BATCH:
                n += self._delete_batch(batch)
                batch = []
        if batch:
            n += self._delete_batch(batch)
        return n

    def _delete_batch(self, keys: builtins.list[str]) -> int:
        with self._measure("delete"):
            try:
                resp = self._client.delete_objects(
                    Bucket=self.bucket,
                    Delete={"Objects": [{"Key": k} for k in keys], "Quiet": True},
                )
            except (ClientError, BotoCoreError) as exc:
                raise StoreError(f"S3 DeleteObjects in {self.bucket} failed: {exc}") from exc
        errors = resp.get("Errors") or []
        if errors:
            raise StoreError(f"S3 DeleteObjects failed for {len(errors)} keys: {errors[:3]}")
        return len(keys)

    def create_bucket(self) -> None:
        """Create the bucket if it is missing (dev stacks and tests)."""
        try:
            self._client.head_bucket(Bucket=self.bucket)
        except ClientError:
            self._client.create_bucket(Bucket=self.bucket)

    def close(self) -> None:
        self._client.close()
