"""``llog upgrade status|finalize``: the cluster's format version (spec §3.1,
docs/operations.md, "Upgrading")::

    llog upgrade status             # the cluster's format, every live process's release
    llog upgrade finalize           # raise the format to this release's, once all run it

Finalizing is the point of no return of an upgrade: before it, every process still
writes the form the previous release reads, so a rollback is replacing processes again;
after it, the previous release refuses to start.
"""

from __future__ import annotations

import argparse
from typing import Any

from llog.cli.common import connection_from_args, print_json
from llog.state.cluster_format import (
    FORMAT_VERSION,
    FORMATS,
    UNNAMED_VERSION,
    finalize,
    live_processes,
    read_format,
)
from llog.version import __version__


def register(subparsers: Any) -> None:
    upgrade = subparsers.add_parser("upgrade", help="the cluster's format version: status, finalize")
    sub = upgrade.add_subparsers(dest="upgrade_command", metavar="ACTION", required=True)
    p = sub.add_parser("status", help="the cluster's format and every live process's release and formats")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_status)
    p = sub.add_parser("finalize", help=f"raise the cluster's format to {FORMAT_VERSION} (this release's), "
                                        "once every live process reads it; no way back but a restore")
    p.set_defaults(func=_finalize)


def _status(args: argparse.Namespace) -> int:
    with connection_from_args(args) as conn:
        cluster = read_format(conn)
        processes = live_processes(conn)
    behind = [p for p in processes if p.reads < FORMAT_VERSION]
    if args.json:
        print_json({"cluster_format": cluster.version, "finalized_by": cluster.release or None,
                    "this_release": __version__, "this_release_reads": FORMAT_VERSION,
                    "processes": [vars(p) for p in processes],
                    "can_finalize": cluster.version < FORMAT_VERSION and not behind})
        return 0
    by = f", finalized by llog {cluster.release}" if cluster.release else " (never finalized: 0.2.0's)"
    print(f"cluster format {cluster.version}{by}")
    print(f"this command: llog {__version__}, reads formats up to {FORMAT_VERSION}")
    for p in processes:
        print(f"  {p.what} {p.where}: llog {p.release or UNNAMED_VERSION}, reads up to {p.reads}")
    if cluster.version >= FORMAT_VERSION:
        print(f"nothing to finalize: format {FORMAT_VERSION} ({FORMATS[FORMAT_VERSION]}'s) is this release's newest")
    elif behind:
        print(f"finalize waits for {len(behind)} process(es) to be upgraded")
    else:
        print(f"every process reads format {FORMAT_VERSION}: `llog upgrade finalize` raises it")
    return 0


def _finalize(args: argparse.Namespace) -> int:
    with connection_from_args(args) as conn:
        before, after = finalize(conn)
    if after.version == before.version:
        print(f"cluster format stays {before.version}: nothing newer in llog {__version__}")
    else:
        print(f"cluster format raised from {before.version} to {after.version}")
    return 0
