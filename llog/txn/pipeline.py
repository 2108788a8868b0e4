"""Staging a transactional producer's requests, in order and together. A transactional
producer sends one request per partition (librdkafka) or per broker, several at once,
and each is answered only once staged (T2, spec §15.2). Staged one by one, a
transaction of 8 partitions costs 8 PUTs in a row; here the requests of one
transactional id that arrive while its previous blob is being staged go into the next
blob together — one PUT and one CAS on the record for all of them — and blobs of one id
are staged in the order their requests came, so sequences are judged in that order."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from llog.errors import LlogError
from llog.records import AppendGroup
from llog.txn.staging import Staged, stage
from llog.writer import Writer

log = logging.getLogger(__name__)

#: What one staged group comes to: staged (or a retry of a staged batch), or refused.
StageOutcome = Staged | LlogError


@dataclass
class _Request:
    groups: Callable[[], Sequence[AppendGroup]]
    outcomes: list[Future[StageOutcome]]
    producer: tuple[int, int]
    size: int
    _built: Sequence[AppendGroup] | None = None

    def prepared(self) -> Sequence[AppendGroup]:
        """The request's groups, built once (screening may read etcd) however often staged."""
        if self._built is None:
            self._built = self.groups()
        return self._built


@dataclass
class _Queue:
    requests: list[_Request] = field(default_factory=list)
    busy: bool = False


class StagePipeline:
    """Stages transactional requests through ``writer``; :meth:`close` waits for those
    submitted. Thread-safe."""

    def __init__(self, writer: Writer, workers: int = 8) -> None:
        self.writer = writer
        #: Requests of one blob hold at most half a blob's limit, so the blob fits.
        self.max_bytes = writer.config.max_blob_bytes // 2
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="llog-txn-stage")
        self._lock = threading.Lock()
        self._queues: dict[str, _Queue] = {}

    def submit(self, transactional_id: str, producer_id: int, epoch: int,
               groups: Callable[[], Sequence[AppendGroup]], n: int, size: int) -> list[Future[StageOutcome]]:
        """Stage the ``n`` groups ``groups()`` builds (on a pipeline thread: it may read
        etcd; ``size`` bytes of records) in the id's ongoing transaction; one future per
        group, in order."""
        req = _Request(groups, [Future() for _ in range(n)], (producer_id, epoch), size)
        with self._lock:
            q = self._queues.setdefault(transactional_id, _Queue())
            q.requests.append(req)
            if q.busy:
                return req.outcomes  # the running drain takes it next
            q.busy = True
        self._pool.submit(self._drain, transactional_id, q)
        return req.outcomes

    def _drain(self, transactional_id: str, q: _Queue) -> None:
        """Stage what is queued for the id, a blob at a time, until nothing is. Every
        request taken is answered, whatever goes wrong, and the id is never left busy."""
        while True:
            with self._lock:
                if not q.requests:
                    q.busy = False
                    del self._queues[transactional_id]
                    return
                batch = self._take(q)
            try:
                self._stage_all(transactional_id, batch)
            except BaseException as exc:  # not an LlogError: a bug or an unforeseen failure, answered
                log.exception("transaction %r: staging failed", transactional_id)
                for r in batch:
                    for f in r.outcomes:
                        if not f.done():
                            f.set_exception(exc)

    def _take(self, q: _Queue) -> list[_Request]:
        """The queue's first requests, of one producer instance, up to ``max_bytes``."""
        first = q.requests.pop(0)
        batch, size = [first], first.size
        while q.requests and q.requests[0].producer == first.producer and size + q.requests[0].size <= self.max_bytes:
            size += q.requests[0].size
            batch.append(q.requests.pop(0))
        return batch

    def _stage_all(self, transactional_id: str, batch: list[_Request]) -> None:
        try:
            got = self._stage(transactional_id, batch)
        except LlogError as exc:
            if len(batch) > 1 and not exc.retriable:  # one request's fault: not the others'
                for one in batch:
                    self._stage_all(transactional_id, [one])
                return
            got = [exc] * sum(len(r.outcomes) for r in batch)
        outcomes = iter(got)
        for r in batch:
            for f in r.outcomes:
                f.set_result(next(outcomes))

    def _stage(self, transactional_id: str, batch: list[_Request]) -> list[StageOutcome]:
        groups = [g for r in batch for g in r.prepared()]
        blob = self.writer.stage_shared(groups)
        try:
            producer_id, epoch = batch[0].producer
            return stage(self.writer.conn, transactional_id, producer_id, epoch, blob)
        finally:
            self.writer.release_staged(blob)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
