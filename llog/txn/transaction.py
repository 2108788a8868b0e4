"""``Transaction``: the SDK's transactional producer (protocol/README.md §15). Appends to
any partitions and a consumer group's offsets become visible together, at one etcd
revision, or never — the exactly-once consume-transform-produce loop:

>>> with Consumer(conn, "etl", ["in"], transactional=True) as c, \\
...      Transaction(conn, "etl-1") as txn:                    # doctest: +SKIP
...     while True:
...         recs = c.poll()
...         for r in recs:
...             txn.append("out", r.partition, [transform(r.value)])
...         txn.commit_offsets(c)       # the records' input offsets, in the transaction
...         txn.commit()                # outputs and offsets at once; on error: abort

Opening one fences every older instance of the same transactional id (their ongoing
transaction is aborted, their later steps refused with :class:`TransactionFenced`).
One object runs one transaction after another; the first append or offset of each
begins it. Leaving the ``with`` block aborts a transaction not committed.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Iterable, Sequence

from llog.config import LlogConfig
from llog.connection import Connection
from llog.errors import InvalidInput, LlogError, NotAssigned, TransactionFenced
from llog.groups.consumer import Consumer
from llog.names import TopicPartition
from llog.records import AppendGroup, KafkaBatches, Record
from llog.txn.coordinator import Coordinator, check_transactional_id
from llog.txn.staging import Staged, stage
from llog.write.commit_plan import kafka_next_sequence
from llog.write.validation import GroupInput
from llog.writer import Writer

log = logging.getLogger(__name__)


class Transaction:
    """The producer of transactional id ``transactional_id``: one transaction at a
    time, committed with :meth:`commit` or discarded with :meth:`abort`. Not
    thread-safe (one loop drives it, as Kafka's transactional producer)."""

    def __init__(self, conn: Connection | LlogConfig | None, transactional_id: str, *,
                 timeout_ms: int = 60_000) -> None:
        self._owns_conn = not isinstance(conn, Connection)
        self.conn = conn if isinstance(conn, Connection) else Connection(conn)
        self.transactional_id = check_transactional_id(transactional_id)
        self._coordinator = Coordinator(self.conn)
        self._writer = Writer(self.conn)
        try:
            self.producer_id, self.epoch = self._coordinator.init_producer(transactional_id, timeout_ms)
        except BaseException:
            self._close_parts()
            raise
        #: Each partition's next sequence in this epoch (§8.7's window, per transaction record).
        self._sequences: dict[TopicPartition, int] = {}
        self._partitions: set[TopicPartition] = set()
        self._groups: set[str] = set()
        #: Consumers whose offsets this transaction holds, with those offsets.
        self._consumers: list[tuple[Consumer, dict[TopicPartition, int]]] = []
        self._closed = False

    @property
    def ongoing(self) -> bool:
        """Whether a transaction has begun (an append or offsets) and not yet ended."""
        return bool(self._partitions or self._groups)

    def append(self, topic: str, partition: int, records: Sequence[Record | bytes]) -> None:
        """Stage ``records`` for ``topic/partition`` in the transaction (invisible to
        every reader until :meth:`commit`)."""
        self.append_shared([AppendGroup(topic, partition, records)])

    def append_shared(self, groups: Iterable[GroupInput]) -> None:
        """Stage many groups through one shared WAL blob. Bad input raises before
        anything is staged; any failure leaves the transaction for :meth:`abort`."""
        self._check_open()
        seqs = dict(self._sequences)
        numbered = []
        for g in groups:
            g = g if isinstance(g, AppendGroup) else AppendGroup(*g)
            tp = (g.topic, g.partition)
            seq = seqs.get(tp, 0)
            numbered.append(AppendGroup(g.topic, g.partition, g.records, str(self.producer_id), seq, self.epoch))
            n = g.records.count if isinstance(g.records, KafkaBatches) else len(g.records)
            seqs[tp] = kafka_next_sequence(seq, n)
        encoded = self._writer.encode_shared(numbered)  # bad input raises here: nothing added or staged
        new = [tp for tp in dict.fromkeys((g.topic, g.partition) for g in numbered) if tp not in self._partitions]
        try:
            if new:
                self._coordinator.add_partitions(self.transactional_id, self.producer_id, self.epoch, new)
                self._partitions.update(new)
        except BaseException:
            self._writer.release_staged(encoded)
            raise
        blob = self._writer.put_encoded(encoded)  # releases the session itself if it fails
        try:
            outcomes = stage(self.conn, self.transactional_id, self.producer_id, self.epoch, blob)
        finally:
            self._writer.release_staged(blob)
        for out in outcomes:
            if not isinstance(out, Staged):
                raise out
        self._sequences = seqs

    def commit_offsets(self, consumer: Consumer, offsets: dict[TopicPartition, int] | None = None) -> None:
        """Commit ``consumer``'s offsets (default: every record it delivered) with this
        transaction, fenced as its own commits are (its member session's ownership, or
        its exclusive epoch): a rebalance before :meth:`commit` aborts the transaction."""
        self._check_open()
        if not consumer.transactional:
            raise InvalidInput(f"consumer of group {consumer.group!r} must be opened with transactional=True, "
                               "or a rebalance would commit its offsets outside the transaction")
        todo = consumer.uncommitted(offsets)
        if not todo:
            return
        if consumer.group not in self._groups:
            self._coordinator.add_group(self.transactional_id, self.producer_id, self.epoch, consumer.group)
            self._groups.add(consumer.group)
        fence = consumer.fence
        guard = None if fence.epoch is None else base64.b64encode(fence.epoch.encode()).decode()
        self._coordinator.stage_offsets(self.transactional_id, self.producer_id, self.epoch, consumer.group,
                                        [(t, p, o) for (t, p), o in sorted(todo.items())], guard, fence.owner)
        for c, held in self._consumers:
            if c is consumer:
                held.update(todo)
                return
        self._consumers.append((consumer, todo))

    def commit(self) -> None:
        """Make every staged append and offset visible at once. On any error the
        transaction is left for :meth:`abort` (:class:`NotAssigned` and
        :class:`TransactionFenced` have aborted it already)."""
        self._check_open()
        if not self.ongoing:
            return
        for c, _ in self._consumers:
            if c.lost_uncommitted:
                lost = sorted(c.lost_uncommitted)[0]
                self.abort()
                raise NotAssigned(c.group, lost[0], lost[1], -1, "revoked from this consumer while its records "
                                  f"were in transaction {self.transactional_id!r}, which was aborted")
        try:
            self._coordinator.end(self.transactional_id, self.producer_id, self.epoch, True)
        except (NotAssigned, TransactionFenced):  # aborted already
            self._ended(committed=False)
            raise
        self._ended(committed=True)

    def abort(self) -> None:
        """Discard the transaction: nothing of it is ever visible, and its consumers go
        back to their committed offsets to deliver its input again."""
        self._check_open()
        if self.ongoing:
            self._coordinator.end(self.transactional_id, self.producer_id, self.epoch, False)
        self._ended(committed=False)

    def _ended(self, *, committed: bool) -> None:
        for c, held in self._consumers:
            if committed:
                c.committed_by_transaction(held)
            else:
                c.rewind()
        self._consumers.clear()
        self._partitions.clear()
        self._groups.clear()

    def _check_open(self) -> None:
        if self._closed:
            raise LlogError(f"transaction {self.transactional_id!r} is closed")

    def close(self, *, abort: bool = True) -> None:
        """Abort a transaction not committed, then release the connection; idempotent.
        ``abort=False`` leaves it to its timeout or the id's next instance, as a
        process that crashed does."""
        if self._closed:
            return
        try:
            if abort and self.ongoing:
                self.abort()
        except LlogError as exc:  # it times out or the next instance aborts it
            log.warning("transaction %r: abort on close failed: %s", self.transactional_id, exc)
        finally:
            self._closed = True
            self._close_parts()

    def _close_parts(self) -> None:
        try:
            self._writer.close()
            self._coordinator.close()
        finally:
            if self._owns_conn:
                self.conn.close()

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
