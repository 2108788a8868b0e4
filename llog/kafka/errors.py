"""Kafka error codes, and the one mapping from llog's errors to them."""

from __future__ import annotations

import logging
from enum import IntEnum

from llog.codec.kafka_body import (
    BatchTooLarge,
    InvalidRecordBatch,
    KafkaBatchError,
    UnsupportedCompression,
    UnsupportedMessageFormat,
)
from llog.errors import (
    AmbiguousCommit,
    BackPressure,
    CommitRejected,
    ConcurrentTransactions,
    CoordinationError,
    CorruptBlob,
    Fenced,
    InvalidInput,
    InvalidPartition,
    InvalidProducerIdMapping,
    InvalidTopicName,
    InvalidTransactionTimeout,
    InvalidTxnState,
    KeyRequired,
    LlogError,
    NotAuthorized,
    OffsetOutOfRange,
    ProducerClosed,
    ProducerFenced,
    RecordTooLarge,
    SchemaViolation,
    SequenceError,
    SessionExpired,
    StaleEpoch,
    StoreError,
    TopicConflict,
    TransactionFenced,
    TransactionTooLarge,
    UnknownPartition,
    UnknownTopic,
    UnknownTransactionalId,
)

log = logging.getLogger(__name__)


class ErrorCode(IntEnum):
    """The codes llog answers with (Apache Kafka's numbering)."""

    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    MESSAGE_TOO_LARGE = 10
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_CONFIG = 40
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    KAFKA_STORAGE_ERROR = 56
    UNKNOWN_SERVER_ERROR = -1
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    MEMBER_ID_REQUIRED = 79
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    UNKNOWN_TOPIC_ID = 100
    TRANSACTIONAL_ID_NOT_FOUND = 105


#: llog's errors and the Kafka code each answers with, most specific first. Retriable
#: codes where the client's retry is the right answer: an outage, back-pressure, an
#: unknown commit outcome (an idempotent producer resolves it by resending), a fence
#: (the client refreshes metadata and retries).
_CODES: tuple[tuple[type[BaseException] | tuple[type[BaseException], ...], ErrorCode], ...] = (
    ((UnknownTopic, UnknownPartition, InvalidPartition), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    (OffsetOutOfRange, ErrorCode.OFFSET_OUT_OF_RANGE),
    (InvalidTopicName, ErrorCode.INVALID_TOPIC_EXCEPTION),
    ((RecordTooLarge, BatchTooLarge), ErrorCode.MESSAGE_TOO_LARGE),
    (TopicConflict, ErrorCode.TOPIC_ALREADY_EXISTS),
    # A sequence reused for other records is 45 too, never 46: every client counts
    # DUPLICATE_SEQUENCE_NUMBER as delivered, and those records were not stored.
    (SequenceError, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER),
    (ProducerFenced, ErrorCode.INVALID_PRODUCER_EPOCH),
    (TransactionFenced, ErrorCode.PRODUCER_FENCED),
    ((InvalidTxnState, TransactionTooLarge), ErrorCode.INVALID_TXN_STATE),
    (InvalidProducerIdMapping, ErrorCode.INVALID_PRODUCER_ID_MAPPING),
    (InvalidTransactionTimeout, ErrorCode.INVALID_TRANSACTION_TIMEOUT),
    (ConcurrentTransactions, ErrorCode.CONCURRENT_TRANSACTIONS),
    (UnknownTransactionalId, ErrorCode.TRANSACTIONAL_ID_NOT_FOUND),
    (StaleEpoch, ErrorCode.ILLEGAL_GENERATION),
    (CommitRejected, ErrorCode.INVALID_COMMIT_OFFSET_SIZE),
    (CorruptBlob, ErrorCode.KAFKA_STORAGE_ERROR),
    # A broker that is stopping: the client asks for Metadata and goes to another.
    ((Fenced, ProducerClosed), ErrorCode.NOT_LEADER_OR_FOLLOWER),
    ((AmbiguousCommit, BackPressure, CoordinationError, StoreError, SessionExpired), ErrorCode.REQUEST_TIMED_OUT),
    (UnsupportedCompression, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE),
    (UnsupportedMessageFormat, ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT),
    ((InvalidRecordBatch, KeyRequired, SchemaViolation), ErrorCode.INVALID_RECORD),
    (KafkaBatchError, ErrorCode.CORRUPT_MESSAGE),
    (InvalidInput, ErrorCode.INVALID_REQUEST),
)


#: Refusals of the authorizer, by the resource type it names.
_NOT_AUTHORIZED = {"Topic": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Group": ErrorCode.GROUP_AUTHORIZATION_FAILED,
                   "Cluster": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                   "TransactionalId": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}


def error_code(exc: BaseException) -> ErrorCode:
    """The code a client should see for ``exc``."""
    if isinstance(exc, NotAuthorized):
        return _NOT_AUTHORIZED.get(exc.resource_type, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    for kinds, code in _CODES:
        if isinstance(exc, kinds):
            return code
    if isinstance(exc, LlogError) and exc.retriable:
        return ErrorCode.REQUEST_TIMED_OUT
    # No code of its own: the client learns nothing from it, so the log must.
    log.warning("answering UNKNOWN_SERVER_ERROR for %s: %s", type(exc).__name__, exc)
    return ErrorCode.UNKNOWN_SERVER_ERROR
