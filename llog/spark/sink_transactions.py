"""The exactly-once sink (option ``transactionalId``): each write — a batch job, or one
micro-batch of a stream — is one transaction (protocol/README.md §15.5).

Each task stages its rows in a transaction of its own id, ``{transactionalId}-{task}``
(the task's partition of the write): opening it fences an earlier attempt of the same
task and aborts what that attempt staged, so a retried or speculative task never adds
its rows twice. The task leaves its transaction ongoing and hands the driver its
producer id and epoch in its commit message; the driver commits every task's
transaction in one etcd transaction (:func:`llog.txn.commit.commit_together`) — the
whole write becomes visible at once, or, if the job fails, never. For a stream, that
same etcd transaction records the micro-batch's id in ``{root}/_sinks/{transactionalId}``:
a micro-batch Spark runs again because the driver failed after committing it is found
there, and its new transactions are aborted instead of committed twice."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from llog.codec.etcd_values.maps import MetaFormatError
from llog.codec.etcd_values.transaction import SinkProgress
from llog.connection import Connection
from llog.errors import CorruptMetadata, LlogError
from llog.etcd.operations import Compare, Op, Put, mod_revision_is
from llog.spark.options import SinkOptions
from llog.state.control import now_ms
from llog.state.session import Sessions
from llog.txn.commit import commit_together
from llog.txn.coordinator import Coordinator
from llog.txn.transaction import Transaction

log = logging.getLogger(__name__)

#: A task's transaction as its commit message carries it: id, producer id, epoch.
TaskTransaction = tuple[str, int, int]


def task_transaction(conn: Connection, options: SinkOptions, task: int) -> Transaction:
    """The transaction of task ``task`` of a write (fencing its earlier attempts)."""
    assert options.transactional_id is not None
    return Transaction(conn, f"{options.transactional_id}-{task}", timeout_ms=options.transaction_timeout_ms)


def commit_write(options: SinkOptions, tasks: Iterable[TaskTransaction], batch_id: int | None) -> bool:
    """Commit the tasks' transactions as one (with micro-batch ``batch_id``'s progress,
    for a stream); ``False`` when that micro-batch was committed before (then they are
    aborted)."""
    assert options.transactional_id is not None
    producers = list(tasks)
    with Connection(options.config) as conn:
        compares: list[Compare] = []
        ops: list[Op] = []
        if batch_id is not None:
            key = conn.keys.sink_progress(options.transactional_id)
            kv = conn.etcd.get(key)
            done = -1 if kv is None else _progress(key, kv.value).batch_id
            if done >= batch_id:
                log.warning("llog sink %r: micro-batch %d was committed before (last: %d); its %d task "
                            "transactions are aborted", options.transactional_id, batch_id, done, len(producers))
                _abort(conn, producers)
                return False
            compares.append(mod_revision_is(key, 0 if kv is None else kv.mod_revision))
            ops.append(Put(key, SinkProgress(batch_id, now_ms()).encode()))
        if not producers:
            if ops and not conn.etcd.txn(compares, ops).succeeded:
                raise LlogError(f"llog sink {options.transactional_id!r}: another driver committed micro-batch "
                                f"{batch_id} meanwhile")
            return True
        sessions = Sessions(conn, "writer")
        try:
            commit_together(conn, sessions, producers, compares, ops)
        finally:
            sessions.close()
    return True


def abort_write(options: SinkOptions, tasks: Iterable[TaskTransaction]) -> None:
    """Abort the tasks' transactions (a failed write; what they staged is never seen)."""
    with Connection(options.config) as conn:
        _abort(conn, list(tasks))


def _abort(conn: Connection, producers: list[TaskTransaction]) -> None:
    coordinator = Coordinator(conn)
    try:
        for tid, producer_id, epoch in producers:
            try:
                coordinator.abort(tid, producer_id, epoch)
            except LlogError as exc:  # fenced by a newer attempt, or ended: nothing of it commits
                log.info("llog sink: transaction %r not aborted here: %s", tid, exc)
    finally:
        coordinator.close()


def _progress(key: str, raw: bytes) -> SinkProgress:
    try:
        return SinkProgress.decode(raw)
    except MetaFormatError as exc:
        raise CorruptMetadata(key, str(exc)) from exc
