"""The producer's one flusher thread: drain a batch, ``append_shared`` it, resolve
every future with its offset (or ``AppendResult``) or the partition's error."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from llog.errors import InvalidInput
from llog.metrics import Metrics
from llog.producer.accumulator import Accumulator, Pending
from llog.records import AppendGroup, Record
from llog.writer import AppendFailure, AppendResult, Writer

log = logging.getLogger(__name__)

#: Called on the flusher thread for every committed group, before its futures resolve.
CommitListener = Callable[[AppendResult, list[Record]], None]


class Sender:
    def __init__(
        self,
        writer: Writer,
        acc: Accumulator,
        metrics: Metrics,
        on_commit: CommitListener | None = None,
    ) -> None:
        self._writer = writer
        self._acc = acc
        self._metrics = metrics
        self._on_commit = on_commit
        self._inflight: list[Pending] = []
        self._lock = threading.Lock()
        # Bounded by the shared blob limit (with room for framing) so a drain never
        # builds a blob the writer refuses.
        self._limit = max(1, writer.config.max_blob_bytes // 2)
        self._thread = threading.Thread(target=self._run, name="llog-producer-sender", daemon=True)
        self._thread.start()

    def inflight_futures(self) -> list[Future[Any]]:
        with self._lock:
            return [f for g in self._inflight for f, _ in g.futures]

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            batch = self._acc.drain(self._limit)
            if batch is None:
                return
            with self._lock:
                self._inflight = batch.groups
            try:
                self._metrics.producer_flushes.labels(batch.reason).inc()
                self._metrics.producer_flush_bytes.observe(batch.nbytes)
                self._send(batch.groups)
            finally:
                with self._lock:
                    self._inflight = []
                self._acc.release(batch.nbytes)

    def _send(self, groups: list[Pending]) -> None:
        try:
            outcomes = self._writer.append_shared([
                AppendGroup(g.topic, g.partition, g.records, g.producer_id, g.sequence) for g in groups
            ])
        except InvalidInput as exc:
            if len(groups) == 1:
                _fail(groups[0], exc)
            else:
                # One sender's bad group must not fail the others coalesced with it.
                for g in groups:
                    self._send([g])
            return
        except BaseException as exc:  # every future must resolve, whatever went wrong
            log.warning("producer flush of %d groups failed: %s", len(groups), exc)
            for g in groups:
                _fail(g, exc)
            if not isinstance(exc, Exception):
                raise
            return
        for g, out in zip(groups, outcomes, strict=True):
            if isinstance(out, AppendFailure):
                _fail(g, out.error)
                continue
            if self._on_commit is not None:
                try:
                    self._on_commit(out, g.records)
                except Exception:
                    log.exception("commit listener failed for %s/%s", g.topic, g.partition)
            for f, i in g.futures:
                if not f.done():
                    f.set_result(out if i is None else out.start_offset + i)


def _fail(g: Pending, exc: BaseException) -> None:
    for f, _ in g.futures:
        if not f.done():
            f.set_exception(exc)
