"""The transaction record (protocol/README.md §15.1): one transactional producer's
state at ``{root}/_transactions/{id}``, a msgpack map written in the spec's field order
so the bytes are deterministic (a golden vector pins them)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal

from llog.codec.etcd_values.maps import MetaFormatError, field_of, pack, unpack
from llog.codec.etcd_values.partition import Pending
from llog.codec.etcd_values.producers import PRODUCER_WINDOW

TxnState = Literal["empty", "ongoing", "complete-commit", "complete-abort"]
EMPTY: Final = "empty"
ONGOING: Final = "ongoing"
COMPLETE_COMMIT: Final = "complete-commit"
COMPLETE_ABORT: Final = "complete-abort"
STATES: Final = (EMPTY, ONGOING, COMPLETE_COMMIT, COMPLETE_ABORT)


def _ints(a: list[Any], what: str) -> None:
    if any(not isinstance(v, int) or isinstance(v, bool) for v in a):
        raise MetaFormatError(f"{what} has a field that is not an int")


def _array(v: object, n: int, what: str) -> list[Any]:
    if not isinstance(v, list) or len(v) != n:
        raise MetaFormatError(f"{what} is not an array of {n} fields")
    return v


@dataclass(frozen=True)
class StagedAppend:
    """One append staged in a transaction: its partition, the topic incarnation it was
    checked against, and its slice (a pending without offsets)."""

    topic: str
    partition: int
    topic_revision: int
    append_id: str
    data_key: str
    byte_offset: int
    byte_length: int
    msg_count: int
    created_at_ms: int
    max_timestamp: int

    def at(self, start: int) -> Pending:
        """The pending this append becomes at offsets from ``start``."""
        return Pending(self.append_id, start, start + self.msg_count - 1, self.msg_count, self.data_key,
                       self.byte_offset, self.byte_length, self.created_at_ms, self.max_timestamp)

    def to_array(self) -> list[Any]:
        return [self.topic, self.partition, self.topic_revision, self.append_id, self.data_key, self.byte_offset,
                self.byte_length, self.msg_count, self.created_at_ms, self.max_timestamp]

    @classmethod
    def from_array(cls, v: object) -> StagedAppend:
        a = _array(v, 10, "a staged append")
        if not all(isinstance(a[i], str) for i in (0, 3, 4)):
            raise MetaFormatError("a staged append's topic, append id or data key is not a string")
        _ints([a[i] for i in (1, 2, 5, 6, 7, 8, 9)], "a staged append")
        s = cls(*a)
        if s.partition < 0 or s.byte_offset < 0 or s.byte_length <= 0 or s.msg_count <= 0:
            raise MetaFormatError("a staged append has a negative partition or an empty slice")
        return s


@dataclass(frozen=True)
class StagedOffset:
    """One offset commit staged in a transaction, with what the commit compares: the
    group's epoch key value it was checked against, base64 (``guard``; a Kafka
    member's generation or an exclusive SDK consumer's epoch), and/or the member
    session that must still own the partition (``owner`` and its ``lease``; an SDK
    group member). Neither: a commit outside a generation."""

    group: str
    topic: str
    partition: int
    offset: int
    guard: str | None = None
    owner: str | None = None
    lease: int | None = None

    def to_array(self) -> list[Any]:
        head = [self.group, self.topic, self.partition, self.offset, self.guard]
        return head if self.owner is None else [*head, self.owner, self.lease]

    @classmethod
    def from_array(cls, v: object) -> StagedOffset:
        a = v if isinstance(v, list) and len(v) == 7 else _array(v, 5, "a staged offset")
        if not (isinstance(a[0], str) and isinstance(a[1], str)):
            raise MetaFormatError("a staged offset's group or topic is not a string")
        _ints(a[2:4], "a staged offset")
        if a[2] < 0 or a[3] < 0:
            raise MetaFormatError("a staged offset is negative")
        if a[4] is not None and not isinstance(a[4], str):
            raise MetaFormatError("a staged offset's guard is neither null nor a string")
        if len(a) == 7 and not (isinstance(a[5], str) and (a[6] is None or type(a[6]) is int)):
            raise MetaFormatError("a staged offset's owner is not a string with a lease")
        return cls(*a)


@dataclass(frozen=True)
class StagedBatch:
    """One of the producer's last batches on a partition, staged in this epoch: its
    first sequence, record count and content digest (§8.7's window, without offsets)."""

    sequence: int
    count: int
    digest: int | None

    def to_array(self) -> list[Any]:
        return [self.sequence, self.count, self.digest]

    @classmethod
    def from_array(cls, v: object) -> StagedBatch:
        a = _array(v, 3, "a staged batch")
        _ints(a[:2], "a staged batch")
        if a[2] is not None and (not isinstance(a[2], int) or isinstance(a[2], bool)):
            raise MetaFormatError("a staged batch's digest is neither null nor an int")
        if a[0] < 0 or a[1] <= 0:
            raise MetaFormatError("a staged batch has a negative sequence or no records")
        return cls(*a)


@dataclass(frozen=True)
class PartitionSequences:
    """The producer's window of staged batches on one partition, oldest first."""

    topic: str
    partition: int
    window: tuple[StagedBatch, ...]

    def to_array(self) -> list[Any]:
        return [self.topic, self.partition, [b.to_array() for b in self.window]]

    @classmethod
    def from_array(cls, v: object) -> PartitionSequences:
        a = _array(v, 3, "a partition's sequences")
        if not isinstance(a[0], str) or not isinstance(a[1], int) or not isinstance(a[2], list):
            raise MetaFormatError("a partition's sequences have a field of the wrong type")
        if not 0 < len(a[2]) <= PRODUCER_WINDOW:
            raise MetaFormatError(f"a partition's sequences are not 1..{PRODUCER_WINDOW} batches")
        return cls(a[0], a[1], tuple(StagedBatch.from_array(b) for b in a[2]))


@dataclass(frozen=True)
class TxnRecord:
    """A transactional id's producer and its current (or last) transaction."""

    producer_id: int
    epoch: int
    timeout_ms: int
    state: TxnState = EMPTY
    #: Transactions begun under this id; names the current one.
    number: int = 0
    started_at_ms: int = 0
    partitions: tuple[tuple[str, int], ...] = ()
    groups: tuple[str, ...] = ()
    staged: tuple[StagedAppend, ...] = ()
    offsets: tuple[StagedOffset, ...] = ()
    sequences: tuple[PartitionSequences, ...] = field(default=())

    def ended(self, state: TxnState) -> TxnRecord:
        """This record with its transaction ended in ``state`` (the window kept)."""
        return replace(self, state=state, partitions=(), groups=(), staged=(), offsets=())

    def window(self, topic: str, partition: int) -> tuple[StagedBatch, ...]:
        for s in self.sequences:
            if s.topic == topic and s.partition == partition:
                return s.window
        return ()

    def encode(self) -> bytes:
        return pack({
            "producer_id": self.producer_id,
            "epoch": self.epoch,
            "timeout_ms": self.timeout_ms,
            "state": self.state,
            "number": self.number,
            "started_at_ms": self.started_at_ms,
            "partitions": [[t, p] for t, p in self.partitions],
            "groups": list(self.groups),
            "staged": [s.to_array() for s in self.staged],
            "offsets": [o.to_array() for o in self.offsets],
            "sequences": [s.to_array() for s in self.sequences],
        })

    @classmethod
    def decode(cls, raw: bytes) -> TxnRecord:
        m = unpack(raw)
        state = field_of(m, "state", str)
        if state not in STATES:
            raise MetaFormatError(f"transaction state {state!r} is not one of {', '.join(STATES)}")
        partitions = []
        for p in field_of(m, "partitions", list):
            t, n = _array(p, 2, "a transaction's partition")
            if not isinstance(t, str) or not isinstance(n, int) or isinstance(n, bool) or n < 0:
                raise MetaFormatError("a transaction's partition is not [topic, partition >= 0]")
            partitions.append((t, n))
        groups = field_of(m, "groups", list)
        if not all(isinstance(g, str) for g in groups):
            raise MetaFormatError("a transaction's group is not a string")
        r = cls(
            producer_id=field_of(m, "producer_id", int),
            epoch=field_of(m, "epoch", int),
            timeout_ms=field_of(m, "timeout_ms", int),
            state=state,
            number=field_of(m, "number", int),
            started_at_ms=field_of(m, "started_at_ms", int),
            partitions=tuple(partitions),
            groups=tuple(groups),
            staged=tuple(StagedAppend.from_array(s) for s in field_of(m, "staged", list)),
            offsets=tuple(StagedOffset.from_array(o) for o in field_of(m, "offsets", list)),
            sequences=tuple(PartitionSequences.from_array(s) for s in field_of(m, "sequences", list)),
        )
        if r.producer_id < 0 or r.epoch < 0 or r.timeout_ms <= 0 or r.number < 0:
            raise MetaFormatError("a transaction record has a negative producer id, epoch or number, or no timeout")
        return r


@dataclass(frozen=True)
class SinkProgress:
    """``{root}/_sinks/{id}``: the last micro-batch a transactional Spark sink committed
    (spec §15.5), written in that micro-batch's commit, so a batch Spark runs again
    after a driver failure is never committed twice."""

    batch_id: int
    committed_at_ms: int

    def encode(self) -> bytes:
        return pack({"batch_id": self.batch_id, "committed_at_ms": self.committed_at_ms})

    @classmethod
    def decode(cls, raw: bytes) -> SinkProgress:
        m = unpack(raw)
        return cls(field_of(m, "batch_id", int), field_of(m, "committed_at_ms", int))
