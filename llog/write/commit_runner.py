"""Step W2 of the commit protocol (protocol/README.md §8.1) for a staged blob: the
groups of warm partitions in combined transactions (W2'), the rest one by one
(:class:`~llog.write.partition_commit.PartitionCommit`), partitions in parallel and each
partition's groups in order. Every step returns what it decided."""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from llog.codec.etcd_values.partition import FENCED
from llog.connection import Connection
from llog.errors import CoordinationError, EtcdSpaceExhausted, LlogError, SessionExpired, UnknownTopic
from llog.etcd.operations import Get, TxnResult
from llog.names import TopicPartition
from llog.state.control import ControlState, decode_control
from llog.state.session import Session
from llog.topic.guard import TopicGuard
from llog.write.acknowledgement import Ack, AppendFailure, AppendResult, Outcome, acknowledge
from llog.write.caches import ProducerSnapshot, WriterCaches
from llog.write.commit_plan import PartitionTxn, plan_txn, sequence_verdict
from llog.write.partition_commit import FaultHook, PartitionCommit
from llog.write.staging import StagedBlob

log = logging.getLogger(__name__)

#: Partitions per combined commit transaction: each brings up to 3 compares (control,
#: producer, topic guard), 3 puts and 2 failure reads (control, topic), plus one session
#: compare and read per transaction, and etcd refuses a transaction with more than 128
#: compares, success ops or failure ops (``--max-txn-ops``).
TXN_PARTITIONS = 32

#: Combined transactions tried for a chunk before its groups go one by one: a conflict
#: refreshes the cached states, so another writer's append to one of the partitions
#: (brokers, or one broker's workers, writing the same partitions) costs one more
#: transaction, not one per partition.
COMBINED_ATTEMPTS = 3

#: A group of the staged blob (its index) and its partition's transaction.
_Planned = tuple[int, PartitionTxn]


@dataclass(frozen=True)
class CombinedOutcome:
    """What combined commits decided, by group index: the outcomes of the groups they
    committed or definitely failed, and for the groups whose transaction's outcome is
    unknown the start offset it tried (for :class:`PartitionCommit` to resolve)."""

    outcomes: dict[int, Outcome] = field(default_factory=dict)
    unknown: dict[int, int] = field(default_factory=dict)
    #: Groups whose transaction etcd answered NOSPACE (applied or not): start offset and
    #: the error, for :meth:`PartitionCommit.resolve_no_space`.
    no_space: dict[int, tuple[int, EtcdSpaceExhausted]] = field(default_factory=dict)
    #: The transaction lost a compare; the failure reads refreshed the cached states.
    conflict: bool = False


