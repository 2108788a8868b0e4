"""The one error hierarchy of llog.

Every error raised on purpose by llog derives from :class:`LlogError` and carries the
topic/partition/offset or object key that explains it, so callers can both branch on
the type and log a useful message.

Every class says whether to retry through its ``retriable`` class attribute: ``True``
when nothing was done and the very same call, made again later, may succeed and
cannot do harm — an outage of etcd (:class:`CoordinationError`) or of the object
store (:class:`StoreError`), back-pressure (:class:`BackPressure`), an expired writer
session (:class:`SessionExpired`), a compare-and-swap that lost to other writers too
often (:class:`CasConflict`). ``False`` for everything else: malformed input, a
definite refusal (fenced, unknown topic, out-of-order sequence, refused offset
commit), missing or corrupt data, and the two outcomes a blind retry cannot fix:

* :class:`EtcdSpaceExhausted` — etcd refuses every write until an operator frees space;
* :class:`AmbiguousCommit` — the append may have been committed, so a retry is safe only
  as an idempotent one (the same ``producer_id``/``sequence``), which the caller must
  choose knowingly.

A subclass inherits its parent's answer unless it says otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from llog.name_rules import NAME_PATTERN


class LlogError(Exception):
    """Root of every error llog raises on purpose."""

    #: Whether the same call may succeed if made again later (see the module docstring).
    retriable: ClassVar[bool] = False


class InvalidInput(LlogError, ValueError):
    """A request is malformed: nothing was written."""


class InvalidTopicName(InvalidInput):
    def __init__(self, topic: object) -> None:
        super().__init__(f"invalid topic name {topic!r}: must match {NAME_PATTERN}")
        self.topic = topic


class InvalidPartition(InvalidInput):
    def __init__(self, topic: str, partition: object) -> None:
        super().__init__(f"invalid partition {partition!r} for topic {topic!r}: must be an int >= 0")
        self.topic = topic
        self.partition = partition


class InvalidRecord(InvalidInput):
    """A record's value/key/headers/timestamp has the wrong type or shape."""


class SchemaViolation(InvalidRecord):
    """A produced value that the topic's schema refuses (``value_validation = refuse``,
    spec §14.1); nothing of the batch was stored."""

    def __init__(self, topic: str, partition: int, index: int, reason: str, bad: int, count: int) -> None:
        super().__init__(f"{topic}/{partition}: record {index} of the batch does not match the schema of "
                         f"subject {topic}-value ({reason}); {bad} of {count} refused, none stored")
        self.topic, self.partition, self.index, self.reason = topic, partition, index, reason


class KeyRequired(InvalidRecord):
    """A record without a key for a compacted topic (``cleanup.policy`` compact), where
    the key is what compaction keeps the latest record of."""

    def __init__(self, topic: str, partition: int) -> None:
        super().__init__(f"{topic}/{partition} is a compacted topic: every record needs a key")
        self.topic, self.partition = topic, partition


class RecordTooLarge(InvalidInput):
    def __init__(self, topic: str, partition: int, size: int, limit: int) -> None:
        super().__init__(
            f"record of {size} bytes for {topic}/{partition} exceeds the limit of {limit} bytes"
        )
        self.topic = topic
        self.partition = partition
        self.size = size
        self.limit = limit


class UnknownTopic(LlogError):
    def __init__(self, topic: str) -> None:
        super().__init__(f"unknown topic {topic!r}")
        self.topic = topic


class UnknownUser(LlogError):
    def __init__(self, user: str) -> None:
        super().__init__(f"unknown user {user!r}")
        self.user = user


class UserExists(InvalidInput):
    def __init__(self, user: str) -> None:
        super().__init__(f"user {user!r} already exists (llog users passwd changes a password)")
        self.user = user


class NotAuthorized(LlogError):
    """The authorizer (``LLOG_AUTH_ACLS``) denies ``principal`` ``operation`` on a
    resource (``resource_type`` ``topic``, ``group``, ``cluster`` or ``transactional_id``)."""

    def __init__(self, principal: str, operation: str, resource_type: str, resource: str) -> None:
        super().__init__(f"{principal} may not {operation} {resource_type} {resource!r}")
        self.principal, self.operation = principal, operation
        self.resource_type, self.resource = resource_type, resource


class UnknownPartition(LlogError):
    def __init__(self, topic: str, partition: int, partitions: int) -> None:
        super().__init__(
            f"partition {partition} does not exist in topic {topic!r} "
            f"(it has {partitions} partitions)"
        )
        self.topic = topic
        self.partition = partition
        self.partitions = partitions


