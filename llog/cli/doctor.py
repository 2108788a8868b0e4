"""``llog doctor``: check that etcd and the object store answer and that etcd's
history is being compacted, list the registered brokers with their zones, and say which
llog release each running process runs.

Prints one line per check, ``OK``/``WARN``/``ERROR``, and exits 0 when all are OK, 1
with warnings, 2 with errors. etcd's history counts as not compacted (WARN) when
neither the compactor service has recorded a compaction within three
``LLOG_ETCD_COMPACT_INTERVAL_S`` nor is the oldest revision etcd can still read within
``--max-history-revisions`` of the current one: such an etcd grows until its space
quota stops every write. Brokers some of which name a zone and some not are a warning:
clients of a zone are never sent to a broker without one (docs/zones.md).
"""

from __future__ import annotations

import argparse
from collections import Counter
from dataclasses import dataclass
from typing import Any, Literal

from compactor.etcd_history import read_record
from llog.cli.common import connection_from_args
from llog.connection import Connection
from llog.errors import EtcdSpaceExhausted, LlogError
from llog.etcd.client import Etcd
from llog.etcd.maintenance import EtcdMaintenance
from llog.kafka.registry import scan_brokers
from llog.state import cluster_format
from llog.state.cluster_format import UNNAMED_VERSION, LiveProcess, live_processes, read_format
from llog.state.control import now_ms
from llog.version import __version__

#: History deeper than this many revisions, with no recent llog compaction, is a warning.
DEFAULT_MAX_HISTORY_REVISIONS = 100_000

Level = Literal["OK", "WARN", "ERROR"]


@dataclass(frozen=True)
class Finding:
    level: Level
    check: str
    detail: str


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("doctor", help="check etcd and the object store, and that etcd history is compacted")
    p.add_argument(
        "--max-history-revisions", type=int, default=DEFAULT_MAX_HISTORY_REVISIONS,
        help=f"warn when etcd keeps more history than this (default {DEFAULT_MAX_HISTORY_REVISIONS})",
    )
    p.set_defaults(func=_doctor)


def _doctor(args: argparse.Namespace) -> int:
    with connection_from_args(args) as conn:
        findings = diagnose(conn, max_history_revisions=args.max_history_revisions)
    for f in findings:
        print(f"{f.level:5} {f.check}: {f.detail}")
    levels = {f.level for f in findings}
    return 2 if "ERROR" in levels else 1 if "WARN" in levels else 0


def diagnose(conn: Connection, *, max_history_revisions: int = DEFAULT_MAX_HISTORY_REVISIONS) -> list[Finding]:
    """Run every check against ``conn``'s etcd and object store."""
    out = [_check_store(conn)]
    try:
        members = EtcdMaintenance(conn.etcd).member_statuses()
    except LlogError as exc:
        return [Finding("ERROR", "etcd", f"unreachable: {exc}"), *out]
    for m in members:
        out.append(Finding("OK", "etcd", f"{m['endpoint']} answers: etcd {m['version']}, revision "
                                         f"{m['revision']}, db_size {m['db_size']} bytes"))
    try:
        out.extend(_check_alarms(conn))
        out.append(_check_history(conn, max_history_revisions))
        out.extend(_check_brokers(conn))
        processes = live_processes(conn)
        out.append(_check_versions(processes))
        out.append(_check_format(conn, processes))
    except LlogError as exc:
        out.append(Finding("ERROR", "etcd", str(exc)))
    return out


def _check_store(conn: Connection) -> Finding:
    try:
        next(iter(conn.store.list(f"{conn.keys.root}/")), None)
    except LlogError as exc:
        return Finding("ERROR", "object store", f"{conn.config.object_store} unreachable: {exc}")
    return Finding("OK", "object store", f"{conn.config.object_store} answers")


def _check_alarms(conn: Connection) -> list[Finding]:
    out = []
    for member, alarm in EtcdMaintenance(conn.etcd).alarms():
        fix = f"; fix: {EtcdSpaceExhausted.FIX}" if alarm == "NOSPACE" else ""
        out.append(Finding("ERROR", "etcd alarm", f"member {member:x} raised {alarm}{fix}"))
    return out