class CommitRunner:
    """Commits staged blobs for one writer, whose caches it reads and updates."""

    def __init__(
        self,
        conn: Connection,
        caches: WriterCaches,
        pool: ThreadPoolExecutor,
        hook: FaultHook,
        clock: Callable[[], int],
    ) -> None:
        self.conn, self.caches, self.pool, self.hook, self.clock = conn, caches, pool, hook, clock

    def commit_staged(self, staged: StagedBlob) -> list[Outcome]:
        """One outcome per group of ``staged``, in order."""
        prepared = staged.groups
        # Groups of one partition commit in order; different partitions in parallel.
        by_partition: dict[TopicPartition, list[int]] = {}
        for i, g in enumerate(prepared):
            by_partition.setdefault((g.topic, g.partition), []).append(i)
        combined = CombinedOutcome()
        if len(by_partition) > 1 and len(by_partition) == len(prepared):
            combined = self.commit_together(staged)

        def run(indexes: list[int]) -> list[tuple[int, Outcome]]:
            return [
                (i, self.commit(staged, i, combined.unknown.get(i), combined.no_space.get(i)))
                for i in indexes if i not in combined.outcomes
            ]

        outcomes = dict(combined.outcomes)
        tasks = [ix for ix in by_partition.values() if any(i not in outcomes for i in ix)]
        if len(tasks) == 1:
            outcomes.update(run(tasks[0]))
        elif tasks:
            for f in [self.pool.submit(run, t) for t in tasks]:
                outcomes.update(f.result())
        return [outcomes[i] for i in range(len(prepared))]

    def commit(
        self,
        staged: StagedBlob,
        i: int,
        unknown_start: int | None,
        no_space: tuple[int, EtcdSpaceExhausted] | None = None,
    ) -> Outcome:
        """Commit group ``i`` alone (or, after a NOSPACE answer to its combined commit,
        only find out whether that committed); its failure as an :class:`AppendFailure`."""
        g = staged.groups[i]
        topic, partition, producer = g.topic, g.partition, g.producer
        try:
            with self.caches.partition_locks.hold([(topic, partition)]):
                one = PartitionCommit(
                    self.conn, self.caches, self.hook, self.clock,
                    topic, partition, staged.pendings[i], producer, staged.session, g.topic_revision,
                )
                return one.run(unknown_start) if no_space is None else one.resolve_no_space(*no_space)
        except LlogError as exc:
            self.conn.metrics.appends.labels(type(exc).__name__).inc()
            self.caches.forget([self._cache_keys(staged, i)])
            return AppendFailure(topic, partition, exc)

    def commit_together(self, staged: StagedBlob) -> CombinedOutcome:
        """Commit every partition of the blob whose control (and producer) state this
        writer has cached in one etcd transaction per :data:`TXN_PARTITIONS`: each
        partition keeps its own mod_revision compare, so the transaction commits all of
        them or none. A conflict refreshes the cache from the failure reads and leaves
        the partitions to the one-by-one path; an unknown outcome records the offset
        tried for it to resolve."""
        groups = staged.groups
        order = sorted(range(len(groups)), key=lambda i: (groups[i].topic, groups[i].partition))
        outcomes: dict[int, Outcome] = {}
        unknown: dict[int, int] = {}
        no_space: dict[int, tuple[int, EtcdSpaceExhausted]] = {}
        # In (topic, partition) order: no deadlock between writers' threads.
        with self.caches.partition_locks.hold([(groups[i].topic, groups[i].partition) for i in order]):
            for c in range(0, len(order), TXN_PARTITIONS):
                todo = order[c : c + TXN_PARTITIONS]
                for _attempt in range(COMBINED_ATTEMPTS):
                    chunk = self._plan_cached(staged, todo)
                    if len(chunk) < 2:
                        break
                    done = self._commit_chunk(staged, chunk)
                    outcomes.update(done.outcomes)
                    unknown.update(done.unknown)
                    no_space.update(done.no_space)
                    if not done.conflict:
                        break
                    todo = [i for i in todo if i not in done.outcomes]
        return CombinedOutcome(outcomes, unknown, no_space)

    def _plan_cached(self, staged: StagedBlob, order: list[int]) -> list[_Planned]:
        """The transactions of the groups whose partition state is cached and open
        and, idempotent, whose cached producer state says "append"."""
        planned: list[_Planned] = []
        for i in order:
            g = staged.groups[i]
            st = self.caches.controls.get((g.topic, g.partition))
            if st is None or st.control.log_state == FENCED:
                continue
            ps = None
            if g.producer is not None:
                ps = self.caches.producers.get(self.conn.keys.producer(g.topic, g.partition, g.producer.id))
                n = staged.pendings[i].msg_count
                if ps is None or sequence_verdict(g.topic, g.partition, g.producer, ps.state, n) is not None:
                    continue
            now = self.clock()
            planned.append((i, plan_txn(self.conn, g.topic, g.partition, staged.pendings[i], st, g.producer, ps, now,
                                        g.topic_revision)))
        return planned

    def _commit_chunk(self, staged: StagedBlob, chunk: list[_Planned]) -> CombinedOutcome:
        """One combined transaction of ``chunk`` (W2')."""
        conn, keys, session = self.conn, self.conn.keys, staged.session
        guards = list(dict.fromkeys(p.guard for _, p in chunk))  # one per topic
        try:
            r = conn.etcd.txn(
                list(dict.fromkeys([*(c for _, p in chunk for c in p.compares), session.compare()])),
                [o for _, p in chunk for o in p.ops],
                [
                    *(Get(keys.control(staged.groups[i].topic, staged.groups[i].partition)) for i, _ in chunk),
                    *(g.read() for g in guards),
                    Get(session.key),
                ],
            )
        except EtcdSpaceExhausted as exc:  # answered, but possibly applied: resolved one by one
            self.caches.forget([self._cache_keys(staged, i) for i, _ in chunk])
            return CombinedOutcome(no_space={i: (p.mine.start_offset, exc) for i, p in chunk})
        except CoordinationError as exc:
            log.warning("combined commit of %d partitions has an unknown outcome: %s", len(chunk), exc)
            self.caches.forget([self._cache_keys(staged, i) for i, _ in chunk])
            return CombinedOutcome(unknown={i: p.mine.start_offset for i, p in chunk})
        if not r.succeeded:
            return self._chunk_conflict(staged, chunk, guards, r, session)
        return CombinedOutcome(self._chunk_committed(staged, chunk, r.revision))

    def _cache_keys(self, staged: StagedBlob, i: int) -> tuple[str, int, str | None]:
        """Group ``i``'s partition and producer key (``None``: not idempotent)."""
        g = staged.groups[i]
        pkey = self.conn.keys.producer(g.topic, g.partition, g.producer.id) if g.producer is not None else None
        return g.topic, g.partition, pkey

    def _chunk_conflict(
        self, staged: StagedBlob, chunk: list[_Planned], guards: list[TopicGuard], r: TxnResult, session: Session
    ) -> CombinedOutcome:
        """Cache the states the failure reads returned; a session that ended fails
        every group, a topic deleted (or created again) its groups, and the other
        groups go on one by one."""
        self.conn.metrics.commit_conflicts.inc()
        controls, topic_reads, held = r.responses[:len(chunk)], r.responses[len(chunk):-1], r.responses[-1]
        for (i, _), got in zip(chunk, controls, strict=True):
            g = staged.groups[i]
            assert isinstance(got, list)
            ckey = self.conn.keys.control(g.topic, g.partition)
            self.caches.remember(g.topic, g.partition, decode_control(ckey, got[0] if got else None))
        failed: dict[int, Outcome] = {}  # definite failures: the blob can never commit these groups
        for guard, got in zip(guards, topic_reads, strict=True):
            assert isinstance(got, list)
            try:
                guard.check(self.conn, got)
            except UnknownTopic as exc:
                gone = [i for i, p in chunk if p.guard == guard]
                self.caches.forget([self._cache_keys(staged, i) for i in gone])
                for i in gone:
                    self.conn.metrics.appends.labels(UnknownTopic.__name__).inc()
                    failed[i] = AppendFailure(guard.topic, staged.groups[i].partition, exc)
        assert isinstance(held, list)
        if session.holds(held):
            return CombinedOutcome(failed, conflict=True)
        for i, p in chunk:
            if i in failed:
                continue
            g = staged.groups[i]
            self.conn.metrics.appends.labels(SessionExpired.__name__).inc()
            failed[i] = AppendFailure(g.topic, g.partition, SessionExpired(g.topic, g.partition, session.id,
                                                                           p.mine.data_key))
        return CombinedOutcome(failed)

    def _chunk_committed(self, staged: StagedBlob, chunk: list[_Planned], revision: int) -> dict[int, Outcome]:
        for _, p in chunk:
            self.hook("after_commit", p.mine.data_key)
        for i, p in chunk:
            g = staged.groups[i]
            if p.new_ps is not None and g.producer is not None:
                pkey = self.conn.keys.producer(g.topic, g.partition, g.producer.id)
                self.caches.producers[pkey] = ProducerSnapshot(p.new_ps, revision)
        acks: list[Ack] = [
            (staged.groups[i].topic, staged.groups[i].partition, p.mine, ControlState(p.new, revision))
            for i, p in chunk
        ]
        results: list[AppendResult] = acknowledge(self.conn, self.caches, acks)
        return {i: res for (i, _), res in zip(chunk, results, strict=True)}

