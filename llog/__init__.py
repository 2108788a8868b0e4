"""llog: a leaderless log on object storage.

Writers pack records for many partitions into one shared WAL blob in S3, then commit
each partition's offsets with compare-and-swap transactions in etcd. Readers resolve an
offset through a ceiling lookup on the partition's index and an S3 range GET.

    >>> import llog                                               # doctest: +SKIP
    >>> with llog.connect() as conn:
    ...     llog.Topics(conn).create("orders", partitions=4)
    ...     with llog.Writer(conn) as w:
    ...         w.append("orders", 0, [b"hello", b"world"])
    ...     with llog.Reader(conn) as r:
    ...         [rec.value for rec in r.scan("orders", 0)]
"""

import os

# grpcio >= 1.80 runs fork handlers that can abort a child forked while a channel is busy
# (grpc/grpc#43055): a subprocess started with preexec_fn, as PySpark starts its JVM,
# died before exec about 1 time in 15 with etcd calls running. llog never uses a channel
# across a fork, so the handlers go off unless the user chose; set before grpc loads.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

from llog.config import LlogConfig
from llog.connection import Connection, connect
from llog.errors import (
    AmbiguousCommit,
    BackPressure,
    BackwardsCommit,
    CasConflict,
    ClaimConflict,
    ClaimLost,
    CommitOutOfRange,
    CommitRejected,
    ConcurrentTransactions,
    ConfigError,
    CoordinationError,
    CorruptBlob,
    CorruptMetadata,
    EtcdSpaceExhausted,
    Fenced,
    GroupNotEmpty,
    HistoryCompacted,
    IncompatibleSchema,
    InvalidCompatibilityLevel,
    InvalidInput,
    InvalidPartition,
    InvalidProducerIdMapping,
    InvalidRecord,
    InvalidRequest,
    InvalidSchema,
    InvalidTopicName,
    InvalidTransactionTimeout,
    InvalidTxnState,
    InvalidVersion,
    KeyRequired,
    LlogError,
    NotAssigned,
    NotAuthorized,
    ObjectNotFound,
    OffsetOutOfRange,
    ProducerClosed,
    ProducerFenced,
    RecordTooLarge,
    ReferenceExists,
    SchemaNotFound,
    SchemaRegistryError,
    SchemaViolation,
    SequenceError,
    SequenceReused,
    SessionExpired,
    StaleEpoch,
    StoreError,
    SubjectConfigNotFound,
    SubjectNotFound,
    SubjectNotSoftDeleted,
    SubjectSoftDeleted,
    TableError,
    TooManyUncompactedKeys,
    TopicConflict,
    TransactionError,
    TransactionFenced,
    TransactionTooLarge,
    UnknownPartition,
    UnknownTopic,
    UnknownTransactionalId,
    UnknownUser,
    UserExists,
    VersionNotFound,
    VersionNotSoftDeleted,
    VersionSoftDeleted,
)
from llog.reader import Reader
from llog.records import AppendGroup, ConsumedRecord, Record
from llog.registry import SchemaRegistry
from llog.topic.admin import PartitionInfo, TopicDescription, Topics
from llog.txn.transaction import Transaction
from llog.version import __version__
from llog.writer import AppendFailure, AppendResult, Writer

__all__ = [
    "AmbiguousCommit",
    "AppendFailure",
    "AppendGroup",
    "AppendResult",
    "BackPressure",
    "BackwardsCommit",
    "CasConflict",
    "ClaimConflict",
    "ClaimLost",
    "CommitOutOfRange",
    "CommitRejected",
    "ConcurrentTransactions",
    "ConfigError",
    "Connection",
    "ConsumedRecord",
    "CoordinationError",
    "CorruptBlob",
    "CorruptMetadata",
    "EtcdSpaceExhausted",
    "Fenced",
    "GroupNotEmpty",
    "HistoryCompacted",
    "IncompatibleSchema",
    "InvalidCompatibilityLevel",
    "InvalidInput",
    "InvalidPartition",
    "InvalidProducerIdMapping",
    "InvalidRecord",
    "InvalidRequest",
    "InvalidSchema",
    "InvalidTopicName",
    "InvalidTransactionTimeout",
    "InvalidTxnState",
    "InvalidVersion",
    "KeyRequired",
    "LlogConfig",
    "LlogError",
    "NotAssigned",
    "NotAuthorized",
    "ObjectNotFound",
    "OffsetOutOfRange",
    "PartitionInfo",
    "ProducerClosed",
    "ProducerFenced",
    "Reader",
    "Record",
    "RecordTooLarge",
    "ReferenceExists",
    "SchemaNotFound",
    "SchemaRegistry",
    "SchemaRegistryError",
    "SchemaViolation",
    "SequenceError",
    "SequenceReused",
    "SessionExpired",
    "StaleEpoch",
    "StoreError",
    "SubjectConfigNotFound",
    "SubjectNotFound",
    "SubjectNotSoftDeleted",
    "SubjectSoftDeleted",
    "TableError",
    "TooManyUncompactedKeys",
    "TopicConflict",
    "TopicDescription",
    "Topics",
    "Transaction",
    "TransactionError",
    "TransactionFenced",
    "TransactionTooLarge",
    "UnknownPartition",
    "UnknownTopic",
    "UnknownTransactionalId",
    "UnknownUser",
    "UserExists",
    "VersionNotFound",
    "VersionNotSoftDeleted",
    "VersionSoftDeleted",
    "Writer",
    "__version__",
    "connect",
]
