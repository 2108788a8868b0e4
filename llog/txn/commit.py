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
from llog.codec.etcd_values import FENCED, Control, GroupOffset
from llog.codec.txn_values import COMPLETE_COMMIT, ONGOING, StagedAppend, TxnRecord
from llog.connection import Connection
from llog.control import decode_control, materialize_ops, now_ms
from llog.errors import (
    CasConflict,
    ConcurrentTransactions,
    CoordinationError,
    InvalidTxnState,
    SessionExpired,
    TransactionFenced,
    TransactionTooLarge,
)
from llog.etcd import KV, Compare, Get, Op, Put, conflict_pause, mod_revision_is, value_is
from llog.records import KafkaBatches
from llog.session import Session, Sessions
from llog.txn.records import Change, Read, TxnRecords, aborted, check_producer, group_marker_deletes

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


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


def commit(conn: Connection, sessions: Sessions, transactional_id: str, producer_id: int, epoch: int) -> None:
    """Commit the ongoing transaction of ``(producer_id, epoch)``: all of it at one etcd
    revision, or nothing. An unknown outcome is resolved by reading the record (§15.2)."""
    records = TxnRecords(conn)
    number: int | None = None
    attempts = conn.config.commit_max_attempts
    for attempt in range(attempts):
        got = records.read(transactional_id)
        r = check_producer(transactional_id, got.record, producer_id, epoch)
        if number is not None and r.number == number and r.state == COMPLETE_COMMIT:
            return  # an earlier attempt whose answer was lost did commit
        if r.state != ONGOING or (number is not None and r.number != number):
            raise InvalidTxnState(transactional_id, f"cannot commit: the transaction is {r.state}")
        number = r.number
        plan = plan_commit(conn, transactional_id, r, got.revision)
        if plan.stale_groups:
            _fenced(conn, transactional_id, got, plan.stale_groups)
        if len(plan.compares) > conn.config.txn_max_ops:  # folding cannot lower it
            _too_large(conn, transactional_id, got, f"{len(plan.compares)} compares")
        if len(plan.ops) > conn.config.txn_max_ops:
            fold(conn, sessions, transactional_id, got)
            continue
        try:
            if conn.etcd.txn(plan.compares, plan.ops).succeeded:
                if plan.dropped:
                    log.warning("transaction %r: %d staged appends or offsets of deleted topics dropped at commit",
                                transactional_id, plan.dropped)
                return
        except CoordinationError as exc:
            log.info("transaction %r: commit outcome unknown (%s); reading the record", transactional_id, exc)
            continue
        conflict_pause(attempt)
    raise CasConflict(conn.keys.transaction(transactional_id), attempts)


def plan_commit(conn: Connection, transactional_id: str, r: TxnRecord, revision: int) -> CommitPlan:
    """T3 for record ``r`` read at ``revision``, planned from one consistent read of the
    partitions' controls and the topics' records."""
    keys = conn.keys
    by_partition: dict[TopicPartition, list[StagedAppend]] = {}
    for a in r.staged:
        by_partition.setdefault((a.topic, a.partition), []).append(a)
    topics = sorted({t for t, _ in by_partition} | {o.topic for o in r.offsets})
    guards = sorted({(o.group, o.guard) for o in r.offsets if o.guard is not None})
    reads = ([Get(keys.control(t, p)) for t, p in by_partition] + [Get(keys.topic_meta(t)) for t in topics]
             + [Get(keys.group_epoch(g)) for g, _ in guards])
    got = conn.etcd.get_many(reads) if reads else []
    controls, metas = got[:len(by_partition)], got[len(by_partition):len(by_partition) + len(topics)]
    epochs = got[len(by_partition) + len(topics):]
    stale = tuple(sorted({g for (g, guard), kvs in zip(guards, epochs, strict=True)
                          if not kvs or kvs[0].value != base64.b64decode(guard)}))
    incarnation = {t: (kvs[0].create_revision if kvs else 0) for t, kvs in zip(topics, metas, strict=True)}
    compares: list[Compare] = [mod_revision_is(keys.transaction(transactional_id), revision)]
    compares += [Compare(keys.topic_meta(t), "create", "=", rev) for t, rev in incarnation.items()]
    compares += [value_is(keys.group_epoch(g), base64.b64decode(guard)) for g, guard in guards]
    ops: list[Op] = []
    dropped = 0
    for ((topic, partition), appends), kvs in zip(by_partition.items(), controls, strict=True):
        live = [a for a in appends if a.topic_revision == incarnation[topic]]
        dropped += len(appends) - len(live)
        if live:
            compares.append(mod_revision_is(keys.control(topic, partition), kvs[0].mod_revision if kvs else 0))
            ops += _partition_ops(conn, transactional_id, topic, partition, kvs, live)
    now = now_ms()
    for o in r.offsets:
        if incarnation[o.topic] == 0:
            dropped += 1
            continue
        value = GroupOffset(o.offset, 0, "kafka", now)
        ops.append(Put(keys.group_offset(o.group, o.topic, o.partition), value.encode()))
    ops += group_marker_deletes(conn, transactional_id, r)
    ops.append(Put(keys.transaction(transactional_id), r.ended(COMPLETE_COMMIT).encode()))
    return CommitPlan(compares, ops, dropped, stale)


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
    # Each partition takes at least its control put and, at worst, a materialization.
    if 2 * len(by_partition) + len(r.offsets) + len(r.groups) + 1 > conn.config.txn_max_ops:
        _too_large(conn, transactional_id, got, f"{len(by_partition)} partitions and {len(r.offsets)} offsets")
    bodies, folded = [], []
    for (topic, partition, _revision), appends in by_partition.items():
        try:
            batches = KafkaBatches.join([_batches(conn, a) for a in appends])
        except BatchFormatError as exc:  # not Kafka batches (an SDK transaction): cannot fold
            _too_large(conn, transactional_id, got, f"{topic}/{partition}'s appends cannot be folded: {exc}")
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


def _fenced(conn: Connection, transactional_id: str, got: Read, groups: Sequence[str]) -> None:
    """Abort the transaction read in ``got`` and fence its producer (a new epoch): its
    offsets belong to a generation of ``groups`` since replaced, so its input is another
    member's now (KIP-447's zombie). Raises :class:`TransactionFenced`."""
    r = got.record
    assert r is not None
    _abort(conn, transactional_id, r.number, bump=True)
    raise TransactionFenced(transactional_id, f"group {', '.join(groups)} rebalanced after its offsets were "
                            "staged: the transaction was aborted and the producer fenced")


def _abort(conn: Connection, transactional_id: str, number: int, *, bump: bool = False) -> None:
    """T4 of transaction ``number`` if it is still ongoing (``bump``: and a new epoch)."""

    def decide(read: Read) -> Change:
        now = read.record
        if now is None or now.number != number or now.state != ONGOING:
            return Change(None)
        ch = aborted(conn, transactional_id, now)
        if bump and ch.record is not None:
            return replace(ch, record=replace(ch.record, epoch=now.epoch + 1, sequences=()))
        return ch

    TxnRecords(conn).change(transactional_id, decide)
    conn.metrics.transactions.labels("abort").inc()


def _too_large(conn: Connection, transactional_id: str, got: Read, why: str) -> None:
    """Abort the transaction read in ``got`` and raise :class:`TransactionTooLarge`."""
    r = got.record
    assert r is not None
    _abort(conn, transactional_id, r.number)
    raise TransactionTooLarge(transactional_id, f"its commit does not fit one etcd transaction of "
                              f"{conn.config.txn_max_ops} ops ({why}); it was aborted")
