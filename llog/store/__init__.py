"""Object stores: one interface (:class:`ObjectStore`), an S3 backend and a local
directory backend (:func:`open_store` picks one from a URI), hedged PUTs, and where a
reader gets blob bytes besides the store: the WAL blob cache (:mod:`.blob_cache`) and
the brokers that wrote the blobs (:mod:`.peers`); what requests cost (:mod:`.billing`)."""

from __future__ import annotations

from llog.config import LlogConfig
from llog.errors import ConfigError
from llog.metrics import Metrics
from llog.store.base import ObjectInfo, ObjectStore
from llog.store.local import LocalStore

__all__ = ["LocalStore", "ObjectInfo", "ObjectStore", "open_store"]


def open_store(config: LlogConfig, metrics: Metrics | None = None) -> ObjectStore:
    """Open the store named by ``config.object_store`` (``s3://bucket[/prefix]``,
    ``file:///path`` or a plain directory path)."""
    uri = config.object_store
    if uri.startswith("s3://"):
        from llog.store.s3 import S3Store

        rest = uri[len("s3://") :]
        bucket, _, prefix = rest.partition("/")
        if not bucket:
            raise ConfigError(f"object store URI {uri!r} names no bucket")
        return S3Store(
            bucket,
            prefix=prefix.strip("/"),
            endpoint_url=config.s3_endpoint_url,
            region=config.s3_region,
            max_attempts=config.s3_max_attempts,
            timeout_s=config.s3_timeout_s,
            metrics=metrics,
            sse=config.s3_sse,
            sse_kms_key_id=config.s3_sse_kms_key_id,
        )
    if uri.startswith("file://"):
        return LocalStore(uri[len("file://") :], metrics=metrics)
    if "://" in uri:
        raise ConfigError(f"unsupported object store URI {uri!r} (use s3:// or file://)")
    return LocalStore(uri, metrics=metrics)
