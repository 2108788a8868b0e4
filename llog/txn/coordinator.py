"""The transaction coordinator's steps (spec §15.2): T0 init, T1 add, T2' offsets, T4
abort and the end of a transaction, each one CAS on the transactional id's record.
Any broker coordinates any transactional id: the state is all in etcd."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import replace
from urllib.parse import unquote

from llog.codec.etcd_values.transaction import COMPLETE_ABORT, COMPLETE_COMMIT, EMPTY, ONGOING, StagedOffset, TxnRecord
from llog.connection import Connection
from llog.errors import (
    CorruptMetadata,
    InvalidInput,
    InvalidTransactionTimeout,
    InvalidTxnState,
    UnknownTransactionalId,
)
from llog.etcd.operations import Delete, Op, Put, mod_revision_is
from llog.groups.owner import Owner
from llog.names import check_group, check_partition, check_topic
from llog.state.control import now_ms
from llog.state.keys import prefix_range_end
from llog.state.session import Sessions
from llog.txn.commit import commit
from llog.txn.records import (
    Change,
    Read,
    TxnRecords,
    aborted,
    check_producer,
    decode,
    fenced,
    new_producer_id,
    next_producer,
)

log = logging.getLogger(__name__)

class Coordinator:
    """Transactional ids' records, changed step by step; thread-safe (all state in etcd)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.records = TxnRecords(conn)
        #: For the blobs of folded commits (T3').
        self.sessions = Sessions(conn, "writer")

    def close(self) -> None:
        self.sessions.close()

    def init_producer(self, transactional_id: str, timeout_ms: int, producer_id: int = -1,
                      epoch: int = -1) -> tuple[int, int]:
        """T0: the id's producer id and a new epoch; an ongoing transaction is aborted
        and every older epoch fenced. ``producer_id``/``epoch`` (KIP-360: a producer
        re-initializing itself) must be the current ones."""
        check_transactional_id(transactional_id)
        if not 0 < timeout_ms <= self.conn.config.txn_max_timeout_ms:
            raise InvalidTransactionTimeout(transactional_id, f"timeout {timeout_ms} ms is not in "
                                            f"1..{self.conn.config.txn_max_timeout_ms} (LLOG_TXN_MAX_TIMEOUT_MS)")
        fresh: list[int] = []

        def new_id() -> int:  # one etcd write per id, taken at most once per call
            if not fresh:
                fresh.append(new_producer_id(self.conn))
            return fresh[0]

        def decide(got: Read) -> Change:
            r = got.record
            if r is None:
                new = TxnRecord(new_id(), 0, timeout_ms)
                return Change(new, (new.producer_id, new.epoch))
            if producer_id >= 0:
                check_producer(transactional_id, r, producer_id, epoch)
            ops: list[Op] = []
            if r.state == ONGOING:
                ch = aborted(self.conn, transactional_id, r)
                assert ch.record is not None
                r, ops = ch.record, list(ch.ops)
                log.info("transaction %r: ongoing transaction %d aborted by a new producer instance",
                         transactional_id, r.number)
                self.conn.metrics.transactions.labels("fenced").inc()
            pid, nxt = next_producer(r, new_id)
            new = replace(r, producer_id=pid, epoch=nxt, timeout_ms=timeout_ms, sequences=())
            return Change(new, (pid, nxt), ops=ops)

        out = self.records.change(transactional_id, decide)
        assert isinstance(out, tuple)
        return out

    def add_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                       partitions: Iterable[tuple[str, int]]) -> None:
        """T1: add ``partitions`` (each must exist) to the ongoing transaction, which
        begins here if none is."""
        wanted = list(dict.fromkeys(partitions))
        for topic, partition in wanted:
            check_topic(topic)
            check_partition(topic, partition)
            self.conn.check_partition(topic, partition)

        def decide(got: Read) -> Change:
            r = self._began(transactional_id, got, producer_id, epoch)
            have = set(r.partitions)
            new = [tp for tp in wanted if tp not in have]
            return Change(replace(r, partitions=r.partitions + tuple(new)) if new or got.record != r else None)

        self.records.change(transactional_id, decide)

    def add_group(self, transactional_id: str, producer_id: int, epoch: int, group: str) -> None:
        """T1: add ``group``, whose offsets the transaction will commit."""
        check_group(group)

        def decide(got: Read) -> Change:
            r = self._began(transactional_id, got, producer_id, epoch)
            if group in r.groups and got.record == r:
                return Change(None)
            return Change(replace(r, groups=tuple(dict.fromkeys((*r.groups, group)))))

        self.records.change(transactional_id, decide)

    def stage_offsets(self, transactional_id: str, producer_id: int, epoch: int, group: str,
                      offsets: Sequence[tuple[str, int, int]], guard: str | None = None,
                      owner: Owner | None = None) -> None:
        """T2': stage the group's offsets ``(topic, partition, offset)`` in the
        ongoing transaction; the group must have been added. ``guard``: the group's
        epoch key value the member's generation was checked against; ``owner``: the
        member session that must still own each partition. The commit compares them,
        so offsets of a generation or a session since replaced never commit."""
        for topic, partition, offset in offsets:
            check_topic(topic)
            check_partition(topic, partition)
            if offset < 0:
                raise InvalidInput(f"offset must be >= 0, got {offset} for {topic}/{partition}")

        def decide(got: Read) -> Change:
            r = check_producer(transactional_id, got.record, producer_id, epoch)
            if r.state != ONGOING or group not in r.groups:
                raise InvalidTxnState(transactional_id, f"group {group!r} was not added to an ongoing transaction "
                                      "(AddOffsetsToTxn)")
            latest = {(t, p): o for t, p, o in offsets}  # one offset per partition: the last given
            kept = tuple(o for o in r.offsets if o.group != group or (o.topic, o.partition) not in latest)
            member, lease = (None, None) if owner is None else (owner.member, owner.lease)
            new = kept + tuple(StagedOffset(group, t, p, o, guard, member, lease) for (t, p), o in latest.items())
            ops = [Put(self.conn.keys.group_transaction(group, transactional_id), b"")] if latest else []
            return Change(replace(r, offsets=new), ops=ops)

        self.records.change(transactional_id, decide)

    def end(self, transactional_id: str, producer_id: int, epoch: int, commit_it: bool) -> None:
        """EndTxn: T3 commit or T4 abort of the ongoing transaction. Asking again for
        the outcome it already had succeeds and changes nothing."""
        want = COMPLETE_COMMIT if commit_it else COMPLETE_ABORT
        got = self.records.read(transactional_id)
        r = check_producer(transactional_id, got.record, producer_id, epoch)
        if r.state == want:
            return
        if r.state != ONGOING:
            raise InvalidTxnState(transactional_id, f"cannot {'commit' if commit_it else 'abort'}: the transaction "
                                  f"is {r.state}")
        if commit_it:
            commit(self.conn, self.sessions, transactional_id, producer_id, epoch)
        else:
            self.abort(transactional_id, producer_id, epoch)
        self.conn.metrics.transactions.labels("commit" if commit_it else "abort").inc()

    def abort(self, transactional_id: str, producer_id: int, epoch: int, *, number: int | None = None,
              bump: bool = False) -> bool:
        """T4: abort the ongoing transaction (of ``number`` only, when given); ``bump``
        fences its producer too (expiry). Whether this call aborted it."""

        def decide(got: Read) -> Change:
            r = check_producer(transactional_id, got.record, producer_id, epoch)
            if r.state != ONGOING or (number is not None and r.number != number):
                if r.state == COMPLETE_ABORT or number is not None:
                    return Change(None, False)
                raise InvalidTxnState(transactional_id, f"cannot abort: the transaction is {r.state}")
            ch = aborted(self.conn, transactional_id, r)
            assert ch.record is not None
            return Change(fenced(self.conn, ch.record) if bump else ch.record, True, ops=ch.ops)

        return bool(self.records.change(transactional_id, decide))

    def delete_idle(self, transactional_id: str, revision: int) -> bool:
        """Forget an id whose record was last written at ``revision`` and holds no
        ongoing transaction (CAS: one written since is kept); whether it went."""
        key = self.records.key(transactional_id)
        return self.conn.etcd.txn([mod_revision_is(key, revision)], [Delete(key)]).succeeded

    def describe(self, transactional_id: str) -> TxnRecord:
        got = self.records.read(transactional_id)
        if got.record is None:
            raise UnknownTransactionalId(transactional_id, "no producer has initialized it")
        return got.record

    def list(self) -> list[tuple[str, TxnRecord, int]]:
        """Every transactional id with its record and the record's ``mod_revision``."""
        prefix = self.conn.keys.transactions_prefix()
        out = []
        for kv in self.conn.etcd.scan(prefix, prefix_range_end(prefix)):
            try:
                out.append((unquote(kv.key[len(prefix):]), decode(kv.key, kv.value), kv.mod_revision))
            except CorruptMetadata as exc:  # listed without it; every step on that id says so
                log.error("%s", exc)
        return out

    def pending_offsets(self, group: str) -> set[tuple[str, int]]:
        """The partitions of ``group`` with an offset staged in an ongoing transaction
        (OffsetFetch's ``require_stable``, KIP-447): one range read when there is none."""
        prefix = self.conn.keys.group_transactions_prefix(group)
        out: set[tuple[str, int]] = set()
        for kv in self.conn.etcd.scan(prefix, prefix_range_end(prefix)):
            r = self.records.read(unquote(kv.key[len(prefix):])).record
            if r is not None and r.state == ONGOING:
                out.update((o.topic, o.partition) for o in r.offsets if o.group == group)
        return out

    def _began(self, transactional_id: str, got: Read, producer_id: int, epoch: int) -> TxnRecord:
        """The record with a transaction ongoing: this one, or a new one begun (T1)."""
        r = check_producer(transactional_id, got.record, producer_id, epoch)
        if r.state == ONGOING:
            return r
        return replace(r.ended(EMPTY), state=ONGOING, number=r.number + 1, started_at_ms=now_ms())


def check_transactional_id(transactional_id: str) -> str:
    """Any non-empty string of at most 249 characters (Kafka's ids are free strings)."""
    if not isinstance(transactional_id, str) or not 0 < len(transactional_id) <= 249:
        raise InvalidInput(f"transactional id must be 1..249 characters, got {transactional_id!r}")
    return transactional_id
