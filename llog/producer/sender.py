"""The producer's send pipeline: drain a batch and encode its shared blob, PUT it,
commit it, resolve every future with its offset (or ``AppendResult``) or the
partition's error. A batch's groups for one partition share one partition-append
where they can (:func:`_merge`); each still gets its own contiguous offsets.

Up to ``max_inflight`` batches are in flight, of which up to ``max_inflight_puts`` are
being PUT at once. Three kinds of thread share the work: the drain thread encodes
each batch as it takes it, ``max_inflight_puts`` uploader threads PUT encoded blobs in
drain order, and one committer thread commits them strictly in drain order, so a
partition's second batch commits only after its first has resolved and offsets follow
acceptance order. An uploader goes from one PUT straight to the next without handing
over to another thread, so with one PUT in flight the store sees the load of a plain
sequential uploader while the next blob's encode and the previous one's commit run
during the PUT.

A group that fails with :class:`~llog.errors.SessionExpired` (the producer was paused
past its writer's session TTL between PUT and commit) was definitely not committed:
the committer writes it again under the writer's new session and commits that, up to
:data:`SESSION_RETRIES` times, before failing its futures with the (retriable) error.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import replace

from llog.errors import (
    BackPressure,
    InvalidInput,
    SessionExpired,
    TooManyUncompactedKeys,
    UnknownPartition,
    UnknownTopic,
)
from llog.metrics import Metrics
from llog.names import TopicPartition
from llog.producer.accumulator import Accumulator, Drained, QueuedGroup
from llog.records import AppendGroup, KafkaBatches, Record
from llog.writer import AppendFailure, AppendResult, EncodedBlob, StagedBlob, Writer

log = logging.getLogger(__name__)

#: Called on the committer thread once per committed partition-append (every group
#: merged into it, records in offset order, and their encoded body as the WAL slice
#: holds it) before their futures resolve; calls for one partition come in offset order.
#: For Kafka record batches the record list is empty: the body holds the records.
CommitListener = Callable[[AppendResult, list[Record], memoryview], None]

#: A batch's groups merged into partition-appends (see :func:`_merge`).
_Units = list[list[QueuedGroup]]
#: A batch's pieces, each a blob (encoded, then PUT) or the error that failed it.
_Encoded = list[tuple[_Units, EncodedBlob | BaseException]]
_Staged = list[tuple[_Units, StagedBlob | BaseException]]

#: Times a batch whose session expired is written again under a new session.
SESSION_RETRIES = 3


def _merge(groups: list[QueuedGroup]) -> _Units:
    """Coalesce a partition's groups into one partition-append (one etcd txn instead
    of one per group): each keeps its records contiguous and gets its own offsets
    back. Groups with a producer id stay apart (their sequence names one batch), so do
    records and Kafka batches (one body holds one encoding), and nothing merges across
    a group kept apart, so a partition's records keep their order."""
    units: _Units = []
    open_units: dict[TopicPartition, list[QueuedGroup]] = {}
    for g in groups:
        key = (g.topic, g.partition)
        unit = open_units.get(key) if g.producer_id is None else None
        if unit is not None and (unit[0].kafka is None) == (g.kafka is None):
            unit.append(g)
            continue
        unit = [g]
        units.append(unit)
        if g.producer_id is None:
            open_units[key] = unit
        else:
            open_units.pop(key, None)
    return units