class TopicConflict(LlogError):
    """A topic exists with a different definition than the one requested."""


class OffsetOutOfRange(LlogError):
    def __init__(self, topic: str, partition: int, offset: int, log_start_offset: int) -> None:
        super().__init__(
            f"offset {offset} of {topic}/{partition} is below log start offset {log_start_offset}"
        )
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.log_start_offset = log_start_offset


class Fenced(LlogError):
    def __init__(self, topic: str, partition: int) -> None:
        super().__init__(f"partition {topic}/{partition} is fenced: appends are rejected")
        self.topic = topic
        self.partition = partition


class CasConflict(LlogError):
    """A compare-and-swap lost too many times in a row; nothing was committed."""

    retriable = True

    def __init__(self, what: str, attempts: int) -> None:
        super().__init__(f"compare-and-swap on {what} lost {attempts} times; giving up")
        self.what = what
        self.attempts = attempts


class BackPressure(LlogError):
    """The system refuses more work for now; retry later. Nothing was accepted."""

    retriable = True


class ProducerClosed(LlogError):
    """The producer was closed (its broker is stopping): nothing was accepted; send it
    again, to another broker."""

    retriable = True

    def __init__(self, topic: str, partition: int) -> None:
        super().__init__(f"producer is closed; {topic}/{partition} not accepted")
        self.topic, self.partition = topic, partition


class CorruptBlob(LlogError):
    def __init__(self, key: str, offset: int, length: int, reason: str) -> None:
        super().__init__(f"corrupt data in {key} bytes [{offset}, {offset + length}): {reason}")
        self.key = key
        self.offset = offset
        self.length = length
        self.reason = reason


class TableError(LlogError):
    """A table topic's Iceberg catalog or table could not be read or committed to."""

    retriable = True

    def __init__(self, topic: str, reason: str) -> None:
        super().__init__(f"Iceberg table of topic {topic!r}: {reason}")
        self.topic = topic
        self.reason = reason


class SchemaRegistryError(LlogError):
    """A schema registry refusal (llog/registry/), with Confluent's ``error_code``: its
    first three digits are the HTTP status the registry's REST API answers with."""

    error_code = 50001

    def __init__(self, message: str) -> None:
        super().__init__(message)

    @property
    def http_status(self) -> int:
        return int(str(self.error_code)[:3])


class SubjectNotFound(SchemaRegistryError):
    error_code = 40401

    def __init__(self, subject: str) -> None:
        super().__init__(f"Subject '{subject}' not found.")
        self.subject = subject


class VersionNotFound(SchemaRegistryError):
    error_code = 40402

    def __init__(self, subject: str, version: int | str) -> None:
        super().__init__(f"Version {version} not found for subject '{subject}'.")
        self.subject, self.version = subject, version


class SchemaNotFound(SchemaRegistryError):
    error_code = 40403


class SubjectSoftDeleted(SchemaRegistryError):
    """A soft delete of a subject whose versions are all soft-deleted already."""

    error_code = 40404


class SubjectNotSoftDeleted(SchemaRegistryError):
    """A permanent delete of a subject that was not soft-deleted first."""

    error_code = 40405


class VersionSoftDeleted(SchemaRegistryError):
    """A soft delete of a version that is soft-deleted already."""

    error_code = 40406


class VersionNotSoftDeleted(SchemaRegistryError):
    """A permanent delete of a version that was not soft-deleted first."""

    error_code = 40407


class SubjectConfigNotFound(SchemaRegistryError):
    error_code = 40408

    def __init__(self, subject: str) -> None:
        super().__init__(f"Subject '{subject}' does not have subject-level compatibility configured")
        self.subject = subject


class IncompatibleSchema(SchemaRegistryError):
    """The schema breaks the subject's compatibility level; ``messages`` say how."""

    error_code = 409

    def __init__(self, subject: str, level: str, messages: list[str]) -> None:
        super().__init__(f"Schema being registered is incompatible with an earlier schema for subject "
                         f"'{subject}' ({level}): " + "; ".join(messages))
        self.subject, self.level, self.messages = subject, level, messages


class InvalidSchema(SchemaRegistryError):
    error_code = 42201


class InvalidVersion(SchemaRegistryError):
    error_code = 42202

    def __init__(self, version: str) -> None:
        super().__init__(f"The specified version '{version}' is not a valid version id. Allowed values are "
                         "between [1, 2^31-1] and the string \"latest\"")


