"""One group's commit to one partition, alone (protocol/README.md §8.1 W2, §8.3 CAS
conflict and retry, §8.5 unknown outcomes, §8.6 fencing, §8.7 idempotent produce):
attempt the partition's transaction until it commits, the append is found committed by
an earlier attempt, or the group definitely fails."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from enum import Enum
from typing import TypeVar

from llog.codec.etcd_values.partition import FENCED, Pending
from llog.codec.etcd_values.producers import SequencedBatch
from llog.connection import Connection
from llog.errors import (
    AmbiguousCommit,
    CasConflict,
    CoordinationError,
    EtcdSpaceExhausted,
    Fenced,
    ProducerFenced,
    SequenceError,
    SessionExpired,
)
from llog.etcd.operations import Get, TxnResult, conflict_pause
from llog.state.control import ControlState, decode_control, read_control
from llog.state.session import Session
from llog.write.acknowledgement import AppendResult, acknowledge, duplicate
from llog.write.caches import ProducerSnapshot, WriterCaches, decode_producer
from llog.write.commit_plan import PartitionTxn, plan_txn, sequence_verdict
from llog.write.older_batches import find_older_batch
from llog.write.resolution import find_committed
from llog.write.validation import ProducerSequence

log = logging.getLogger(__name__)

_T = TypeVar("_T")
_Verdict = SequencedBatch | SequenceError | ProducerFenced | None

#: Called at protocol points ("after_put", "after_commit", "after_settle") with the
#: data key; fault-injection tests use it to kill the process at an exact step.
FaultHook = Callable[[str, str], None]


class _Next(Enum):
    """What comes after a step that decided nothing."""

    #: The state was read again: attempt at once.
    RETRY = "retry"
    #: The CAS lost to another change: attempt again, backing off when contended.
    CONFLICT = "conflict"


class PartitionCommit:
    """The commit of one group's ``pending`` to ``topic``/``partition``; :meth:`run`
    once. Holds the state the attempts share: the control (and producer) state, whether
    it was read from etcd (``fresh``) or is this writer's cached copy, and the offsets
    earlier attempts with an unknown outcome would have taken."""

    st: ControlState
    ps: ProducerSnapshot | None
    fresh: bool
    pfresh: bool
    unknown_starts: list[int]
    in_flight: bool

    def __init__(
        self,
        conn: Connection,
        caches: WriterCaches,
        hook: FaultHook,
        clock: Callable[[], int],
        topic: str,
        partition: int,
        pending: Pending,
        producer: ProducerSequence | None,
        session: Session,
        topic_revision: int,
    ) -> None:
        self.conn, self.caches, self.hook, self.clock = conn, caches, hook, clock
        self.topic, self.partition, self.pending = topic, partition, pending
        self.producer, self.session, self.topic_revision = producer, session, topic_revision
        self.ckey = conn.keys.control(topic, partition)
        self.pkey = conn.keys.producer(topic, partition, producer.id) if producer is not None else ""

    def run(self, unknown_start: int | None) -> AppendResult:
        """Commit, or raise the group's error. ``unknown_start``: the start offset of a
        combined commit of this group whose outcome is unknown."""
        self._load(unknown_start)
        attempts = self.conn.config.commit_max_attempts
        for attempt in range(attempts):
            step = self._known_outcome()
            if step is None:
                step = self._attempt()
            if isinstance(step, AppendResult):
                return step
            if step is _Next.CONFLICT:
                conflict_pause(attempt)
        if self.unknown_starts:
            raise AmbiguousCommit(
                f"commit of append {self.pending.append_id} to {self.topic}/{self.partition} has an unknown "
                f"outcome and {attempts} attempts did not resolve it: the append may exist"
            )
        raise CasConflict(self.ckey, attempts)

    def _load(self, unknown_start: int | None) -> None:
        conn, topic, partition = self.conn, self.topic, self.partition
        self.fresh = (topic, partition) not in self.caches.controls
        self.pfresh = self.pkey not in self.caches.producers
        if unknown_start is None:
            self.st = self.caches.controls.get((topic, partition)) or read_control(conn, topic, partition)
            self.ps = self._producer_state(cached=True) if self.producer is not None else None
        else:  # a combined commit's outcome is unknown: only what etcd says now counts
            self.st = self._reread(lambda: read_control(conn, topic, partition))
            self.ps = self._reread(lambda: self._producer_state(cached=False)) if self.producer else None
            self.fresh = self.pfresh = True
        # Offsets an earlier attempt with an unknown outcome would have taken.
        self.unknown_starts = [] if unknown_start is None else [unknown_start]
        # Whether one of them may still be in flight (a lost reply, not a NOSPACE answer).
        self.in_flight = unknown_start is not None

    def _known_outcome(self) -> AppendResult | _Next | None:
        """Before an attempt: the result if the append (idempotent: its batch) is
        already committed, :attr:`_Next.RETRY` if the state had to be read again,
        ``None`` to attempt; or raise the group's definite failure."""
        topic, partition, st = self.topic, self.partition, self.st
        if self.producer is not None and self.ps is not None:
            verdict = sequence_verdict(topic, partition, self.producer, self.ps.state, self.pending.msg_count)
            if verdict is not None and not self.pfresh:
                # Only fresh state may refuse or short-circuit; a cached one may lag
                # behind another writer (or our own lost reply).
                self.ps, self.pfresh = self._producer_state(cached=False), True
                return _Next.RETRY
            verdict = self._older(verdict)
            if isinstance(verdict, SequencedBatch):
                if self.fresh:
                    self.caches.remember(topic, partition, st)
                assert self.ps.state is not None
                return duplicate(self.conn, topic, partition, self.ps.state, verdict)
            if verdict is not None:
                raise verdict
        else:
            found = self._find_committed()
            if found is not None:
                return self._ack(found, st)
        if st.control.log_state == FENCED:
            if self.fresh:
                raise Fenced(topic, partition)
            self.st, self.fresh = read_control(self.conn, topic, partition), True
            return _Next.RETRY
        return None

    def _attempt(self) -> AppendResult | _Next:
        """Send the partition's transaction against the current state."""
        conn, session = self.conn, self.session
        txn = plan_txn(
            conn, self.topic, self.partition, self.pending, self.st, self.producer, self.ps, self.clock(),
            self.topic_revision,
        )
        try:
            r = conn.etcd.txn([*txn.compares, session.compare()], txn.ops, [*txn.failure, Get(session.key)])
        except EtcdSpaceExhausted as exc:
            return self._after_no_space(txn, exc)
        except CoordinationError as exc:
            log.warning("commit of %s to %s/%s has an unknown outcome: %s",
                        self.pending.append_id, self.topic, self.partition, exc)
            self._after_unknown(txn)
            self.in_flight = True
            return _Next.RETRY
        if r.succeeded:
            return self._committed(txn, r.revision)
        return self._after_conflict(txn, r)

    def _committed(self, txn: PartitionTxn, revision: int) -> AppendResult:
        after = ControlState(txn.new, revision)
        self.hook("after_commit", self.pending.data_key)
        if txn.new_ps is not None:
            self.caches.producers[self.pkey] = ProducerSnapshot(txn.new_ps, revision)
        return self._ack(txn.mine, after)

    def _after_unknown(self, txn: PartitionTxn) -> None:
        """Record the offset the attempt would have taken and read the state again."""
        self.unknown_starts.append(txn.mine.start_offset)
        conn, topic, partition = self.conn, self.topic, self.partition
        self.st, self.fresh = self._reread(lambda: read_control(conn, topic, partition)), True
        if self.producer is not None:
            self.ps, self.pfresh = self._reread(lambda: self._producer_state(cached=False)), True

    def _after_no_space(self, txn: PartitionTxn, exc: EtcdSpaceExhausted) -> AppendResult:
        """etcd answered NOSPACE. It can refuse the transaction before applying it, or
        apply it and answer NOSPACE all the same (the write that crossed the quota), so
        look for the append as after any unknown outcome; reads still work under the
        alarm. Not found, it was refused: the typed error that names the fix, unless an
        earlier attempt's outcome is still open."""
        self._after_unknown(txn)
        found = self._find_committed()
        if found is not None:
            return self._ack(found, self.st)
        if self.in_flight:
            raise AmbiguousCommit(
                f"commit of append {self.pending.append_id} to {self.topic}/{self.partition} has an unknown "
                f"outcome and etcd then refused a write for lack of space: the append may exist ({exc})"
            ) from exc
        raise exc

    def resolve_no_space(self, start: int, exc: EtcdSpaceExhausted) -> AppendResult:
        """A combined commit of this group that etcd answered NOSPACE (it may have
        applied it, see :meth:`_after_no_space`): the append if it committed, else the
        typed error; no new attempt."""
        self._load(start)
        self.in_flight = False  # etcd answered: nothing of that attempt is in flight
        step = self._known_outcome()
        if isinstance(step, AppendResult):
            return step
        raise exc

    def _after_conflict(self, txn: PartitionTxn, r: TxnResult) -> AppendResult | _Next:
        """Take the state the failure reads returned; a topic deleted (or created
        again) or a session that ended decides."""
        self.conn.metrics.commit_conflicts.inc()
        topic_read = r.responses[-2]
        assert isinstance(topic_read, list)
        txn.guard.check(self.conn, topic_read)  # gone: nothing of this group can commit
        got = r.responses[0]
        assert isinstance(got, list)
        self.st, self.fresh = decode_control(self.ckey, got[0] if got else None), True
        if self.producer is not None:
            pgot = r.responses[1]
            assert isinstance(pgot, list)
            self.ps, self.pfresh = decode_producer(self.pkey, pgot[0] if pgot else None), True
        held = r.responses[-1]
        assert isinstance(held, list)
        if not self.session.holds(held):
            return self._session_ended()
        return _Next.CONFLICT

    def _session_ended(self) -> AppendResult:
        """The commit failed because the blob's session ended: no attempt can commit
        from now on. ``st`` and ``ps`` were read in the same transaction as the session
        key, so an earlier attempt with an unknown outcome either shows in them (then
        that is the result) or never committed (spec §8.5)."""
        topic, partition, pending = self.topic, self.partition, self.pending
        if self.producer is not None and self.ps is not None:
            verdict = self._older(sequence_verdict(topic, partition, self.producer, self.ps.state, pending.msg_count))
            if isinstance(verdict, SequencedBatch):
                assert self.ps.state is not None
                self.caches.remember(topic, partition, self.st)
                return duplicate(self.conn, topic, partition, self.ps.state, verdict)
        else:
            found = self._find_committed()
            if found is not None:
                return self._ack(found, self.st)
        raise SessionExpired(topic, partition, self.session.id, pending.data_key)

    def _older(self, verdict: _Verdict) -> _Verdict:
        """An out-of-order verdict on fresh state, looked up once more as a retry of a
        batch older than the window (spec §8.7, "Older batches")."""
        if type(verdict) is not SequenceError or self.producer is None or self.ps is None or self.ps.state is None:
            return verdict
        older = find_older_batch(
            self.conn, self.topic, self.partition, self.producer, self.ps.state, self.pending.msg_count
        )
        return verdict if older is None else older

    def _find_committed(self) -> Pending | None:
        return find_committed(
            self.conn, self.topic, self.partition, self.pending.append_id, self.st.control,
            self.st.mod_revision, self.unknown_starts, self.pending.msg_count,
        )

    def _producer_state(self, *, cached: bool) -> ProducerSnapshot:
        """The producer key's state: this writer's cached copy, else one read."""
        if cached and self.pkey in self.caches.producers:
            return self.caches.producers[self.pkey]
        return decode_producer(self.pkey, self.conn.etcd.get(self.pkey))

    def _reread(self, read: Callable[[], _T]) -> _T:
        """Read after an unknown outcome, with backoff; if etcd stays unreachable the
        outcome stays unknown, which is :class:`AmbiguousCommit`, not a plain failure."""
        for delay in (0.05, 0.1, 0.2, 0.4, 0.8, 1.6, None):
            try:
                return read()
            except CoordinationError as exc:
                if delay is None:
                    raise AmbiguousCommit(
                        f"commit of append {self.pending.append_id} to {self.topic}/{self.partition} has an "
                        f"unknown outcome and etcd is unreachable: the append may exist ({exc})"
                    ) from exc
                time.sleep(delay)
        raise AssertionError("unreachable")

    def _ack(self, p: Pending, st: ControlState) -> AppendResult:
        [res] = acknowledge(self.conn, self.caches, [(self.topic, self.partition, p, st)])
        return res
