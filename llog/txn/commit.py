"""T3 (spec §15.2), the commit point of a transaction: ONE etcd transaction that
compares the record and every partition's control, gives each staged append its
offsets as W2 does (the previous pending materialized, all but the last append put as
index entries, the last the new pending), puts the staged group offsets, and ends the
record. T3': a commit over ``LLOG_TXN_MAX_OPS`` first folds each partition's staged
Kafka batches into one body, in one blob PUT under the coordinator's session."""

from __future__ import annotations

import base64
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace

from llog.codec import blob, kafka_body
from llog.codec.batch import BatchFormatError
from llog.codec.etcd_values.groups import GroupOffset
from llog.codec.etcd_values.partition import FENCED, Control
from llog.codec.etcd_values.transaction import COMPLETE_COMMIT, ONGOING, StagedAppend, StagedOffset, TxnRecord
from llog.connection import Connection
from llog.errors import (
    CasConflict,
    ConcurrentTransactions,
    CoordinationError,
    InvalidTxnState,
    NotAssigned,
    SessionExpired,
    TransactionFenced,
    TransactionTooLarge,
)
from llog.etcd.operations import KV, Compare, Get, Op, Put, conflict_pause, lease_is, mod_revision_is, value_is
from llog.groups.owner import Owner
from llog.records import KafkaBatches
from llog.state.control import decode_control, materialize_ops, now_ms
from llog.state.session import Session, Sessions
from llog.txn.records import Change, Read, TxnRecords, aborted, check_producer, fenced, group_marker_deletes

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class Ongoing:
    """A transactional id's record, read with a transaction ongoing, at ``revision``."""

    transactional_id: str
    record: TxnRecord
    revision: int


@dataclass(frozen=True)
class CommitPlan:
    """T3 as a value: its compares and ops, and the staged appends and offsets it
    drops because their topic was deleted meanwhile."""

    compares: list[Compare]
    ops: list[Op]
    dropped: int
    #: Groups whose staged offsets were checked against an epoch since replaced (a
    #: rebalance after the TxnOffsetCommit): the transaction must not commit.
    stale_groups: tuple[str, ...] = ()
    #: Staged offsets of partitions their member session no longer owns: neither.
    lost: tuple[StagedOffset, ...] = ()


def commit(conn: Connection, sessions: Sessions, transactional_id: str, producer_id: int, epoch: int) -> None:
    """Commit the ongoing transaction of ``(producer_id, epoch)``: all of it at one etcd
    revision, or nothing. An unknown outcome is resolved by reading the record (§15.2)."""
    commit_together(conn, sessions, [(transactional_id, producer_id, epoch)])


def commit_together(conn: Connection, sessions: Sessions, producers: Sequence[tuple[str, int, int]],
                    compares: Sequence[Compare] = (), ops: Sequence[Op] = ()) -> None:
    """Commit the ongoing transactions of several transactional ids (each with its
    producer id and epoch) as one, with ``compares`` and ``ops`` of the caller's riding
    in the same etcd transaction: all at one revision, or nothing (§15.2, T3 of many)."""
    records = TxnRecords(conn)
    numbers: list[int] | None = None
    attempts = conn.config.commit_max_attempts
    for attempt in range(attempts):
        ongoing = []
        for tid, producer_id, epoch in producers:
            got = records.read(tid)
            ongoing.append((got, check_producer(tid, got.record, producer_id, epoch)))
        first = ongoing[0][1]
        if numbers is not None and first.number == numbers[0] and first.state == COMPLETE_COMMIT:
            return  # an earlier attempt whose answer was lost did commit (all of them, or none)
        now = [r.number for _, r in ongoing]
        for (tid, _, _), (_, r) in zip(producers, ongoing, strict=True):
            if r.state != ONGOING or numbers not in (None, now):
                raise InvalidTxnState(tid, f"cannot commit: the transaction is {r.state}")
        numbers = now
        txns = [Ongoing(tid, r, got.revision) for (tid, _, _), (got, r) in zip(producers, ongoing, strict=True)]
        try:
            for t in txns:
                check_complete(t.transactional_id, t.record)
        except InvalidTxnState as exc:
            conn.metrics.transactions.labels("late_end").inc()
            log.warning("%s", exc)
            raise
        plan = plan_commit(conn, txns)
        _refuse_stale(conn, txns, plan)
        if len(plan.compares) + len(compares) > conn.config.txn_max_ops:  # folding cannot lower it
            _too_large(conn, txns, f"{len(plan.compares) + len(compares)} compares")
        if len(plan.ops) + len(ops) > conn.config.txn_max_ops:
            if len(txns) > 1:
                _too_large(conn, txns, f"{len(plan.ops) + len(ops)} ops")
            fold(conn, sessions, txns[0].transactional_id, Read(txns[0].record, txns[0].revision))
            continue
        try:
            if conn.etcd.txn([*plan.compares, *compares], [*plan.ops, *ops]).succeeded:
                if plan.dropped:
                    log.warning("transaction %s: %d staged appends or offsets of deleted topics dropped at commit",
                                ", ".join(repr(t.transactional_id) for t in txns), plan.dropped)
                return
        except CoordinationError as exc:
            log.info("transaction %r: commit outcome unknown (%s); reading the record", producers[0][0], exc)
            continue
        conflict_pause(attempt)
    raise CasConflict(conn.keys.transaction(producers[0][0]), attempts)