class InvalidCompatibilityLevel(SchemaRegistryError):
    error_code = 42203


class ReferenceExists(SchemaRegistryError):
    """A schema other schemas reference cannot be deleted."""

    error_code = 42206


class CorruptMetadata(LlogError):
    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"corrupt metadata at etcd key {key}: {reason}")
        self.key = key
        self.reason = reason


class StoreError(LlogError):
    """The object store failed an operation (after its own retries)."""

    retriable = True


class ObjectNotFound(StoreError):
    """The object is not there: that is the store's content, not an outage."""

    retriable = False

    def __init__(self, key: str) -> None:
        super().__init__(f"object {key} not found")
        self.key = key


class CoordinationError(LlogError):
    """etcd failed an operation (unavailable, timeout) after retries."""

    retriable = True


class AmbiguousCommit(CoordinationError):
    """A commit's outcome could not be determined; the append may or may not exist.
    Retry it with the same ``producer_id``/``sequence`` to resolve it without a duplicate.
    Not ``retriable``: a blind retry of a non-idempotent append may write it twice."""

    retriable = False

    def __init__(
        self, message: str, *, topic: str | None = None, partition: int | None = None, append_id: str | None = None
    ) -> None:
        super().__init__(message)
        self.topic = topic
        self.partition = partition
        self.append_id = append_id


class SessionExpired(LlogError):
    """The session a blob was written under ended (its lease expired or was revoked)
    before the blob's commit: the commit can never succeed, and nothing of the group
    was committed. Retriable: write the records again (a new blob, a new session)."""

    retriable = True

    def __init__(self, topic: str, partition: int, session_id: str, data_key: str) -> None:
        super().__init__(
            f"session {session_id} of blob {data_key} expired before its commit to "
            f"{topic}/{partition}: nothing of it was committed; write it again"
        )
        self.topic = topic
        self.partition = partition
        self.session_id = session_id
        self.data_key = data_key


