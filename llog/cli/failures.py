"""One-line messages for what ends a command: an unreachable etcd or object store
names the endpoint and the setting to change; any other llog error or OS error is its
own message on one line."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
from botocore.exceptions import ConnectionError as BotoConnectionError
from botocore.exceptions import NoCredentialsError

from llog.config import LlogConfig
from llog.errors import AmbiguousCommit, CoordinationError, StoreError

_UNREACHABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}


def _causes(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        yield cur
        cur = cur.__cause__ or cur.__context__


def _etcd_unreachable(exc: BaseException) -> bool:
    return any(isinstance(c, grpc.RpcError) and getattr(c, "code", lambda: None)() in _UNREACHABLE
               for c in _causes(exc))


def describe(exc: BaseException, config: LlogConfig | None) -> str:
    """The one line the CLI prints for ``exc`` (``config``: the settings the command
    ran with, if they could be built)."""
    if config is not None:
        # An ambiguous commit keeps its own message: it says what to retry.
        if isinstance(exc, CoordinationError) and not isinstance(exc, AmbiguousCommit) and _etcd_unreachable(exc):
            return (f"cannot reach etcd at {','.join(config.etcd_endpoints)} "
                    "(set --etcd or LLOG_ETCD_ENDPOINTS)")
        if isinstance(exc, StoreError):
            causes = list(_causes(exc))
            if any(isinstance(c, BotoConnectionError) for c in causes):
                where = config.s3_endpoint_url or "the AWS default endpoint"
                return (f"cannot reach the object store {config.object_store} at {where} "
                        "(set --store or LLOG_OBJECT_STORE, and LLOG_S3_ENDPOINT_URL)")
            if any(isinstance(c, NoCredentialsError) for c in causes):
                return (f"no S3 credentials for the object store {config.object_store} "
                        "(set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or an AWS profile)")
    return " ".join(str(exc).split()) or type(exc).__name__