def check_complete(transactional_id: str, r: TxnRecord) -> None:
    """:class:`InvalidTxnState` if a partition was added to the transaction with no
    batch of it staged, or a group with no offset of it: its producer sends an end only
    once each batch is answered, so this end is one it sent for an earlier transaction
    of the epoch, arriving late (held by a paused broker or a partition), which must
    not commit this one half-sent (spec §15.2, T3). The transaction stays ongoing."""
    staged = {(a.topic, a.partition) for a in r.staged}
    empty = [f"{t}/{p}" for t, p in r.partitions if (t, p) not in staged]
    empty += [f"group {g}" for g in r.groups if g not in {o.group for o in r.offsets}]
    if empty:
        raise InvalidTxnState(transactional_id, f"transaction {r.number} has nothing staged for {', '.join(empty)}: "
                              "an end sent for an earlier transaction, or before its batches were answered; "
                              "not committed")


def plan_commit(conn: Connection, txns: Sequence[Ongoing]) -> CommitPlan:
    """T3 of the records ``txns``, planned from one consistent read of the partitions'
    controls, the topics' records and what the staged offsets are guarded by. Several
    records' appends to one partition follow each other in the order of ``txns``."""
    keys = conn.keys
    by_partition: dict[TopicPartition, list[StagedAppend]] = {}
    for t in txns:
        for a in t.record.staged:
            by_partition.setdefault((a.topic, a.partition), []).append(a)
    offsets = [o for t in txns for o in t.record.offsets]
    topics = sorted({t for t, _ in by_partition} | {o.topic for o in offsets})
    guards = sorted({(o.group, o.guard) for o in offsets if o.guard is not None})
    owned = [o for o in offsets if o.owner is not None]
    reads = ([Get(keys.control(t, p)) for t, p in by_partition] + [Get(keys.topic_meta(t)) for t in topics]
             + [Get(keys.group_epoch(g)) for g, _ in guards]
             + [Get(keys.group_owner(o.group, o.topic, o.partition)) for o in owned])
    got = iter(conn.etcd.get_many(reads) if reads else [])
    controls = [next(got) for _ in by_partition]
    incarnation = {t: (kvs[0].create_revision if kvs else 0) for t in topics for kvs in [next(got)]}
    epochs = [next(got) for _ in guards]
    stale = tuple(sorted({g for (g, guard), kvs in zip(guards, epochs, strict=True)
                          if not kvs or kvs[0].value != base64.b64decode(guard)}))
    owners = [next(got) for _ in owned]
    lost = tuple(o for o, kvs in zip(owned, owners, strict=True)
                 if not Owner(o.owner or "", o.lease).holds(kvs[0] if kvs else None))
    compares: list[Compare] = [mod_revision_is(keys.transaction(t.transactional_id), t.revision) for t in txns]
    compares += [Compare(keys.topic_meta(t), "create", "=", rev) for t, rev in incarnation.items()]
    compares += [value_is(keys.group_epoch(g), base64.b64decode(guard)) for g, guard in guards]
    compares += [c for o in owned for c in _owner_compares(conn, o)]
    ops: list[Op] = []
    dropped = 0
    for ((topic, partition), appends), kvs in zip(by_partition.items(), controls, strict=True):
        live = [a for a in appends if a.topic_revision == incarnation[topic]]
        dropped += len(appends) - len(live)
        if live:
            compares.append(mod_revision_is(keys.control(topic, partition), kvs[0].mod_revision if kvs else 0))
            ops += _partition_ops(conn, txns[0].transactional_id, topic, partition, kvs, live)
    now = now_ms()
    for o in offsets:
        if incarnation[o.topic] == 0:
            dropped += 1
            continue
        value = GroupOffset(o.offset, 0, o.owner or "kafka", now)
        ops.append(Put(keys.group_offset(o.group, o.topic, o.partition), value.encode()))
    for t in txns:
        ops += group_marker_deletes(conn, t.transactional_id, t.record)
        ops.append(Put(keys.transaction(t.transactional_id), t.record.ended(COMPLETE_COMMIT).encode()))
    return CommitPlan(compares, ops, dropped, stale, lost)