class Sender:
    def __init__(
        self,
        writer: Writer,
        acc: Accumulator,
        metrics: Metrics,
        on_commit: CommitListener | None = None,
        *,
        max_inflight: int,
        max_inflight_puts: int,
    ) -> None:
        self._writer = writer
        self._acc = acc
        self._metrics = metrics
        self._on_commit = on_commit
        self._slots = threading.Semaphore(max_inflight)
        # Bounded by the shared blob limit (with room for framing) so a drain never
        # builds a blob the writer refuses.
        self._limit = max(1, writer.config.max_blob_bytes // 2)
        # Encoded batches in drain order, for the uploaders; ``None`` ends one uploader.
        self._uploads: queue.SimpleQueue[tuple[_Encoded, Future[_Staged]] | None] = queue.SimpleQueue()
        # Drain order, for the committer; ``None`` ends it.
        self._order: queue.SimpleQueue[tuple[Drained, Future[_Staged]] | None] = queue.SimpleQueue()
        # Data keys of blobs staged and not yet fully committed (see :meth:`owns`).
        self._inflight_keys: set[str] = set()
        self._uploaders = [
            threading.Thread(target=self._upload_loop, name=f"llog-producer-put-{i}", daemon=True)
            for i in range(max_inflight_puts)
        ]
        self._committer = threading.Thread(target=self._commit_loop, name="llog-producer-commit", daemon=True)
        self._thread = threading.Thread(target=self._run, name="llog-producer-sender", daemon=True)
        for t in (*self._uploaders, self._committer, self._thread):
            t.start()

    def join(self, timeout: float | None = None) -> None:
        """Wait until the accumulator is closed and drained and every batch resolved."""
        for t in (self._thread, *self._uploaders, self._committer):
            t.join(timeout)

    def _run(self) -> None:
        try:
            while True:
                # Wait for a free slot before draining: while the pipeline is full,
                # records keep coalescing into the next, larger batch.
                self._slots.acquire()
                batch = self._acc.drain(self._limit)
                if batch is None:
                    self._slots.release()
                    return
                self._metrics.producer_flushes.labels(batch.reason).inc()
                self._metrics.producer_flush_bytes.observe(batch.nbytes)
                staged: Future[_Staged] = Future()
                self._order.put((batch, staged))
                try:
                    encoded = self._encode(batch.groups)
                except BaseException as exc:  # the committer fails the batch's futures
                    staged.set_exception(exc)
                    raise
                self._uploads.put((encoded, staged))
        finally:
            for _ in self._uploaders:
                self._uploads.put(None)
            self._order.put(None)

    def owns(self, data_key: str) -> bool:
        """Whether ``data_key`` is a blob this producer staged and has not finished
        committing (its commit listener calls are still to come)."""
        return data_key in self._inflight_keys

    def _encode(self, groups: list[QueuedGroup]) -> _Encoded:
        units = _merge(groups)
        try:
            # send() checked every record already (BatchingProducer._check).
            return [(units, self._writer.encode_shared(_groups(units), records_checked=True))]
        except TooManyUncompactedKeys as exc:
            # Only the partition compaction is behind on waits; the rest of the batch goes.
            behind = (exc.topic, exc.partition)
            rest = [g for g in groups if (g.topic, g.partition) != behind]
            refused = [g for g in groups if (g.topic, g.partition) == behind]
            return [(_merge(refused), exc), *(self._encode(rest) if rest else [])]
        except (InvalidInput, UnknownTopic, UnknownPartition) as exc:
            if len(groups) == 1:
                return [(units, exc)]
            # One sender's bad group (or a topic deleted since it was sent) must not
            # fail the others coalesced with it.
            return [piece for g in groups for piece in self._encode([g])]
        except Exception as exc:
            return [(units, exc)]

    def _upload_loop(self) -> None:
        while (item := self._uploads.get()) is not None:
            encoded, staged = item
            pieces: _Staged = []
            try:
                for units, blob in encoded:
                    if isinstance(blob, EncodedBlob):
                        try:
                            put = self._writer.put_encoded(blob)
                        except Exception as exc:
                            pieces.append((units, exc))
                            continue
                        self._inflight_keys.add(put.data_key)
                        pieces.append((units, put))
                    else:
                        pieces.append((units, blob))
            except BaseException as exc:  # the committer fails the batch's futures
                for _, done in pieces:
                    if isinstance(done, StagedBlob):
                        self._inflight_keys.discard(done.data_key)
                staged.set_exception(exc)
                continue
            staged.set_result(pieces)

    def _commit_loop(self) -> None:
        while (item := self._order.get()) is not None:
            batch, staged = item
            pieces: _Staged = []
            try:
                pieces = staged.result()
                for groups, blob in pieces:
                    self._commit(groups, blob)
            except BaseException as exc:  # every future must resolve, whatever went wrong
                for g in batch.groups:
                    _fail(g, exc)
                if not isinstance(exc, Exception):
                    raise
            finally:
                for _, blob in pieces:
                    if isinstance(blob, StagedBlob):
                        self._inflight_keys.discard(blob.data_key)
                self._acc.release(batch)
                self._slots.release()

    def _commit(self, units: _Units, staged: StagedBlob | BaseException) -> None:
        if isinstance(staged, BaseException):
            if not isinstance(staged, (InvalidInput, BackPressure)):
                log.warning("producer flush of %d groups failed: %s", sum(map(len, units)), staged)
            for u in units:
                for g in u:
                    _fail(g, staged)
            return
        for attempt in range(SESSION_RETRIES + 1):
            retry = self._commit_once(units, staged, last=attempt == SESSION_RETRIES)
            if attempt:  # a blob written again here; the first one is the commit loop's
                self._inflight_keys.discard(staged.data_key)
            if not retry:
                return
            log.warning("session of blob %s expired before its commit; writing %d groups again",
                        staged.data_key, sum(map(len, retry)))
            units = retry
            try:
                staged = self._writer.put_encoded(self._writer.encode_shared(_groups(units), records_checked=True))
            except Exception as exc:
                for u in units:
                    for g in u:
                        _fail(g, exc)
                return
            self._inflight_keys.add(staged.data_key)

    def _commit_once(self, units: _Units, staged: StagedBlob, *, last: bool) -> _Units:
        """Commit ``staged`` and resolve its groups' futures; return the units to write
        again because the blob's session expired (none when ``last``)."""
        retry: _Units = []
        try:
            outcomes = self._writer.commit_staged(staged)
        except Exception as exc:
            log.warning("producer commit of %d groups failed: %s", sum(map(len, units)), exc)
            for u in units:
                for g in u:
                    _fail(g, exc)
            return retry
        for i, (u, out) in enumerate(zip(units, outcomes, strict=True)):
            if isinstance(out, AppendFailure):
                if isinstance(out.error, SessionExpired) and not last:
                    retry.append(u)
                    continue
                for g in u:
                    _fail(g, out.error)
                continue
            # A retried batch's result is its first commit's: this blob's body is not
            # what the log holds at those offsets (only what etcd committed is).
            if self._on_commit is not None and not out.duplicate:
                self._notify(out, _records(u), staged.body(i))
            start = out.start_offset
            for g in u:
                # A merged group's own slice of the shared partition-append.
                mine = out if len(u) == 1 else replace(
                    out, start_offset=start, end_offset=start + g.count - 1, count=g.count
                )
                start += g.count
                _resolve(g, mine)
        return retry

    def _notify(self, out: AppendResult, records: list[Record], body: memoryview) -> None:
        assert self._on_commit is not None
        try:
            self._on_commit(out, records, body)
        except Exception:
            log.exception("commit listener failed for %s/%s", out.topic, out.partition)


def _records(unit: list[QueuedGroup]) -> list[Record]:
    """A unit's records in order (none for Kafka batches: their body holds them)."""
    return unit[0].records if len(unit) == 1 else [r for g in unit for r in g.records]


def _groups(units: _Units) -> list[AppendGroup]:
    """One append group per unit: a merged unit's records (or Kafka batches)
    concatenated in order."""
    return [
        AppendGroup(
            u[0].topic, u[0].partition,
            _records(u) if u[0].kafka is None else KafkaBatches.join([g.kafka for g in u if g.kafka is not None]),
            u[0].producer_id, u[0].sequence, u[0].producer_epoch,
        )
        for u in units
    ]


def _resolve(g: QueuedGroup, out: AppendResult) -> None:
    for f, i in g.futures:
        if not f.done():
            f.set_result(out if i is None else out.start_offset + i)


def _fail(g: QueuedGroup, exc: BaseException) -> None:
    for f, _ in g.futures:
        if not f.done():
            f.set_exception(exc)
