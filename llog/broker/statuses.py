"""How the broker answers llog errors: one HTTP status per error class, one
per-partition result shape, one status for a request whose partitions failed.

* 503 (with ``Retry-After``): nothing was written and the same request can be sent
  again as is — the error is ``retriable`` (see :mod:`llog.errors`): etcd or the object
  store cannot be reached, back-pressure, or the writer's session expired
  (:class:`SessionExpired`: nothing of it was committed). Also etcd out of space
  (:class:`EtcdSpaceExhausted`, not retriable): the service is unavailable until an
  operator frees space, and a client should treat it as an outage.
* 504: the commit's outcome is unknown (:class:`AmbiguousCommit`); the records may or
  may not be in the log. Resend with the same ``producer_id``/``sequence`` to resolve
  it without a duplicate.
* 403: the authorizer refused the caller (:class:`NotAuthorized`; ``LLOG_AUTH_ACLS``).
* 409: a real refusal (fenced, unknown topic, out-of-order sequence, refused commit, …)
  that the same request would meet again. Also :class:`CasConflict`, though retriable:
  it is contention with other writers, which is what HTTP's Conflict means.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from llog.broker.api_types import PartitionResult
from llog.errors import AmbiguousCommit, CasConflict, EtcdSpaceExhausted, LlogError, NotAuthorized

#: Seconds a client should wait before resending a request answered 503.
RETRY_AFTER_S = 1


def error_status(exc: LlogError) -> int:
    """The status one partition's error alone would answer: 503, 504, 403 or 409."""
    if isinstance(exc, NotAuthorized):
        return 403
    if isinstance(exc, AmbiguousCommit):
        return 504
    if isinstance(exc, CasConflict):
        return 409
    if exc.retriable or isinstance(exc, EtcdSpaceExhausted):
        return 503
    return 409


R = TypeVar("R", bound=PartitionResult)


def partition_error(cls: type[R], topic: str, partition: int, exc: LlogError) -> R:
    """The result entry (of type ``cls``) of a partition that failed."""
    return cls(topic=topic, partition=partition, ok=False, error_type=type(exc).__name__, error=str(exc))


def request_status(errors: Sequence[LlogError], total: int) -> int:
    """The status of a request over ``total`` partitions of which ``errors`` failed:
    200 when none did; 503 or 504 when every partition failed and none for a reason
    that would recur (so the whole request can be resent); 403 when every partition
    failed and one was refused by the authorizer; else 409 — the results say which
    partitions succeeded, and resending those would append them twice."""
    if not errors:
        return 200
    statuses = {error_status(e) for e in errors}
    if len(errors) < total or 409 in statuses:
        return 409
    if 403 in statuses:
        return 403
    return 504 if 504 in statuses else 503


def retry_headers(status: int) -> dict[str, str]:
    """``Retry-After`` on a 503, nothing otherwise."""
    return {"retry-after": str(RETRY_AFTER_S)} if status == 503 else {}
