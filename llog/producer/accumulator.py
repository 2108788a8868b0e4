"""The producer's buffer: pending groups per topic-partition, bounded in bytes.

Single-record sends to one partition share an open group (one ``AppendGroup``);
whole-group sends (the broker's, idempotent ones) stay groups of their own so their
offsets come back contiguous. Buffered bytes are released only when a flush has
resolved them, so the bound covers bytes in flight too.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from llog.errors import BackPressure, ProducerClosed
from llog.metrics import Metrics
from llog.names import TopicPartition
from llog.producer.put_budget import PutBudget
from llog.records import KafkaBatches, Record


@dataclass
class QueuedGroup:
    """One group of records queued for a flush, and the futures waiting on it:
    ``records`` resolve together through one ``AppendGroup``.

    ``futures`` pairs each waiting future with the index of its record, or ``None``
    for a future that wants the whole ``AppendResult``.
    """

    topic: str
    partition: int
    records: list[Record] = field(default_factory=list)
    futures: list[tuple[Future[Any], int | None]] = field(default_factory=list)
    nbytes: int = 0
    producer_id: str | None = None
    sequence: int | None = None
    producer_epoch: int | None = None
    #: Kafka record batches stored as they are (``records`` is then empty).
    kafka: KafkaBatches | None = None

    @property
    def count(self) -> int:
        return self.kafka.count if self.kafka is not None else len(self.records)


@dataclass(frozen=True, eq=False)  # compared by identity: tracked while in flight
class Drained:
    groups: list[QueuedGroup]
    nbytes: int
    reason: str


class Accumulator:
    """Thread-safe buffer between many senders and the one draining thread."""

    def __init__(self, max_batch_bytes: int, max_delay_s: float, max_buffered_bytes: int, metrics: Metrics,
                 budget: PutBudget | None = None) -> None:
        self.max_batch_bytes = max_batch_bytes
        self.max_delay_s = max_delay_s
        self.max_buffered_bytes = max_buffered_bytes
        self._metrics = metrics
        self._budget = budget
        self._held_since: float | None = None  # when the budget began holding a due batch
        self._cond = threading.Condition()
        self._groups: deque[QueuedGroup] = deque()
        self._open: dict[TopicPartition, QueuedGroup] = {}
        self._ready_bytes = 0  # buffered, not yet drained
        self._held_bytes = 0  # buffered or in flight
        self._inflight: list[Drained] = []  # drained, not yet released
        self._first_at: float | None = None
        self._flush_requested = 0
        self._closed = False

    # -- senders -----------------------------------------------------------------
    def add(self, group: QueuedGroup, timeout: float | None, *, single: bool) -> None:
        """Buffer ``group`` (or merge its one record into the partition's open group);
        block while the buffer is full, up to ``timeout`` seconds, then raise."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            # A group larger than the whole buffer still gets in once the buffer is empty.
            while not self._closed and self._held_bytes > 0 and (
                self._held_bytes + group.nbytes > self.max_buffered_bytes
            ):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    self._metrics.producer_backpressure.inc()
                    raise BackPressure(
                        f"producer buffer full ({self._held_bytes} of {self.max_buffered_bytes} bytes) "
                        f"for {group.topic}/{group.partition}; nothing was accepted"
                    )
                self._cond.wait(left)
            if self._closed:
                raise ProducerClosed(group.topic, group.partition)
            key = (group.topic, group.partition)
            target = self._open.get(key) if single else None
            if target is not None:
                base = len(target.records)
                target.records.extend(group.records)
                target.futures.extend((f, None if i is None else base + i) for f, i in group.futures)
                target.nbytes += group.nbytes
            else:
                self._groups.append(group)
                if single:
                    self._open[key] = group
            if self._first_at is None:
                # The flusher sleeps until a batch exists; start its delay clock.
                self._first_at = time.monotonic()
                self._cond.notify_all()
            self._ready_bytes += group.nbytes
            self._held_bytes += group.nbytes
            self._metrics.producer_queue_bytes.inc(group.nbytes)
            self._metrics.producer_queue_records.inc(group.count)
            if self._ready_bytes >= self.max_batch_bytes:
                self._cond.notify_all()

    def request_flush(self) -> None:
        with self._cond:
            self._flush_requested += 1
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def futures(self) -> list[Future[Any]]:
        """Every future buffered or in flight, taken atomically: a batch being drained
        is in exactly one of the two lists."""
        with self._cond:
            groups = [*self._groups, *(g for b in self._inflight for g in b.groups)]
            return [f for g in groups for f, _ in g.futures]

    # -- the flusher ---------------------------------------------------------------
    def drain(self, limit_bytes: int) -> Drained | None:
        """Wait until a batch is due (size, delay from the first buffered record and
        then the PUT budget, a flush, or close) and take up to ``limit_bytes`` of
        groups, oldest first. Returns ``None`` once closed and empty."""
        with self._cond:
            while True:
                if not self._groups:
                    if self._closed:
                        return None
                    self._flush_requested = 0
                    self._cond.wait()
                    continue
                now = time.monotonic()
                reason, wait = self._due(now)
                if reason is not None:
                    break
                self._cond.wait(wait)
            if self._budget is not None:
                self._budget.take(now)
            if self._held_since is not None:
                self._metrics.producer_budget_hold.observe(now - self._held_since)
                self._held_since = None
            taken: list[QueuedGroup] = []
            nbytes = 0
            while self._groups and (not taken or nbytes + self._groups[0].nbytes <= limit_bytes):
                g = self._groups.popleft()
                if self._open.get((g.topic, g.partition)) is g:
                    del self._open[(g.topic, g.partition)]
                taken.append(g)
                nbytes += g.nbytes
            self._ready_bytes -= nbytes
            self._first_at = time.monotonic() if self._groups else None
            if not self._groups:
                self._flush_requested = 0
            self._metrics.producer_queue_records.dec(sum(g.count for g in taken))
            batch = Drained(taken, nbytes, reason)
            self._inflight.append(batch)
            return batch

    def _due(self, now: float) -> tuple[str | None, float]:
        """Why a batch is due now, or ``None`` and how long to wait before asking again."""
        if self._ready_bytes >= self.max_batch_bytes:
            return "size", 0.0
        if self._closed:
            return "close", 0.0
        if self._flush_requested:
            return "flush", 0.0
        assert self._first_at is not None
        wait = self._first_at + self.max_delay_s - now
        if wait > 0:
            return None, wait
        if self._budget is not None:
            held = self._budget.wait_s(now)
            if held > 0:
                if self._held_since is None:
                    self._held_since = now
                return None, held
        return ("budget" if self._held_since is not None else "delay"), 0.0

    def release(self, batch: Drained) -> None:
        """A drained batch is resolved: its bytes no longer count against the bound."""
        with self._cond:
            self._inflight = [b for b in self._inflight if b is not batch]
            self._held_bytes -= batch.nbytes
            self._metrics.producer_queue_bytes.dec(batch.nbytes)
            self._cond.notify_all()

