"""The ``llog`` command line.

Each subcommand group lives in its own module under ``llog.cli`` exposing
``register(subparsers)``; a subcommand stores its runner as ``func``
(``args.func(args) -> exit code``). Connection settings come from ``LLOG_*``
variables (see the README); ``--etcd`` and ``--store`` override them.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from llog.errors import LlogError

#: Subcommand modules, in help order.
COMMAND_MODULES = (
    "llog.cli.dev",
    "llog.cli.admin",
    "llog.cli.data",
    "llog.cli.groups",
    "llog.cli.compactor",
    "llog.cli.etcd",
    "llog.cli.doctor",
    "llog.cli.broker",
    "llog.cli.loadtest",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="llog", description="llog: a leaderless log on object storage")
    parser.add_argument("--etcd", help="etcd endpoints, comma separated (LLOG_ETCD_ENDPOINTS)")
    parser.add_argument("--store", help="object store, s3://bucket/prefix or file:///path (LLOG_OBJECT_STORE)")
    parser.add_argument("--root-prefix", help="root of llog's etcd keys and object keys (LLOG_ROOT_PREFIX)")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.DEBUG if args.verbose else logging.WARNING,
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        )
    try:
        return int(args.func(args) or 0)
    except LlogError as exc:
        print(f"llog: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