def _owner_compares(conn: Connection, o: StagedOffset) -> list[Compare]:
    """That ``o``'s member session still owns its partition (as a group commit proves)."""
    key = conn.keys.group_owner(o.group, o.topic, o.partition)
    assert o.owner is not None
    return [value_is(key, o.owner.encode())] + ([] if o.lease is None else [lease_is(key, o.lease)])


def _partition_ops(conn: Connection, transactional_id: str, topic: str, partition: int, kvs: list[KV],
                   appends: Sequence[StagedAppend]) -> list[Op]:
    """One partition's part of T3: its appends at offsets from its next offset."""
    key = conn.keys.control(topic, partition)
    ctl = decode_control(key, kvs[0] if kvs else None).control
    if ctl.log_state == FENCED:
        raise ConcurrentTransactions(transactional_id, f"{topic}/{partition} is fenced: it takes no commit until "
                                     "unfenced; end the transaction again later")
    ops: list[Op] = materialize_ops(conn, topic, partition, ctl.pending) if ctl.pending else []
    start = ctl.next_offset
    pendings = []
    for a in appends:
        pendings.append(a.at(start))
        start += a.msg_count
    ops += [Put(conn.keys.index(topic, partition, p.end_offset), p.index_entry().encode()) for p in pendings[:-1]]
    ops.append(Put(key, Control(ctl.log_state, start, ctl.log_start_offset, pendings[-1]).encode()))
    return ops


def fold(conn: Connection, sessions: Sessions, transactional_id: str, got: Read) -> None:
    """T3': each partition's staged appends as one Kafka body, in one blob, recorded in
    place of them by a CAS that requires the blob's session; or, when that cannot make
    the commit fit, the transaction aborted and :class:`TransactionTooLarge`."""
    r = got.record
    assert r is not None
    # By incarnation too: appends to a topic since deleted stay apart, for T3 to drop.
    by_partition: dict[tuple[str, int, int], list[StagedAppend]] = {}
    for a in r.staged:
        by_partition.setdefault((a.topic, a.partition, a.topic_revision), []).append(a)
    this = [Ongoing(transactional_id, r, got.revision)]
    # Each partition takes at least its control put and, at worst, a materialization.
    if 2 * len(by_partition) + len(r.offsets) + len(r.groups) + 1 > conn.config.txn_max_ops:
        _too_large(conn, this, f"{len(by_partition)} partitions and {len(r.offsets)} offsets")
    bodies, folded = [], []
    for (topic, partition, _revision), appends in by_partition.items():
        try:
            batches = KafkaBatches.join([_batches(conn, a) for a in appends])
        except BatchFormatError as exc:  # not Kafka batches (an SDK transaction): cannot fold
            _too_large(conn, this, f"{topic}/{partition}'s appends cannot be folded: {exc}")
        bodies.append(blob.BlobBody(topic, partition, batches.count, kafka_body.encode_body(batches),
                                    kafka_body.ENCODING))
        folded.append((appends[-1], batches))
    created = now_ms()
    packed = blob.pack(bodies, created)
    session = sessions.acquire()
    try:
        data_key = conn.keys.wal_blob(session.id, uuid.uuid4().hex)
        conn.store.put(data_key, packed.data, crc32=packed.crc32)
        staged = tuple(
            StagedAppend(last.topic, last.partition, last.topic_revision, f"{data_key.rsplit('/', 1)[1]}:{i}", data_key,
                         part.body_offset, part.body_length, part.msg_count, created, b.max_timestamp)
            for i, ((last, b), part) in enumerate(zip(folded, packed.parts, strict=True)))
        _record_fold(conn, transactional_id, got, replace(r, staged=staged), session)
    finally:
        sessions.release(session)
    conn.metrics.transaction_folds.inc()
    log.info("transaction %r: folded %d staged appends into %d (%s)", transactional_id, len(r.staged), len(staged),
             data_key)


