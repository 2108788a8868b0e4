"""Command-line entry points of the compactor, shared by ``python -m compactor`` and
the ``llog`` CLI (``llog compactor``, ``llog compact``, ``llog vacuum``).

Every flag overrides the matching ``LLOG_*`` variable (flag wins), including the
``llog`` CLI's global ``--etcd``, ``--store`` and ``--root-prefix``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import Any

from llog.cli import values
from llog.config import LlogConfig
from llog.connection import Connection
from llog.environment import warn_unknown
from llog.errors import ClaimConflict, LlogError

log = logging.getLogger(__name__)


def _config(args: argparse.Namespace, **fields: Any) -> LlogConfig:
    """``LLOG_*`` settings with the global connection flags (when the ``llog`` CLI
    parsed them) and this command's ``fields`` applied."""
    return LlogConfig.from_env(
        etcd_endpoints=getattr(args, "etcd", None),
        object_store=getattr(args, "store", None),
        root_prefix=getattr(args, "root_prefix", None),
        **fields,
    )


def add_service_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", type=values.host, help="HTTP bind host (LLOG_COMPACTOR_HOST)")
    p.add_argument("--port", type=values.listen_port, help="HTTP port, 0 for any free one (LLOG_COMPACTOR_PORT)")
    p.add_argument("--workers", type=values.positive_int, help="compaction tasks at once (LLOG_COMPACTOR_WORKERS)")
    p.add_argument("--targets", help="seed targets: topic or topic:partition, comma separated")
    p.add_argument("--pass-interval", type=values.seconds, help="seconds between passes")
    p.add_argument("--discovery-interval", type=values.seconds, help="seconds between discovery scans")
    p.add_argument("--claim-ttl", type=values.positive_int, help="claim lease TTL in seconds")
    p.add_argument("--vacuum-interval", type=values.seconds_or_zero, help="seconds between vacuum passes (0: off)")
    p.add_argument("--zone", type=values.zone, help="the zone this service runs in (LLOG_ZONE; docs/zones.md)")
    p.add_argument("--log-level", default="INFO", type=str.upper,
                   choices=("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"), help="logging level (default INFO)")


def run_service(args: argparse.Namespace) -> int:
    """``llog compactor``: run the service until SIGTERM/SIGINT."""
    # The runners import what they run: every llog command builds this parser.
    from compactor.service import CompactorService, stop_signals
    from llog.state.cluster_format import check_at_start

    level = args.log_level.upper()
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # Under ``llog``, whose root logger is set up already, the service's own lines still show.
    logging.getLogger("compactor").setLevel(level)
    logging.getLogger("apscheduler").setLevel(logging.WARNING)  # a line per job run otherwise
    cfg = _config(
        args,
        compactor_host=args.host,
        compactor_port=args.port,
        compactor_workers=args.workers,
        compactor_targets=args.targets,
        compactor_pass_interval_s=args.pass_interval,
        compactor_discovery_interval_s=args.discovery_interval,
        compactor_claim_ttl_s=args.claim_ttl,
        vacuum_interval_s=args.vacuum_interval,
        zone=args.zone,
    )
    # The handlers go in before the readiness line: a SIGTERM sent as soon as it is read
    # must stop the service cleanly, not kill it.
    check_at_start(cfg)  # a release too old for the cluster's format stops here
    with stop_signals() as signalled:
        svc = CompactorService(cfg).start()
        print(f"compactor serving on http://{cfg.compactor_host}:{svc.http_port}", flush=True)
        svc.wait(signalled)
    return 0


def add_compact_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("topic", type=values.topic)
    p.add_argument("partition", type=values.partition, nargs="?", help="one partition (default: all)")
    p.add_argument(
        "--min-age-ms", type=values.non_negative_int,
        help="compact WAL entries at least this old (LLOG_COMPACT_MIN_AGE_MS), judged by etcd revision from the "
        "revision samples a compactor saved; with none yet, only 0 compacts at once"
    )
    p.add_argument("--max-runs", type=values.positive_int, default=1000,
                   help="compact_once calls per partition at most")


