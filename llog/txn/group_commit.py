"""A broker's concurrent EndTxn commits, committed together (spec §15.2, "Group
commit"). Each transaction's T3 compares the controls of the partitions it writes, so
producers committing to the same partitions at once lose to each other and retry one
after another. Here the commits that arrive while one is in flight wait for it and then
go as one etcd transaction (T3 of many: one revision for all, their appends to a
partition one after another in arrival order). A batch that cannot go as one (a lost
race, an unknown outcome, a rebalanced group, too many ops) is committed transaction
by transaction, as each would have been alone, so each commit gets its own answer."""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from llog.codec.txn_values import COMPLETE_COMMIT, ONGOING
from llog.connection import Connection
from llog.errors import CoordinationError, InvalidTxnState, LlogError
from llog.session import Sessions
from llog.txn.commit import Ongoing, check_complete, commit, plan_commit
from llog.txn.records import Read, TxnRecords, check_producer

log = logging.getLogger(__name__)

#: Transactions committed in one etcd transaction at most; more wait for the next.
MAX_BATCH = 16


@dataclass(frozen=True)
class _Ask:
    transactional_id: str
    producer_id: int
    epoch: int
    done: Future[bool] = field(default_factory=Future)


class GroupCommit:
    """Commits of ongoing transactions, batched on one committer thread;
    :meth:`close` waits for those submitted. Thread-safe."""

    def __init__(self, conn: Connection, sessions: Sessions, records: TxnRecords) -> None:
        self.conn = conn
        self.sessions = sessions
        self.records = records
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="llog-txn-commit")
        self._lock = threading.Lock()
        self._queue: list[_Ask] = []
        self._busy = False

    def commit(self, transactional_id: str, producer_id: int, epoch: int) -> bool:
        """Commit the ongoing transaction of ``(producer_id, epoch)``, or succeed if it
        is committed already (an EndTxn asked again): whether this call committed it.
        Raises what refused it."""
        ask = _Ask(transactional_id, producer_id, epoch)
        with self._lock:
            self._queue.append(ask)
            start, self._busy = not self._busy, True
        if start:
            self._pool.submit(self._drain)
        return ask.done.result()

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def _drain(self) -> None:
        """Commit what is queued, a batch at a time, until nothing is; every ask taken
        is answered, whatever goes wrong."""
        while True:
            with self._lock:
                if not self._queue:
                    self._busy = False
                    return
                batch, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
            try:
                self._together(batch)
            except BaseException as exc:  # not an LlogError of one ask: a bug or an unforeseen failure, answered
                log.exception("group commit of %d transactions failed", len(batch))
                for a in batch:
                    if not a.done.done():
                        a.done.set_exception(exc)

    def _together(self, batch: list[_Ask]) -> None:
        """One etcd transaction for the asks of ``batch`` that can commit; the others
        answered with their refusal."""
        reads = self.conn.etcd.get_many([self.records.get(a.transactional_id) for a in batch])
        ready: list[tuple[_Ask, Ongoing]] = []
        for a, kvs in zip(batch, reads, strict=True):
            got = self.records.decoded(a.transactional_id, kvs)
            try:
                r = check_producer(a.transactional_id, got.record, a.producer_id, a.epoch)
                if r.state == COMPLETE_COMMIT:
                    a.done.set_result(False)
                    continue
                if r.state != ONGOING:
                    raise InvalidTxnState(a.transactional_id, f"cannot commit: the transaction is {r.state}")
                check_complete(self.conn, a.transactional_id, r)
            except LlogError as exc:
                a.done.set_exception(exc)
                continue
            ready.append((a, Ongoing(a.transactional_id, r, got.revision)))
        if ready and self._as_one([t for _, t in ready]):
            for a, _ in ready:
                a.done.set_result(True)
            self.conn.metrics.transaction_group_commits.observe(len(ready))
            return
        for a, _ in ready:
            self._alone(a)

    def _as_one(self, txns: list[Ongoing]) -> bool:
        """Whether ``txns`` committed in one etcd transaction; ``False`` leaves each to
        be committed alone (which decides, and says, whatever stopped this)."""
        try:
            plan = plan_commit(self.conn, txns)
        except LlogError:
            return False
        limit = self.conn.config.txn_max_ops
        if plan.stale_groups or plan.lost or len(plan.compares) > limit or len(plan.ops) > limit:
            return False
        try:
            done = self.conn.etcd.txn(plan.compares, plan.ops)
        except CoordinationError as exc:  # each is read again alone: a committed one is found so
            log.info("group commit of %d transactions: outcome unknown (%s)", len(txns), exc)
            return False
        if not done.succeeded:
            return False
        if self.records.last is not None:
            for t in txns:
                self.records.last.put(t.transactional_id, Read(t.record.ended(COMPLETE_COMMIT), done.revision))
        if plan.dropped:
            log.warning("transactions %s: %d staged appends or offsets of deleted topics dropped at commit",
                        ", ".join(repr(t.transactional_id) for t in txns), plan.dropped)
        return True

    def _alone(self, a: _Ask) -> None:
        try:
            r = check_producer(a.transactional_id, self.records.read(a.transactional_id).record, a.producer_id,
                               a.epoch)
            if r.state == COMPLETE_COMMIT:
                a.done.set_result(False)
                return
            commit(self.conn, self.sessions, a.transactional_id, a.producer_id, a.epoch)
        except LlogError as exc:
            a.done.set_exception(exc)
            return
        a.done.set_result(True)

