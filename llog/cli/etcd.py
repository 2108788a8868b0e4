"""``llog etcd status|compact|defrag|disarm``: etcd maintenance for operators.

The way out of etcd's NOSPACE alarm (every write refused with
:class:`~llog.errors.EtcdSpaceExhausted`) is ``llog etcd compact && llog etcd defrag
&& llog etcd disarm``; the compactor service keeps history compacted on its own
(``LLOG_ETCD_COMPACT_INTERVAL_S``) so that it is rarely needed.
"""

from __future__ import annotations

import argparse
from typing import Any

from compactor.etcd_history import compact_history, read_record
from llog.cli.common import connection_from_args, print_json
from llog.etcd.maintenance import EtcdMaintenance


def register(subparsers: Any) -> None:
    etcd = subparsers.add_parser("etcd", help="etcd maintenance: status, compact, defrag, disarm")
    sub = etcd.add_subparsers(dest="etcd_command", metavar="ACTION", required=True)

    p = sub.add_parser("status", help="each member's revision and DB size, alarms, llog's last compaction")
    p.set_defaults(func=_status)

    p = sub.add_parser("compact", help="drop etcd's history before a revision (default: the current one)")
    p.add_argument("--revision", type=int, help="compact at this revision instead of the current one")
    p.set_defaults(func=_compact)

    p = sub.add_parser("defrag", help="defragment each endpoint's member in turn (frees the compacted space)")
    p.set_defaults(func=_defrag)

    p = sub.add_parser("disarm", help="clear raised alarms (after compact + defrag freed space)")
    p.set_defaults(func=_disarm)


def _status(args: argparse.Namespace) -> int:
    with connection_from_args(args) as conn:
        record = read_record(conn)
        maintenance = EtcdMaintenance(conn.etcd)
        print_json({
            "members": maintenance.member_statuses(),
            "alarms": [{"member_id": m, "alarm": a} for m, a in maintenance.alarms()],
            "llog_compaction": None if record is None else {"revision": record.revision, "at_ms": record.at_ms},
        })
    return 0


def _compact(args: argparse.Namespace) -> int:
    with connection_from_args(args) as conn:
        revision = args.revision or conn.etcd.status()["revision"]
        done = compact_history(conn, revision)
    print(f"compacted etcd history at revision {revision}" if done else
          f"etcd history was already compacted at or past revision {revision}")
    return 0


def _defrag(args: argparse.Namespace) -> int:
    with connection_from_args(args) as conn:
        maintenance = EtcdMaintenance(conn.etcd)
        for ep in maintenance.defragment():
            print(f"defragmented {ep}")
        for m in maintenance.member_statuses():
            print(f"{m['endpoint']}: db_size {m['db_size']} bytes")
    return 0


def _disarm(args: argparse.Namespace) -> int:
    with connection_from_args(args) as conn:
        cleared = EtcdMaintenance(conn.etcd).disarm()
    for member, alarm in cleared:
        print(f"disarmed {alarm} on member {member:x}")
    if not cleared:
        print("no alarm raised")
    return 0
