"""``Consumer``: reads a group's share of its topics from the committed offsets and
commits what it has delivered — never more.

Two modes:

* **group** (default): members share the topics' partitions (:mod:`membership`);
  commits are guarded by partition ownership of this member session (its id and its
  lease), so a member that lost a partition, or whose session expired, cannot move its
  offset, even once a new session of the same member id owns it.
* **exclusive** (``exclusive=True``): one consumer reads every partition; starting it
  bumps the group's epoch and commits are guarded by that epoch, so a zombie left over
  from a failure can never move the committed offsets.

With ``transactional=True`` its offsets are committed only through a
:class:`~llog.txn.transaction.Transaction`, with the records the application wrote from
them (exactly once): a revoked partition is never committed on the way out, and a
transaction that read from it cannot commit.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence

from llog.config import LlogConfig
from llog.connection import Connection
from llog.errors import CommitOutOfRange, InvalidInput, LlogError
from llog.groups.epoch import bump_epoch
from llog.groups.membership import Membership
from llog.groups.offsets import Committed, Fence, GroupOffsets
from llog.names import TopicPartition, check_group, check_topic
from llog.reader import Reader
from llog.records import ConsumedRecord
from llog.topic.time_lookup import offset_for_timestamp

log = logging.getLogger(__name__)

StartFrom = str | int  # "earliest" | "latest" | timestamp in ms


class Consumer:
    """Consume ``topics`` as a member of ``group``.

    >>> with Consumer(conn, "billing", ["orders"]) as c:          # doctest: +SKIP
    ...     for rec in c.poll():
    ...         process(rec)
    ...     c.commit()          # commit-after-process: at least once
    """

    def __init__(
        self,
        conn: Connection | LlogConfig | None,
        group: str,
        topics: Sequence[str],
        *,
        exclusive: bool = False,
        start_from: StartFrom = "earliest",
        auto_commit_interval_s: float | None = None,
        session_ttl_s: int = 10,
        member_id: str | None = None,
        rebalance_interval_s: float = 1.0,
        poll_interval_s: float = 0.05,
        transactional: bool = False,
    ) -> None:
        if transactional and auto_commit_interval_s is not None:
            raise InvalidInput("a transactional consumer commits through its Transaction, not auto-commit")
        if isinstance(topics, str) or not topics:
            raise InvalidInput("topics must be a non-empty list of topic names")
        if not (start_from in ("earliest", "latest") or (isinstance(start_from, int) and start_from >= 0)):
            raise InvalidInput(f"start_from must be 'earliest', 'latest' or a timestamp, got {start_from!r}")
        self._owns_conn = not isinstance(conn, Connection)
        self.conn = conn if isinstance(conn, Connection) else Connection(conn)
        self.group = check_group(group)
        self.topics = tuple(check_topic(t) for t in topics)
        for t in self.topics:
            self.conn.topic(t)
        self.exclusive = exclusive
        self.start_from = start_from
        self.member_id = member_id or uuid.uuid4().hex[:12]
        self.auto_commit_interval_s = auto_commit_interval_s
        self.rebalance_interval_s = rebalance_interval_s
        self.poll_interval_s = poll_interval_s
        self.offsets = GroupOffsets(self.conn, self.group)
        self.reader = Reader(self.conn)
        self._positions: dict[TopicPartition, int] = {}
        self._delivered: dict[TopicPartition, int] = {}
        self._committed: dict[TopicPartition, int] = {}
        self._rr = 0
        self._last_rebalance = 0.0
        self._last_commit = time.monotonic()
        self._closed = False
        #: A partition's error met after other records were read: the next poll raises it.
        self._failed: LlogError | None = None
        self.transactional = transactional
        #: Partitions revoked with records delivered past their committed offset: a
        #: transaction holding those records must abort (another member reads them again).
        self.lost_uncommitted: set[TopicPartition] = set()
        self.membership: Membership | None = None
        if exclusive:
            self.epoch = bump_epoch(self.conn, self.group, self.member_id)
            self._assign(self._all_partitions())
        else:
            self.membership = Membership(self.conn, self.group, self.member_id, ttl_s=session_ttl_s)
            self.membership.join()
            self._rebalance(force=True)

    @property
    def fence(self) -> Fence:
        """What this consumer's commits prove: its epoch, or its current session's
        ownership (read at each commit: a rejoin is a new session)."""
        if self.membership is None:
            return Fence(epoch=self.epoch)
        return Fence(owner=self.membership.token)

    # -- assignment --------------------------------------------------------------
    def _all_partitions(self) -> list[TopicPartition]:
        return [(t, p) for t in self.topics for p in range(self.conn.topic(t, refresh=True).partitions)]

    def assignment(self) -> set[TopicPartition]:
        return set(self._positions)

    def _assign(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            if tp not in self._positions:
                pos = self._initial_position(*tp)
                self._positions[tp] = pos
                self._delivered[tp] = pos
                if self.transactional:  # nothing to commit until a record is delivered
                    self._committed.setdefault(tp, pos)

    def _initial_position(self, topic: str, partition: int) -> int:
        c = self.offsets.get(topic, partition)
        if c is not None:
            self._committed[(topic, partition)] = c.offset
            return c.offset
        lso, nxt = self.reader.high_watermark(topic, partition)
        if self.start_from == "earliest":
            return lso
        if self.start_from == "latest":
            return nxt
        assert isinstance(self.start_from, int)
        found = offset_for_timestamp(self.reader, topic, partition, self.start_from)
        return nxt if found is None else found

    def _revoke(self, tps: set[TopicPartition]) -> None:
        if not self.transactional:
            try:
                self.commit({tp: self._delivered[tp] for tp in tps if tp in self._delivered})
            except LlogError as exc:
                log.warning("commit on revoke failed for %s: %s", sorted(tps), exc)
        self._forget(tps)

    def _forget(self, tps: Iterable[TopicPartition]) -> None:
        """Drop what this consumer knows of partitions it no longer owns."""
        if self.transactional:
            self.lost_uncommitted |= set(self.uncommitted()) & set(tps)
        for tp in list(tps):
            self._positions.pop(tp, None)
            self._delivered.pop(tp, None)
            self._committed.pop(tp, None)

    def _rebalance(self, force: bool = False) -> None:
        if self.membership is None:
            return
        now = time.monotonic()
        if not force and now - self._last_rebalance < self.rebalance_interval_s:
            return
        self._last_rebalance = now
        if self.membership.lost:
            log.warning("member %s lost its session; rejoining", self.member_id)
            self._forget(self._positions)
            self.membership.owned.clear()
            self.membership.join()
        owned = self.membership.sync(self._all_partitions(), self._revoke)
        self._forget(set(self._positions) - owned)
        self._assign(owned)

    # -- consuming -----------------------------------------------------------------
    def poll(self, max_records: int = 500, timeout_s: float = 1.0) -> list[ConsumedRecord]:
        """Up to ``max_records`` records from the assigned partitions (round robin),
        waiting up to ``timeout_s`` for any to arrive.

        Positions move only past records this call returns. When a partition fails
        part way (e.g. :class:`~llog.errors.OffsetOutOfRange` after retention, an
        unreadable blob), the records read before the failure are returned and the
        error is raised by the next ``poll``; a poll that has read nothing raises it at
        once. A failed partition stays at the first record it could not deliver."""
        if self._closed:
            raise LlogError("consumer is closed")
        if self._failed is not None:
            failed, self._failed = self._failed, None
            raise failed
        deadline = time.monotonic() + timeout_s
        while True:
            self._rebalance()
            # Before the fetch: what earlier polls returned, never what this one reads.
            self._maybe_auto_commit()
            before = dict(self._positions)
            out = self._fetch(max_records)
            if out or time.monotonic() >= deadline:
                return out
            if self._positions != before:
                continue  # moved past a compacted topic's gap: read on at once
            time.sleep(min(self.poll_interval_s, max(0.0, deadline - time.monotonic())))

    def _fetch(self, max_records: int) -> list[ConsumedRecord]:
        tps = sorted(self._positions)
        out: list[ConsumedRecord] = []
        order = [tps[(self._rr + i) % len(tps)] for i in range(len(tps))]
        self._rr += 1
        # One etcd round trip resolves every assigned partition (Reader.scan_many), so
        # a poll of idle partitions costs one read, not one per partition.
        progress: dict[TopicPartition, int] = {}
        try:
            for rec in self.reader.scan_many([(t, p, self._positions[(t, p)], None) for t, p in order],
                                             max_records=max_records, progress=progress):
                out.append(rec)
        except LlogError as exc:
            if not out:
                raise
            # The records read before the failure are returned; the error waits for
            # the next poll, so it is neither lost nor the cause of a lost record.
            log.warning("poll of group %s returns %d records; raising on the next poll: %s",
                        self.group, len(out), exc)
            self._failed = exc
        for rec in out:
            tp = (rec.topic, rec.partition)
            self._positions[tp] = rec.offset + 1
            self._delivered[tp] = rec.offset + 1
        # Past the offsets a key-compacted topic no longer holds, too: a budget that fell
        # in such a gap would otherwise read it again and again.
        for tp, done in progress.items():
            if done > self._positions.get(tp, done):
                self._positions[tp] = self._delivered[tp] = done
        return out

    def seek(self, topic: str, partition: int, offset: int) -> None:
        """Continue from ``offset`` (e.g. one stored with the application's output)."""
        tp = (topic, partition)
        if tp not in self._positions:
            raise InvalidInput(f"{topic}/{partition} is not assigned to this consumer")
        self._positions[tp] = offset
        self._delivered[tp] = offset

    def position(self, topic: str, partition: int) -> int:
        return self._positions[(topic, partition)]

    # -- committing ----------------------------------------------------------------
    def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> list[Committed]:
        """Commit ``offsets`` (default: everything delivered so far). An offset past
        what this consumer delivered raises :class:`CommitOutOfRange`; nothing is
        committed past delivery, so no record is silently skipped."""
        if self.transactional:
            raise InvalidInput(f"consumer of group {self.group!r} is transactional: commit its offsets with "
                               "Transaction.commit_offsets")
        done = []
        for (topic, partition), off in sorted(self.uncommitted(offsets).items()):
            c = self.offsets.commit(topic, partition, off, fence=self.fence, member=self.member_id)
            self._committed[(topic, partition)] = off
            done.append(c)
        self._last_commit = time.monotonic()
        return done

    def uncommitted(self, offsets: Mapping[TopicPartition, int] | None = None) -> dict[TopicPartition, int]:
        """Of ``offsets`` (default: the delivered positions), those not committed yet;
        :class:`CommitOutOfRange` for one past what this consumer delivered, so no
        record is silently skipped."""
        todo = dict(self._delivered) if offsets is None else dict(offsets)
        for (topic, partition), off in todo.items():
            delivered = self._delivered.get((topic, partition))
            if delivered is None or off > delivered:
                raise CommitOutOfRange(self.group, topic, partition, off, f"past the delivered position {delivered}")
        return {tp: off for tp, off in todo.items() if self._committed.get(tp) != off}

    def committed_by_transaction(self, offsets: Mapping[TopicPartition, int]) -> None:
        """A transaction committed ``offsets`` of this consumer's group."""
        self._committed.update((tp, off) for tp, off in offsets.items() if tp in self._positions)

    def rewind(self) -> None:
        """Back to the committed offsets (a transaction holding the records since was
        aborted, so they are delivered again)."""
        self.lost_uncommitted.clear()
        self._failed = None
        for tp in list(self._positions):
            self._committed.pop(tp, None)
            self._positions[tp] = self._delivered[tp] = self._initial_position(*tp)
            if self.transactional:
                self._committed.setdefault(tp, self._positions[tp])

    def _maybe_auto_commit(self) -> None:
        if (
            self.auto_commit_interval_s is not None
            and time.monotonic() - self._last_commit >= self.auto_commit_interval_s
        ):
            self.commit()

    def close(self, *, commit: bool | None = None) -> None:
        """Leave the group; commits delivered offsets first when auto-commit is on
        (or ``commit=True``)."""
        if self._closed:
            return
        self._closed = True
        do_commit = self.auto_commit_interval_s is not None if commit is None else commit
        try:
            if do_commit:
                self.commit()
        finally:
            try:
                if self.membership is not None:
                    self.membership.leave()
            finally:
                self.reader.close()
                if self._owns_conn:
                    self.conn.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
