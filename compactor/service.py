"""The long-running compactor: ``python -m compactor`` / ``llog compactor``.

An apscheduler ``BackgroundScheduler`` runs these jobs (:mod:`compactor.schedule`):

* discovery (every ``compactor_discovery_interval_s``, first at start): the
  partitions with data (:mod:`compactor.discovery`) plus the seed targets from
  ``compactor_targets``; new ones are added, those of deleted topics pruned;
* a pass (every ``compactor_pass_interval_s``): a revision clock sample (persisted every
  30 s, :mod:`compactor.revision_clock`), then the known partitions, shuffled, each
  submitted to a bounded worker pool unless it already has a task queued or running;
* vacuum (every ``vacuum_interval_s``, if > 0);
* etcd history compaction (every ``etcd_compact_interval_s``, if > 0, first at start:
  :mod:`compactor.etcd_history`);
* producer-state expiry (every quarter of ``producer_state_ttl_s``, if > 0, first at
  start: :mod:`compactor.producer_expiry`);
* table syncs (every ``iceberg_sync_interval_s``, if > 0): each table topic's Iceberg
  table brought to its index (:mod:`compactor.tables`).

The last two judge age by etcd revisions each samples on this process's monotonic
clock (:mod:`compactor.revision_clock`).

A task claims the partition (``meta/compactor-claim``, bound to the process's lease,
created only if absent; a held claim is skipped and counted as a claim conflict),
applies retention, runs ``compact_once`` up to ``compactor_max_runs_per_task`` times
while there is work, and releases the claim. Several services can share partitions:
the claims keep them off each other's.

Shutdown (SIGTERM, SIGINT, :meth:`CompactorService.stop`): no new passes or tasks;
queued tasks are dropped, running ones finish their current ``compact_once`` within
``compactor_shutdown_timeout_s``. Then the lease is revoked, which frees every claim
at once and makes any task still running fail its next stage guard — its compaction
record stays for the next claimant to finish.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import random
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler

from compactor.claims import LeaseKeeper, process_owner, release_claim, try_claim
from compactor.compact import COMPACTED, DAMAGED, Compactor
from compactor.discovery import discover
from compactor.etcd_history import EtcdHistoryCompactor
from compactor.http import HttpServer
from compactor.metrics import compactor_metrics, register_cost_estimate
from compactor.planner import read_cursor
from compactor.producer_expiry import ProducerExpiry
from compactor.retention import apply_retention
from compactor.revision_clock import RevisionClock
from compactor.schedule import ServiceJobs, schedule_jobs
from compactor.stages import StageHook
from compactor.tables import TableSyncer
from compactor.vacuum import vacuum
from llog.config import LlogConfig
from llog.connection import Connection
from llog.errors import ClaimConflict, ClaimLost, ConfigError, LlogError, UnknownPartition, UnknownTopic
from llog.names import TopicPartition, check_partition, check_topic
from llog.state.control import read_control

log = logging.getLogger(__name__)


def parse_targets(text: str | None) -> list[tuple[str, int | None]]:
    """``"orders,events:3"`` → ``[("orders", None), ("events", 3)]`` (None: every
    partition). :class:`ConfigError` on a malformed entry."""
    out: list[tuple[str, int | None]] = []
    for raw in (text or "").split(","):
        item = raw.strip()
        if not item:
            continue
        topic, sep, part = item.rpartition(":")
        try:
            if sep:
                out.append((check_topic(topic), check_partition(topic, int(part))))
            else:
                out.append((check_topic(item), None))
        except (LlogError, ValueError) as exc:
            raise ConfigError(f"compactor target {item!r}: {exc}") from exc
    return out


@contextlib.contextmanager
def stop_signals() -> Iterator[threading.Event]:
    """An event that SIGTERM or SIGINT sets while the block runs (main thread only);
    the previous handlers again after it."""
    got = threading.Event()
    previous = {s: signal.signal(s, lambda *_: got.set()) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield got
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


class CompactorService:
    """Compacts every partition it knows of, in the background, until stopped.

    >>> with CompactorService(LlogConfig.from_env()) as svc:     # doctest: +SKIP
    ...     svc.wait()                                           # until SIGTERM
    """

    def __init__(
        self,
        config: LlogConfig,
        *,
        owner: str | None = None,
        hook: StageHook | None = None,
        http: bool = True,
    ) -> None:
        self.config = config
        self.owner = owner or process_owner()
        self._seeds = parse_targets(config.compactor_targets)
        self.conn = Connection(config)
        self.metrics = compactor_metrics(self.conn.metrics)
        register_cost_estimate(self.conn.metrics, config)
        self.compactor = Compactor(self.conn, hook=hook, metrics=self.metrics)
        self.etcd_history = EtcdHistoryCompactor(
            # Its own clock, never loaded from the persisted samples: one compactor host
            # whose wall clock is behind must not make history compaction run ahead,
            # which the resolution of unknown commit outcomes reads (spec §8.5, §12.1).
            self.conn, RevisionClock(self.conn), config.etcd_compact_interval_s, self.metrics
        )
        self.producer_expiry = ProducerExpiry(
            self.conn, self.compactor.clock, config.producer_state_ttl_s, self.metrics
        )
        self.tables = TableSyncer(self.conn, self.metrics)
        self._targets: set[TopicPartition] = set()
        self._inflight: set[TopicPartition] = set()
        self._pending_seen: dict[TopicPartition, bool] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._stopped = threading.Event()
        self._idle = threading.Condition(self._lock)
        self._pool = ThreadPoolExecutor(config.compactor_workers, thread_name_prefix="llog-compact")
        self._scheduler = BackgroundScheduler(daemon=True)
        self._keeper: LeaseKeeper | None = None
        self._http = (
            HttpServer(self.health, self.conn.metrics, config.compactor_host, config.compactor_port)
            if http else None
        )
        self.started = False

    # -- lifecycle ---------------------------------------------------------------
    def start(self) -> CompactorService:
        """Start the lease, the scheduler and the HTTP server; return at once."""
        cfg = self.config
        self._keeper = LeaseKeeper(self.conn.etcd, cfg.compactor_claim_ttl_s)
        jobs = ServiceJobs(
            self.discover, self.run_pass, self.run_vacuum, self.compact_etcd, self.expire_producers, self.sync_tables
        )
        schedule_jobs(self._scheduler, cfg, jobs)
        if cfg.etcd_compact_interval_s <= 0:
            log.warning("etcd history compaction is off (LLOG_ETCD_COMPACT_INTERVAL_S=0): etcd needs "
                        "--auto-compaction-mode/--auto-compaction-retention, or it fills its space quota")
        self._scheduler.start()
        if self._http is not None:
            self._http.start()
        self.started = True
        log.info("compactor %s started (%d workers)", self.owner, cfg.compactor_workers)
        return self

    def stop(self) -> None:
        """Stop gracefully (see the module doc); idempotent."""
        if self._stopping.is_set():
            self._stopped.wait()
            return
        self._stopping.set()
        try:
            if self._scheduler.running:
                self._scheduler.shutdown(wait=True)
            self._pool.shutdown(wait=False, cancel_futures=True)
            deadline = time.monotonic() + self.config.compactor_shutdown_timeout_s
            with self._idle:
                while self._inflight and time.monotonic() < deadline:
                    self._idle.wait(max(0.0, deadline - time.monotonic()))
                left = sorted(self._inflight)
            if left:
                log.warning("abandoning %d in-flight compactions at shutdown: %s", len(left), left)
            if self._keeper is not None:
                self._keeper.close(revoke=True)
            self._pool.shutdown(wait=True)
            if self._http is not None:
                self._http.stop()
            self.compactor.close()
            self.tables.close()
            self.conn.close()
        finally:
            self._stopped.set()
        log.info("compactor %s stopped", self.owner)

    def wait(self, signalled: threading.Event | None = None) -> None:
        """Block until SIGTERM or SIGINT (main thread only), then :meth:`stop`.
        ``signalled``: the event of a :func:`stop_signals` block the caller entered
        before :meth:`start` (so a signal right after start-up is not missed)."""
        with contextlib.ExitStack() as stack:
            got = signalled if signalled is not None else stack.enter_context(stop_signals())
            while not got.wait(0.5) and not self._stopping.is_set():
                pass
        self.stop()

    def __enter__(self) -> CompactorService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- state ---------------------------------------------------------------------
    @property
    def http_port(self) -> int | None:
        """The port the HTTP endpoints listen on (None without HTTP)."""
        return self._http.port if self._http is not None else None

    @property
    def targets(self) -> set[TopicPartition]:
        with self._lock:
            return set(self._targets)

    def health(self) -> tuple[bool, dict[str, Any]]:
        """``/health``: healthy while running and the lease keep-alive succeeds."""
        keeper = self._keeper
        lease_ok = keeper is not None and keeper.healthy()
        ok = self.started and not self._stopping.is_set() and lease_ok
        with self._lock:
            details = {
                "owner": self.owner,
                "partitions": len(self._targets),
                "inflight": len(self._inflight),
                "lease_ok": lease_ok,
            }
        return ok, details

    # -- jobs ------------------------------------------------------------------------
    def _seed_targets(self, topics: dict[str, int]) -> set[TopicPartition]:
        found: set[TopicPartition] = set()
        for topic, part in self._seeds:
            n = topics.get(topic)
            if n is None:
                log.warning("seed target topic %r does not exist (yet)", topic)
            elif part is None:
                found.update((topic, p) for p in range(n))
            elif part < n:
                found.add((topic, part))
        return found

    def discover(self) -> None:
        """Add newly found partitions and the seed targets; prune deleted topics'."""
        try:
            d = discover(self.conn)
        except LlogError as exc:
            log.warning("discovery failed: %s", exc)
            return
        found = d.partitions | self._seed_targets(d.topics)
        with self._lock:
            added = found - self._targets
            gone = {tp for tp in self._targets if tp[0] not in d.topics}
            self._targets = (self._targets | found) - gone
            for tp in gone:
                self._pending_seen.pop(tp, None)
            total = len(self._targets)
        self.metrics.partitions.set(total)
        for t, p in gone:
            _forget_gauge(self.metrics.lag, t, p)
        if added or gone:
            log.info("compaction targets: +%d -%d, %d in all", len(added), len(gone), total)

    def run_pass(self) -> int:
        """Submit a task for every known partition without one; return how many."""
        if self._stopping.is_set():
            return 0
        try:  # a sample every pass, persisted now and then (compactor/revision_clock.py)
            self.compactor.clock.observe()
            self.compactor.clock.save_if_due()
        except LlogError as exc:
            log.warning("revision clock sample failed: %s", exc)
        with self._lock:
            todo = list(self._targets - self._inflight)
            random.shuffle(todo)
            self._inflight.update(todo)
            self.metrics.inflight.set(len(self._inflight))
        submitted = 0
        for tp in todo:
            try:
                fut: Future[None] = self._pool.submit(self._task, *tp)
            except RuntimeError:  # the pool is shutting down
                self._done(tp)
                continue
            fut.add_done_callback(functools.partial(self._cancelled, tp))
            submitted += 1
        return submitted

    def run_vacuum(self) -> None:
        if self._stopping.is_set():
            return
        try:
            vacuum(self.conn)
        except LlogError as exc:
            log.warning("vacuum failed: %s", exc)

    def sync_tables(self) -> None:
        if not self._stopping.is_set():
            self.tables.run()

    def compact_etcd(self) -> None:
        if self._stopping.is_set():
            return
        try:
            self.etcd_history.run()
        except LlogError as exc:
            log.warning("etcd history compaction failed: %s", exc)

    def expire_producers(self) -> None:
        if self._stopping.is_set():
            return
        try:
            self.producer_expiry.run(self.targets)
        except LlogError as exc:
            log.warning("producer-state expiry failed: %s", exc)

    # -- one partition ------------------------------------------------------------------
    def _task(self, topic: str, partition: int) -> None:
        tp = (topic, partition)
        try:
            if self._stopping.is_set():
                return
            self._compact(topic, partition)
        finally:
            self._done(tp)

    def _compact(self, topic: str, partition: int) -> None:
        keeper = self._keeper
        assert keeper is not None
        try:
            got = try_claim(self.conn, topic, partition, keeper.lease, self.owner)
        except LlogError as exc:
            self._failed(topic, partition, exc)
            return
        if isinstance(got, ClaimConflict):
            self.metrics.claim_conflicts.inc()
            log.debug("%s", got)
            return
        try:
            meta = self.conn.topic(topic)
            # Retention, or only the index keys DeleteRecords left below the log start.
            apply_retention(self.conn, topic, partition, claim=got, clock=self.compactor.clock)
            for _ in range(self.config.compactor_max_runs_per_task):
                res = self.compactor.compact_once(topic, partition, claim=got)
                if res.outcome not in (COMPACTED, DAMAGED) or self._stopping.is_set():
                    break
            if meta.compacted and not self._stopping.is_set():
                self.compactor.clean_once(topic, partition, claim=got)
        except (UnknownTopic, UnknownPartition) as exc:
            log.info("dropping %s/%s: %s", topic, partition, exc)
            with self._lock:
                self._targets.discard((topic, partition))
        except ClaimLost as exc:
            self._failed(topic, partition, exc)
        except LlogError as exc:
            self._failed(topic, partition, exc)
        except Exception as exc:  # a task must never kill its worker silently
            log.exception("compaction of %s/%s failed", topic, partition)
            self.metrics.errors.labels(type(exc).__name__).inc()
        finally:
            try:
                release_claim(self.conn, got)
            except LlogError as exc:  # the lease will free it
                log.warning("could not release claim on %s/%s: %s", topic, partition, exc)
        self._observe(topic, partition)

    def _failed(self, topic: str, partition: int, exc: LlogError) -> None:
        self.metrics.errors.labels(type(exc).__name__).inc()
        log.warning("compaction of %s/%s failed: %s", topic, partition, exc)

    def _observe(self, topic: str, partition: int) -> None:
        """Refresh the partition's lag and pending gauges."""
        try:
            ctl = read_control(self.conn, topic, partition).control
            cursor, _ = read_cursor(self.conn, topic, partition)
        except LlogError:
            return
        start = ctl.log_start_offset if cursor is None else max(cursor, ctl.log_start_offset)
        self.metrics.lag.labels(topic, str(partition)).set(ctl.next_offset - start)
        with self._lock:
            self._pending_seen[(topic, partition)] = ctl.pending is not None
            self.metrics.pending.set(sum(self._pending_seen.values()))

    def _done(self, tp: TopicPartition) -> None:
        with self._idle:
            self._inflight.discard(tp)
            self.metrics.inflight.set(len(self._inflight))
            self._idle.notify_all()

    def _cancelled(self, tp: TopicPartition, fut: Future[None]) -> None:
        if fut.cancelled():  # dropped from the queue at shutdown: _task never ran
            self._done(tp)


def _forget_gauge(gauge: Any, topic: str, partition: int) -> None:
    with contextlib.suppress(KeyError):
        gauge.remove(topic, str(partition))
