"""BatchingProducer: many threads send records; one draining thread coalesces them
into shared WAL appends, pipelined (``llog.producer.sender``): the next blob's encode
and PUT overlap the previous blob's commits, and each partition's batches commit in
the order they were accepted.

>>> with BatchingProducer(conn) as p:                       # doctest: +SKIP
...     fut = p.send("orders", None, b"hello", key=b"customer-7")
...     fut.result()                                          # the record's offset
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, wait
from typing import Any

from llog.config import LlogConfig
from llog.connection import Connection
from llog.errors import InvalidInput
from llog.names import check_topic
from llog.partitioner import partition_for_key
from llog.producer.accumulator import Accumulator, QueuedGroup
from llog.producer.put_budget import PutBudget
from llog.producer.sender import CommitListener, Sender
from llog.records import Headers, KafkaBatches, Record, buffered_size
from llog.write.validation import check_keyed
from llog.writer import AppendResult, Writer, check_records

__all__ = ["BatchingProducer"]


def _future() -> Future[Any]:
    # Running futures cannot be cancelled: an accepted record is sent regardless, and
    # a waiter giving up (an HTTP client going away) must not cancel it.
    f: Future[Any] = Future()
    f.set_running_or_notify_cancel()
    return f


class BatchingProducer:
    """Thread-safe; see the module docstring.

    Batches close at ``config.batch_max_bytes`` or ``config.batch_max_delay_ms`` after
    their first record; at most ``config.batch_max_buffered_bytes`` are buffered or in
    flight, beyond which ``send`` blocks up to ``send_timeout_s`` and then raises
    :class:`~llog.errors.BackPressure`. A record for a partition compaction has fallen
    behind on (:class:`~llog.errors.TooManyUncompactedKeys`, also a retriable
    ``BackPressure``) fails its future alone; the rest of its batch is sent. Up to
    ``max_inflight`` batches
    (``config.batch_max_inflight``) are being encoded, PUT or committed at once; ``1``
    sends one batch at a time. Of those, at most ``max_inflight_puts``
    (``config.batch_max_inflight_puts``, capped at ``max_inflight``) are being PUT at
    once: ``max_inflight=2, max_inflight_puts=1`` keeps one PUT going back to back
    while the next blob encodes and the previous one commits. ``put_rate`` (PUTs per
    second, 0: none) sets a PUT budget (:mod:`llog.producer.put_budget`): a batch due
    by its delay then waits for a token, of which ``put_burst`` can be saved up; batches
    full by size, ``flush`` and ``close`` never wait. The broker sets it from
    ``config.broker_put_rate``.
    """

    def __init__(
        self,
        target: Writer | Connection | LlogConfig | None = None,
        *,
        send_timeout_s: float | None = 30.0,
        on_commit: CommitListener | None = None,
        max_inflight: int | None = None,
        max_inflight_puts: int | None = None,
        put_rate: float = 0.0,
        put_burst: int = 50,
    ) -> None:
        self._owns_writer = not isinstance(target, Writer)
        self.writer = target if isinstance(target, Writer) else Writer(target)
        self.conn = self.writer.conn
        cfg = self.writer.config
        self.send_timeout_s = send_timeout_s
        inflight = cfg.batch_max_inflight if max_inflight is None else max_inflight
        puts = cfg.batch_max_inflight_puts if max_inflight_puts is None else max_inflight_puts
        if inflight < 1 or puts < 1 or put_rate < 0 or put_burst < 1:
            if self._owns_writer:
                self.writer.close()
            raise InvalidInput(f"max_inflight ({inflight}) and max_inflight_puts ({puts}) must be >= 1, "
                               f"put_rate ({put_rate}) >= 0 and put_burst ({put_burst}) >= 1")
        budget = PutBudget(put_rate, put_burst, time.monotonic()) if put_rate > 0 else None
        self._acc = Accumulator(
            cfg.batch_max_bytes, cfg.batch_max_delay_ms / 1000.0, cfg.batch_max_buffered_bytes, self.conn.metrics,
            budget,
        )
        self._sender = Sender(
            self.writer, self._acc, self.conn.metrics, on_commit,
            max_inflight=inflight, max_inflight_puts=min(puts, inflight),
        )
        self._closed = False
        self._close_lock = threading.Lock()

    def send(
        self,
        topic: str,
        partition: int | None,
        value: bytes | None,
        key: bytes | None = None,
        headers: Headers | None = None,
        timestamp: int | None = None,
        *,
        timeout: float | None = None,
    ) -> Future[int]:
        """Buffer one record; the future resolves to its offset. ``partition=None``
        picks the partition from ``key`` (:func:`llog.partitioner.partition_for_key`).
        Bad input raises here; nothing is buffered then."""
        check_topic(topic)
        if partition is None:
            if key is None:
                raise InvalidInput(f"send to {topic!r} needs a partition or a key")
            partition = partition_for_key(key, self.conn.topic(topic).partitions)
        rec = self._check(topic, partition, [Record(value, key, timestamp, headers or ())])[0][0]
        fut: Future[int] = _future()
        self._acc.add(
            QueuedGroup(topic, partition, [rec], [(fut, 0)], buffered_size(rec)),
            self._timeout(timeout),
            single=True,
        )
        return fut

    def send_group(
        self,
        topic: str,
        partition: int,
        records: Sequence[Record | bytes] | KafkaBatches,
        *,
        producer_id: str | None = None,
        sequence: int | None = None,
        producer_epoch: int | None = None,
        timeout: float | None = None,
    ) -> Future[AppendResult]:
        """Buffer ``records`` as one append (contiguous offsets); the future resolves to
        its :class:`~llog.writer.AppendResult` or raises the partition's error.

        Without ``producer_id``, groups for one partition in one batch may share one
        partition-append (one etcd transaction): the result's offsets and count are
        this group's own, while ``index_key``, ``data_key`` and ``append_id`` are the
        shared append's. ``records`` may be Kafka record batches checked by
        :func:`llog.codec.kafka_body.check_batches`, stored as they are."""
        if not records:
            raise InvalidInput(f"empty group for {topic}/{partition}")
        fut: Future[AppendResult] = _future()
        if isinstance(records, KafkaBatches):
            self.conn.check_partition(topic, partition)
            check_keyed(self.conn, topic, partition, records)
            group = QueuedGroup(topic, partition, [], [(fut, None)], len(records.data), producer_id=producer_id,
                                sequence=sequence, producer_epoch=producer_epoch, kafka=records)
        else:
            recs, nbytes = self._check(topic, partition, records)
            group = QueuedGroup(topic, partition, recs, [(fut, None)], nbytes, producer_id=producer_id,
                                sequence=sequence, producer_epoch=producer_epoch)
        self._acc.add(group, self._timeout(timeout), single=False)
        return fut

    def owns(self, data_key: str) -> bool:
        """Whether ``data_key`` names a blob of this producer whose commit is under
        way: a watcher that sees it in a partition's ``pending`` can leave the news to
        the commit listener, which runs before the sends resolve."""
        return self._sender.owns(data_key)

    def flush(self, timeout: float | None = None) -> None:
        """Send everything buffered now and wait until it has resolved."""
        futures: list[Future[Any]] = self._acc.futures()
        self._acc.request_flush()
        wait(futures, timeout)

    def close(self) -> None:
        """Refuse new sends, send everything accepted, resolve every future."""
        with self._close_lock:  # a second caller waits for the drain too
            if self._closed:
                return
            self._acc.close()
            self._sender.join()
            if self._owns_writer:
                self.writer.close()
            self._closed = True

    def __enter__(self) -> BatchingProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _timeout(self, timeout: float | None) -> float | None:
        return self.send_timeout_s if timeout is None else timeout

    def _check(
        self, topic: str, partition: int, records: Sequence[Record | bytes]
    ) -> tuple[list[Record], int]:
        """The records as :func:`check_records` accepts them, and their buffered size."""
        self.conn.check_partition(topic, partition)
        # Records without a timestamp keep None: the writer stamps append time when it
        # builds the blob (a new Record per record here cost a quarter of a send).
        limit = self.writer.config.max_record_bytes
        recs, cols, lengths = check_records(topic, partition, records, limit)
        check_keyed(self.conn, topic, partition, cols[1])
        if lengths is not None:  # no headers: the lengths the check measured are the size
            return list(recs), sum(lengths[0]) + sum(lengths[1])
        return list(recs), sum(map(buffered_size, recs))