def _check_brokers(conn: Connection) -> list[Finding]:
    nodes = [node for node, _kv in scan_brokers(conn)]
    out = [Finding("OK", "broker", f"{n}") for n in nodes]
    zones = sorted({n.zone or "" for n in nodes})
    if len(zones) > 1 and "" in zones:
        out.append(Finding("WARN", "zones", "some brokers name a zone and some do not: a client of a zone is "
                                            "never sent to a broker without one; give every broker LLOG_ZONE"))
    elif nodes:
        counts = ", ".join(f"{z} {sum(1 for n in nodes if n.zone == z)}" for z in zones) if zones != [""] else "none"
        out.append(Finding("OK", "zones", f"brokers by zone: {counts}"))
    return out


def _check_versions(processes: list[LiveProcess]) -> Finding:
    """The llog release every running process runs, from the brokers' registrations and
    the writers' and compactors' sessions (a process that names none is older than
    0.2.0, which began naming them). More than one release is a warning: an upgrade under
    way, or a process left behind (docs/operations.md, "Upgrading")."""
    counts: Counter[tuple[str, str]] = Counter((p.release or UNNAMED_VERSION, p.what) for p in processes)
    versions = sorted({v for v, _ in counts})
    if not versions:
        return Finding("OK", "versions", f"no process running (this command: llog {__version__})")
    detail = "; ".join(f"llog {v}: " + ", ".join(f"{n} {what}{'s' if n > 1 else ''}"
                                                for (ver, what), n in sorted(counts.items()) if ver == v)
                       for v in versions)
    if len(versions) > 1:
        return Finding("WARN", "versions", f"{detail} (more than one release: an upgrade under way, or a process "
                                           f"left behind)")
    return Finding("OK", "versions", detail)


def _check_format(conn: Connection, processes: list[LiveProcess]) -> Finding:
    """The cluster's format version (spec §3.1): an error when a live process cannot
    read it (a release from before the check, started after a finalize)."""
    cluster = read_format(conn)
    by = f", finalized by llog {cluster.release}" if cluster.release else ", never finalized"
    behind = [p for p in processes if p.reads < cluster.version]
    if behind:
        names = ", ".join(f"{p.what} {p.where} (llog {p.release or UNNAMED_VERSION})" for p in behind[:5])
        return Finding("ERROR", "format", f"cluster format {cluster.version}{by}; {len(behind)} process(es) "
                                          f"read only older formats: {names}; upgrade or stop them")
    # What every live process and this command read: what a finalize now would raise it to.
    common = min([p.reads for p in processes] + [cluster_format.FORMAT_VERSION])
    if cluster.version < common:
        return Finding("OK", "format", f"cluster format {cluster.version}{by}; every process reads {common}: "
                                       "`llog upgrade finalize` raises it")
    return Finding("OK", "format", f"cluster format {cluster.version}{by}")


def _check_history(conn: Connection, max_history_revisions: int) -> Finding:
    interval_s = conn.config.etcd_compact_interval_s
    record = read_record(conn)
    current = conn.etcd.status()["revision"]
    oldest = oldest_readable_revision(conn.etcd, current)
    depth = current - oldest
    recent = record is not None and interval_s > 0 and now_ms() - record.at_ms <= 3 * interval_s * 1000
    seen = "never" if record is None else (
        f"last at revision {record.revision}, {(now_ms() - record.at_ms) // 1000} s ago"
    )
    detail = f"{depth} revisions of history (oldest readable {oldest}, current {current}); llog compaction: {seen}"
    if recent or depth <= max_history_revisions:
        return Finding("OK", "etcd history", detail)
    return Finding(
        "WARN", "etcd history",
        f"{detail}: not being compacted, etcd will fill its space quota; run the compactor service "
        "(LLOG_ETCD_COMPACT_INTERVAL_S) or give etcd --auto-compaction-mode/--auto-compaction-retention",
    )


def oldest_readable_revision(etcd: Etcd, current: int) -> int:
    """The oldest revision etcd can still read (its compaction point), by bisection."""
    maintenance = EtcdMaintenance(etcd)
    lo, hi = 1, current  # hi is readable; find the least readable revision
    if maintenance.readable_at(lo):
        return lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if maintenance.readable_at(mid):
            hi = mid
        else:
            lo = mid
    return hi
