"""T2 (spec §15.2): a transactional producer's batches, PUT in a shared blob as any
append (steps W0 and W1), recorded in its ongoing transaction instead of committed —
one CAS on the record that also requires the blob's session, so a staged reference is
only ever created while vacuum must keep the blob (§15.3). Each batch is judged by its
sequence against the producer's window of staged batches (§8.7's verdict, without
offsets): a retry is answered as staged and stages nothing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from llog.codec.etcd_values.producers import PRODUCER_WINDOW
from llog.codec.etcd_values.transaction import ONGOING, PartitionSequences, StagedAppend, StagedBatch, TxnRecord
from llog.connection import Connection
from llog.errors import (
    InvalidTxnState,
    LlogError,
    SequenceError,
    SequenceReused,
    SessionExpired,
    TransactionTooLarge,
)
from llog.etcd.operations import KV, Get
from llog.txn.records import Change, Read, TxnRecords, check_producer
from llog.write.commit_plan import kafka_next_sequence
from llog.write.staging import StagedBlob
from llog.write.validation import PreparedGroup, ProducerSequence

#: A transaction record's limit, under etcd's 1.5 MiB request limit (about 6,000
#: staged batches; each stage rewrites the record, so a long transaction costs more).
MAX_RECORD_BYTES = 1 << 20


@dataclass(frozen=True)
class Staged:
    """A batch recorded in its transaction (``duplicate``: it already was): it has no
    offsets until the transaction commits."""

    topic: str
    partition: int
    count: int
    duplicate: bool = False


def stage(conn: Connection, transactional_id: str, producer_id: int, epoch: int,
          blob: StagedBlob) -> list[Staged | LlogError]:
    """Record every group of ``blob`` (each a batch of producer ``producer_id`` at
    ``epoch``) in the id's ongoing transaction; one outcome per group, in order. A stale
    epoch or another id refuses them all (raised)."""
    session = blob.session

    def refused(responses: Sequence[list[KV] | int | None]) -> None:
        got = responses[0]
        assert isinstance(got, list)
        if not session.holds(got):
            g, p = blob.groups[0], blob.pendings[0]
            raise SessionExpired(g.topic, g.partition, session.id, p.data_key)

    def decide(read: Read) -> Change:
        r = check_producer(transactional_id, read.record, producer_id, epoch)
        outcomes: list[Staged | LlogError] = []
        new = r
        for g, p in zip(blob.groups, blob.pendings, strict=True):
            outcome: Staged | LlogError
            try:
                outcome, new = _stage_one(transactional_id, new, g, StagedAppend(
                    g.topic, g.partition, g.topic_revision, p.append_id, p.data_key, p.byte_offset, p.byte_length,
                    p.msg_count, p.created_at_ms, p.max_timestamp))
            except LlogError as exc:
                outcome = exc
            outcomes.append(outcome)
        if new is r:
            return Change(None, outcomes)
        return Change(new, outcomes, compares=[session.compare()], failure=[Get(session.key)], refused=refused)

    out = TxnRecords(conn).change(transactional_id, decide)
    assert isinstance(out, list)
    return out


def _stage_one(transactional_id: str, r: TxnRecord, g: PreparedGroup, append: StagedAppend) -> tuple[Staged, TxnRecord]:
    """One group's verdict and the record with it staged."""
    tp = (g.topic, g.partition)
    if r.state != ONGOING or tp not in r.partitions:
        raise InvalidTxnState(transactional_id, f"{g.topic}/{g.partition} was not added to an ongoing transaction "
                              "(AddPartitionsToTxn): a batch of an ended transaction is never staged")
    producer = g.producer
    if producer is None:
        raise InvalidTxnState(transactional_id, f"a batch for {g.topic}/{g.partition} carries no producer sequence")
    window = r.window(*tp)
    batch = StagedBatch(producer.sequence, g.count, producer.digest)
    if window:
        last = window[-1]
        expected = kafka_next_sequence(last.sequence, last.count)
        if producer.sequence != expected:
            _check_retry(g, producer, window, expected)
            return Staged(g.topic, g.partition, g.count, duplicate=True), r
    kept = tuple(s for s in r.sequences if (s.topic, s.partition) != tp)
    seqs = (*kept, PartitionSequences(g.topic, g.partition, (*window, batch)[-PRODUCER_WINDOW:]))
    new = replace(r, staged=(*r.staged, append), sequences=seqs)
    if len(new.encode()) > MAX_RECORD_BYTES:
        raise TransactionTooLarge(transactional_id, f"{len(r.staged)} staged batches fill its record "
                                  f"({MAX_RECORD_BYTES} bytes): commit it before sending more")
    return Staged(g.topic, g.partition, g.count), new


def _check_retry(g: PreparedGroup, producer: ProducerSequence, window: tuple[StagedBatch, ...],
                 expected: int) -> None:
    """Return if the batch is a retry of one in ``window``; else raise its error."""
    for b in window:
        if b.sequence == producer.sequence:
            if b.count == g.count and (b.digest is None or b.digest == producer.digest):
                return
            raise SequenceReused(g.topic, g.partition, producer.id, producer.sequence, -1, -1)
    raise SequenceError(g.topic, g.partition, producer.id, expected, producer.sequence)
