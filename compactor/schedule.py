"""The compactor service's apscheduler jobs: which run, how often, which first at start.

Every job is ``max_instances=1, coalesce=True``: a run that overruns its interval is
not stacked, and the missed ones collapse into one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

from apscheduler.schedulers.background import BackgroundScheduler

from llog.config import LlogConfig


@dataclass(frozen=True)
class ServiceJobs:
    """The service's job bodies (each returns at once once the service is stopping)."""

    discover: Callable[[], None]
    run_pass: Callable[[], int]
    run_vacuum: Callable[[], None]
    compact_etcd: Callable[[], None]
    expire_producers: Callable[[], None]
    sync_tables: Callable[[], None]


def schedule_jobs(scheduler: BackgroundScheduler, cfg: LlogConfig, jobs: ServiceJobs) -> None:
    """Add the jobs ``cfg`` turns on: discovery (first at start), the pass, vacuum (if
    ``vacuum_interval_s`` > 0), etcd history compaction (if ``etcd_compact_interval_s``
    > 0, first at start), producer-state expiry (every quarter of
    ``producer_state_ttl_s`` if > 0, first at start), table syncs (if
    ``iceberg_sync_interval_s`` > 0)."""
    scheduler.add_job(
        jobs.discover, "interval", seconds=cfg.compactor_discovery_interval_s, id="discover",
        next_run_time=_now(), max_instances=1, coalesce=True,
    )
    scheduler.add_job(
        jobs.run_pass, "interval", seconds=cfg.compactor_pass_interval_s, id="pass",
        max_instances=1, coalesce=True,
    )
    if cfg.vacuum_interval_s > 0:
        scheduler.add_job(
            jobs.run_vacuum, "interval", seconds=cfg.vacuum_interval_s, id="vacuum",
            max_instances=1, coalesce=True,
        )
    if cfg.etcd_compact_interval_s > 0:
        scheduler.add_job(
            jobs.compact_etcd, "interval", seconds=cfg.etcd_compact_interval_s, id="etcd-compact",
            next_run_time=_now(), max_instances=1, coalesce=True,
        )
    if cfg.producer_state_ttl_s > 0:
        scheduler.add_job(
            jobs.expire_producers, "interval", seconds=cfg.producer_state_ttl_s / 4, id="producer-expiry",
            next_run_time=_now(), max_instances=1, coalesce=True,
        )
    if cfg.iceberg_sync_interval_s > 0:
        scheduler.add_job(
            jobs.sync_tables, "interval", seconds=cfg.iceberg_sync_interval_s, id="tables",
            max_instances=1, coalesce=True,
        )


def _now() -> datetime:
    return datetime.now(timezone.utc)
