"""The error hierarchy: every class in llog/errors.py is exported, says whether to
retry, and the broker's status for it follows from that."""

from __future__ import annotations

import inspect

import pytest

import llog
import llog.errors as errors
from llog.broker.statuses import error_status
from llog.errors import (
    AmbiguousCommit,
    BackPressure,
    BackwardsCommit,
    CasConflict,
    ClaimConflict,
    ClaimLost,
    ConfigError,
    CoordinationError,
    CorruptBlob,
    CorruptMetadata,
    EtcdSpaceExhausted,
    Fenced,
    HistoryCompacted,
    InvalidRequest,
    InvalidTopicName,
    LlogError,
    ObjectNotFound,
    OffsetOutOfRange,
    ProducerFenced,
    SequenceError,
    SequenceReused,
    SessionExpired,
    StoreError,
    TooManyUncompactedKeys,
    UnknownPartition,
    UnknownTopic,
)

CLASSES = [c for _, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, LlogError)]


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_every_error_is_exported_and_says_whether_to_retry(cls: type[LlogError]) -> None:
    assert cls.__module__ == "llog.errors"
    assert getattr(llog, cls.__name__) is cls and cls.__name__ in llog.__all__
    assert isinstance(cls.retriable, bool)


def test_moved_errors_keep_their_old_import_paths() -> None:
    import compactor
    from llog.broker.schemas import InvalidRequest as FromSchemas

    assert compactor.ClaimConflict is ClaimConflict and compactor.ClaimLost is ClaimLost
    assert FromSchemas is InvalidRequest


# (error, retriable, the broker's status for a request whose one partition failed so)
CASES = [
    (CoordinationError("etcd down"), True, 503),
    (HistoryCompacted("k", 7), True, 503),
    (EtcdSpaceExhausted("put", "quota"), False, 503),  # an outage only an operator ends
    (AmbiguousCommit("unknown"), False, 504),  # safe to resend only idempotently
    (StoreError("S3 down"), True, 503),
    (ObjectNotFound("k"), False, 409),
    (BackPressure("full"), True, 503),
    (TooManyUncompactedKeys("t", 0, 9, 8), True, 503),
    (SessionExpired("t", 0, "s", "k"), True, 503),
    (CasConflict("x", 5), True, 409),  # contention: HTTP's Conflict, though retriable
    (Fenced("t", 0), False, 409),
    (UnknownTopic("t"), False, 409),
    (UnknownPartition("t", 9, 4), False, 409),
    (OffsetOutOfRange("t", 0, 1, 5), False, 409),
    (SequenceError("t", 0, "p", 1, 3), False, 409),
    (SequenceReused("t", 0, "p", 1, 10, 12), False, 409),  # other records under a used sequence
    (ProducerFenced("t", 0, "p", 1, 2), False, 409),
    (BackwardsCommit("g", "t", 0, 1, "backwards"), False, 409),
    (CorruptBlob("k", 0, 1, "crc"), False, 409),
    (CorruptMetadata("k", "bad"), False, 409),
    (InvalidTopicName("a/b"), False, 409),
    (InvalidRequest("body", "bad"), False, 409),
    (ConfigError("bad"), False, 409),
    (ClaimConflict("t", 0, "other"), False, 409),
    (ClaimLost("t", 0), False, 409),
]


@pytest.mark.parametrize(("exc", "retriable", "status"), CASES, ids=lambda v: type(v).__name__)
def test_retriable_and_status(exc: LlogError, retriable: bool, status: int) -> None:
    assert exc.retriable is retriable
    assert error_status(exc) == status


def test_topic_name_message_names_the_rule() -> None:
    assert str(InvalidTopicName("a/b")) == "invalid topic name 'a/b': must match [A-Za-z0-9._-]{1,249}"
