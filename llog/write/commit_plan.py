"""One partition's commit transaction as a value (protocol/README.md §8.1, step W2):
built from a control state (and, idempotent, a producer state) without I/O, executed
by :mod:`llog.write.commit_runner` alone or combined with others (step W2')."""

from __future__ import annotations

from dataclasses import dataclass

from llog.codec.etcd_values.partition import Control, Pending
from llog.codec.etcd_values.producers import PRODUCER_WINDOW, ProducerState, SequencedBatch
from llog.connection import Connection
from llog.errors import ProducerFenced, SequenceError, SequenceReused
from llog.etcd.operations import Compare, Get, Op, Put, mod_revision_is
from llog.state.control import ControlState, materialize_ops
from llog.topic.guard import TopicGuard
from llog.write.caches import ProducerSnapshot
from llog.write.validation import ProducerSequence


@dataclass(frozen=True)
class PartitionTxn:
    """One partition's commit transaction, built from a control state: the pending it
    sets, the new control value, and the compares/ops/failure reads of the CAS (the
    topic guard's read last)."""

    mine: Pending
    compares: list[Compare]
    ops: list[Op]
    failure: list[Op]
    new: Control
    new_ps: ProducerState | None
    guard: TopicGuard


def plan_txn(
    conn: Connection,
    topic: str,
    partition: int,
    pending: Pending,
    st: ControlState,
    producer: ProducerSequence | None,
    ps: ProducerSnapshot | None,
    now: int,
    topic_revision: int,
) -> PartitionTxn:
    """The commit transaction of ``pending`` against control state ``st``: the
    previous pending materialized, the new one set, CAS on the control's (and the
    producer key's) mod_revision and on the topic's incarnation the group was checked
    against, ``topic_revision`` (the topic guard). ``now`` stamps the new producer state."""
    keys = conn.keys
    ckey = keys.control(topic, partition)
    ctl, n = st.control, pending.msg_count
    start = ctl.next_offset
    mine = Pending(
        pending.append_id, start, start + n - 1, n, pending.data_key,
        pending.byte_offset, pending.byte_length, pending.created_at_ms,
        pending.max_timestamp,
    )
    ops: list[Op] = materialize_ops(conn, topic, partition, ctl.pending) if ctl.pending else []
    new = Control(ctl.log_state, start + n, ctl.log_start_offset, mine)
    ops.append(Put(ckey, new.encode()))
    compares: list[Compare] = [mod_revision_is(ckey, st.mod_revision)]
    failure: list[Op] = [Get(ckey)]
    new_ps: ProducerState | None = None
    if producer is not None and ps is not None:
        pkey = keys.producer(topic, partition, producer.id)
        prev = ps.state
        # The window holds one epoch's batches: a new epoch starts it over.
        recent = () if prev is None or prev.epoch != producer.epoch else prev.window()[-(PRODUCER_WINDOW - 1):]
        new_ps = ProducerState(producer.sequence, start, start + n - 1, pending.append_id, pending.data_key, now,
                               producer.epoch, producer.digest, recent)
        compares.append(mod_revision_is(pkey, ps.mod_revision))
        ops.append(Put(pkey, new_ps.encode()))
        failure.append(Get(pkey))
    guard = TopicGuard(topic, keys.topic_meta(topic), topic_revision)
    compares.append(guard.compare())
    failure.append(guard.read())
    return PartitionTxn(mine, compares, ops, failure, new, new_ps, guard)


def sequence_verdict(
    topic: str, partition: int, producer: ProducerSequence, last: ProducerState | None, n: int
) -> SequencedBatch | SequenceError | ProducerFenced | None:
    """``None``: append; a remembered batch: this is a retry of it, committed already;
    else the error (spec §8.7, "Verdict").

    An unknown producer may start at any sequence; a new epoch starts at 0."""
    if last is None:
        return None
    if producer.epoch < last.epoch:
        return ProducerFenced(topic, partition, producer.id, producer.epoch, last.epoch)
    if producer.epoch > last.epoch:
        if producer.sequence == 0:
            return None
        return SequenceError(topic, partition, producer.id, 0, producer.sequence)
    expected = next_sequence(producer.id, last)
    if producer.sequence == expected:
        return None
    for b in last.window():
        if b.sequence == producer.sequence:
            if b.msg_count == n and (b.digest is None or b.digest == producer.digest):
                return b
            return SequenceReused(topic, partition, producer.id, producer.sequence, b.start_offset, b.end_offset)
    return SequenceError(topic, partition, producer.id, expected, producer.sequence)


#: Producer ids that count sequences in records, as Kafka does (spec §8.7): the Kafka
#: listener's idempotent producers.
RECORD_COUNTED_PREFIX = "kafka."
_KAFKA_SEQUENCE_WRAP = 2**31  # Kafka's int32 sequences wrap to 0


def kafka_next_sequence(sequence: int, count: int) -> int:
    """A Kafka producer's next sequence after a batch of ``count`` records at ``sequence``."""
    return (sequence + count) % _KAFKA_SEQUENCE_WRAP


def next_sequence(producer_id: str, last: ProducerState) -> int:
    """The sequence the producer's next batch on the partition must carry."""
    if producer_id.startswith(RECORD_COUNTED_PREFIX):
        return kafka_next_sequence(last.sequence, last.msg_count)
    return last.sequence + 1