def _batches(conn: Connection, a: StagedAppend) -> KafkaBatches:
    body = conn.store.get_range(a.data_key, a.byte_offset, a.byte_length)
    n, data = kafka_body.batches_of(body)
    return KafkaBatches(bytes(data), n, a.max_timestamp)


def _record_fold(conn: Connection, transactional_id: str, got: Read, new: TxnRecord, session: Session) -> None:
    key = conn.keys.transaction(transactional_id)
    r = conn.etcd.txn([mod_revision_is(key, got.revision), session.compare()], [Put(key, new.encode())],
                      [Get(session.key)])
    if not r.succeeded:
        seen = r.responses[0]
        assert isinstance(seen, list)
        if not session.holds(seen):
            raise SessionExpired(new.staged[0].topic, new.staged[0].partition, session.id, new.staged[0].data_key)
        # The record changed (a retried stage, an abort): the caller reads it again.


def _refuse_stale(conn: Connection, txns: Sequence[Ongoing], plan: CommitPlan) -> None:
    """Abort the transactions whose staged offsets the group no longer backs, and say
    why. Offsets of a generation of a group since replaced (a rebalance after the
    TxnOffsetCommit): their input is another member's now (KIP-447's zombie), so the
    producer is fenced too (:class:`TransactionFenced`). Offsets of a partition
    another member session owns now: :class:`NotAssigned`."""
    if plan.stale_groups:
        for t in txns:
            _abort(conn, t.transactional_id, t.record.number, bump=True)
        raise TransactionFenced(txns[0].transactional_id, f"group {', '.join(plan.stale_groups)} rebalanced after "
                                "its offsets were staged: the transaction was aborted and the producer fenced")
    if plan.lost:
        for t in txns:
            _abort(conn, t.transactional_id, t.record.number)
        o = plan.lost[0]
        raise NotAssigned(o.group, o.topic, o.partition, o.offset, f"member {o.owner!r} no longer owns it "
                          f"(transaction {txns[0].transactional_id!r} aborted)")


def _abort(conn: Connection, transactional_id: str, number: int, *, bump: bool = False) -> None:
    """T4 of transaction ``number`` if it is still ongoing (``bump``: and a new epoch)."""

    def decide(read: Read) -> Change:
        now = read.record
        if now is None or now.number != number or now.state != ONGOING:
            return Change(None)
        ch = aborted(conn, transactional_id, now)
        if bump and ch.record is not None:
            return replace(ch, record=fenced(conn, ch.record))
        return ch

    TxnRecords(conn).change(transactional_id, decide)
    conn.metrics.transactions.labels("abort").inc()


def _too_large(conn: Connection, txns: Sequence[Ongoing], why: str) -> None:
    """Abort the transactions ``txns`` and raise :class:`TransactionTooLarge`."""
    for t in txns:
        _abort(conn, t.transactional_id, t.record.number)
    raise TransactionTooLarge(txns[0].transactional_id, f"its commit does not fit one etcd transaction of "
                              f"{conn.config.txn_max_ops} ops ({why}); it was aborted")