def run_compact(args: argparse.Namespace) -> int:
    """``llog compact TOPIC [PARTITION]``: compact until nothing is ready, holding
    each partition's claim, then key-compact a compacted topic's partition once; a
    partition another compactor holds is reported busy."""
    from compactor.claims import claimed
    from compactor.compact import COMPACTED, DAMAGED, Compactor

    cfg = _config(args, compact_min_age_ms=args.min_age_ms)
    status = 0
    with Connection(cfg) as conn, Compactor(conn) as comp:
        meta = conn.topic(args.topic, refresh=True)
        parts = range(meta.partitions) if args.partition is None else [args.partition]
        for p in parts:
            out: dict[str, Any] = {"topic": args.topic, "partition": p, "runs": 0, "records": 0,
                                   "index_keys_removed": 0, "recovered": None, "damaged": []}
            try:
                with claimed(conn, args.topic, p) as claim:
                    for _ in range(args.max_runs):
                        res = comp.compact_once(args.topic, p, claim=claim)
                        if res.recovered is not None:
                            out["recovered"] = res.recovered.stage
                        if res.outcome == DAMAGED and res.damaged is not None:  # passed: see topics describe
                            end, d = res.damaged
                            out["damaged"].append({"start_offset": d.start_offset, "end_offset": end,
                                                   "reason": d.reason})
                            continue
                        if res.outcome != COMPACTED:
                            break
                        assert res.record is not None
                        out["runs"] += 1
                        out["records"] += res.record.msg_count
                        out["index_keys_removed"] += res.index_keys_removed
                    if meta.compacted:  # a compacted topic: then its key compaction (spec §10.2)
                        cleaned = comp.clean_once(args.topic, p, claim=claim)
                        out["key_compaction"] = {"outcome": cleaned.outcome, "removed": cleaned.removed,
                                                 "groups": cleaned.groups, "clean_offset": cleaned.clean_offset}
                out["outcome"] = "ok"
            except ClaimConflict as exc:
                out["outcome"], out["error"] = "busy", str(exc)
                status = 1
            except LlogError as exc:
                out["outcome"], out["error"] = "error", f"{type(exc).__name__}: {exc}"
                status = 1
            print(json.dumps(out), flush=True)
        try:  # this run's revision samples let the next one judge ages (revision_clock.py)
            comp.clock.save()
        except LlogError as exc:
            log.warning("could not save the revision clock: %s", exc)
    return status


def add_vacuum_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dry-run", action="store_true", help="report what would be deleted, delete nothing")
    p.add_argument("--grace-s", type=values.seconds_or_zero,
                   help="minimum age in seconds of objects keyed without a session (LLOG_VACUUM_GRACE_S)")


def run_vacuum(args: argparse.Namespace) -> int:
    """``llog vacuum [--dry-run]``: print the report as JSON."""
    from compactor.vacuum import vacuum

    cfg = _config(args, vacuum_grace_s=args.grace_s)
    with Connection(cfg) as conn:
        report = vacuum(conn, dry_run=args.dry_run)
    print(json.dumps(report.to_json(), indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m compactor [service flags]`` runs the service; ``python -m compactor
    compact ...`` and ``python -m compactor vacuum ...`` the one-shot commands."""
    argv = sys.argv[1:] if argv is None else argv
    warn_unknown(os.environ)
    parser = argparse.ArgumentParser(prog="python -m compactor", description="the llog compactor")
    if argv and argv[0] in ("compact", "vacuum"):
        sub = parser.add_subparsers(dest="command", required=True)
        add_compact_args(sub.add_parser("compact", help="compact a topic's partitions now"))
        add_vacuum_args(sub.add_parser("vacuum", help="delete unreferenced objects"))
        args = parser.parse_args(argv)
        try:
            return run_compact(args) if args.command == "compact" else run_vacuum(args)
        except LlogError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    add_service_args(parser)
    return run_service(parser.parse_args(argv))