class InvalidRequest(InvalidInput):
    """A broker request body is malformed; ``field`` names the part at fault."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class ConfigError(LlogError, ValueError):
    """A configuration value is missing or malformed."""


class CommitRejected(LlogError):
    """A consumer-group offset commit was refused; the committed offset is unchanged."""

    def __init__(self, group: str, topic: str, partition: int, offset: int, reason: str) -> None:
        super().__init__(f"commit of offset {offset} for group {group!r} on {topic}/{partition} rejected: {reason}")
        self.group = group
        self.topic = topic
        self.partition = partition
        self.offset = offset


class GroupNotEmpty(InvalidInput):
    """A group with live members cannot be deleted (nor its offsets): a member could
    commit what was just deleted (Kafka's ``NON_EMPTY_GROUP``)."""

    def __init__(self, group: str, members: Sequence[str]) -> None:
        super().__init__(f"group {group!r} has {len(members)} live member(s) ({', '.join(members[:3])}"
                         f"{', ...' if len(members) > 3 else ''}): stop its consumers first")
        self.group = group
        self.members = tuple(members)


class BackwardsCommit(CommitRejected):
    """The offset is below the committed one and the commit is not an explicit reset."""


class CommitOutOfRange(CommitRejected):
    """The offset is past what was delivered to the application (or past the log's end)."""


class StaleEpoch(CommitRejected):
    """An exclusive consumer from an older epoch (a zombie) tried to commit."""


class NotAssigned(CommitRejected):
    """The member does not own the partition (any more)."""


class SequenceError(LlogError):
    """An idempotent producer's sequence number is out of order for the partition."""

    def __init__(self, topic: str, partition: int, producer_id: str, expected: int, got: int) -> None:
        super().__init__(
            f"producer {producer_id!r} sent sequence {got} to {topic}/{partition}; expected {expected}"
        )
        self.topic = topic
        self.partition = partition
        self.producer_id = producer_id
        self.expected = expected
        self.got = got


class SequenceReused(SequenceError):
    """An idempotent producer sent a batch under a sequence it already used for another
    batch (other records, or another count): not a retry. Refused, so the records of
    the first batch stay the only ones under that sequence."""

    def __init__(
        self, topic: str, partition: int, producer_id: str, sequence: int, start_offset: int, end_offset: int
    ) -> None:
        LlogError.__init__(
            self,
            f"producer {producer_id!r} sent sequence {sequence} to {topic}/{partition} with other records than "
            f"the batch it committed under that sequence (offsets {start_offset}..{end_offset}): not a retry",
        )
        self.topic = topic
        self.partition = partition
        self.producer_id = producer_id
        self.expected = sequence
        self.got = sequence
        self.start_offset = start_offset
        self.end_offset = end_offset


class ProducerFenced(LlogError):
    """A batch of an idempotent producer's older epoch, after a newer epoch committed
    to the partition: a zombie instance of the producer, refused."""

    def __init__(self, topic: str, partition: int, producer_id: str, epoch: int, current: int) -> None:
        super().__init__(
            f"producer {producer_id!r} sent epoch {epoch} to {topic}/{partition}, which has seen epoch {current}: "
            "an older instance of the producer is fenced"
        )
        self.topic = topic
        self.partition = partition
        self.producer_id = producer_id
        self.epoch = epoch
        self.current = current


class EtcdSpaceExhausted(CoordinationError):
    """etcd refused a write: its database reached ``--quota-backend-bytes`` (the NOSPACE
    alarm). The write was definitely not applied; nothing will be until an operator
    frees space, so retrying is useless."""

    retriable = False

    FIX = (
        "compact etcd's history, defragment, then disarm the alarm: "
        "`llog etcd compact && llog etcd defrag && llog etcd disarm` "
        "(or `etcdctl compact <rev>`, `etcdctl defrag`, `etcdctl alarm disarm`)"
    )

    def __init__(self, op: str, detail: str) -> None:
        super().__init__(f"etcd {op} refused, database space exceeded ({detail}); fix: {self.FIX}")
        self.op = op


class TooManyUncompactedKeys(BackPressure):
    """A partition holds more uncompacted index keys than ``LLOG_MAX_UNCOMPACTED_KEYS``:
    the writer refuses appends to it (nothing was written) until compaction catches up.
    Retriable: retry after a while, or start the compactor."""

    def __init__(self, topic: str, partition: int, count: int, bound: int) -> None:
        super().__init__(
            f"{topic}/{partition} has {count} uncompacted index keys, above the bound of {bound} "
            "(LLOG_MAX_UNCOMPACTED_KEYS): retry later; is the compactor running?"
        )
        self.topic = topic
        self.partition = partition
        self.count = count
        self.bound = bound


class HistoryCompacted(CoordinationError):
    """etcd no longer holds its history at ``revision``: it was compacted past it.
    ``what`` is the key read there, or the operation that named the revision."""

    def __init__(self, what: str, revision: int) -> None:
        super().__init__(f"etcd history of {what} at revision {revision} has been compacted")
        self.key = what
        self.revision = revision


class ClaimConflict(LlogError):
    """Another compactor holds the partition's claim."""

    def __init__(self, topic: str, partition: int, holder: str) -> None:
        super().__init__(f"{topic}/{partition} is claimed by {holder}")
        self.topic = topic
        self.partition = partition
        self.holder = holder


class ClaimLost(LlogError):
    """The claim this compactor held is gone (its lease lapsed); the stage did not run.
    Whoever claims the partition next finishes the compaction."""

    def __init__(self, topic: str, partition: int) -> None:
        super().__init__(f"lost the compactor claim on {topic}/{partition}")
        self.topic = topic
        self.partition = partition


class TransactionError(LlogError):
    """A transactional step refused (protocol/README.md §15); names the transactional id."""

    def __init__(self, transactional_id: str, message: str) -> None:
        super().__init__(f"transaction {transactional_id!r}: {message}")
        self.transactional_id = transactional_id


class TransactionFenced(TransactionError):
    """The producer's epoch is older than the transactional id's: a newer instance
    called InitProducerId (or the transaction timed out), so this one is a zombie."""


class InvalidTxnState(TransactionError):
    """The step does not fit the transaction's state: a partition not added to it, an
    end asked of a transaction that is not ongoing, or the other outcome than it had."""


class InvalidTransactionTimeout(TransactionError, InvalidInput):
    """The ``transaction.timeout.ms`` asked for is not in ``1..LLOG_TXN_MAX_TIMEOUT_MS``."""


class InvalidProducerIdMapping(TransactionError):
    """The producer id is not the one the transactional id holds."""


class UnknownTransactionalId(TransactionError):
    """No producer has initialized this transactional id."""


class ConcurrentTransactions(TransactionError):
    """The transaction cannot end now (a partition is fenced, or too many writers
    contend): retry the end later."""

    retriable = True


class TransactionTooLarge(TransactionError):
    """The transaction's commit does not fit one etcd transaction even with its batches
    folded (protocol/README.md §15.2, "Size"); it was aborted."""
