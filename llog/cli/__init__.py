"""The ``llog`` command line.

Each subcommand group lives in its own module under ``llog.cli`` exposing
``register(subparsers)``; a subcommand stores its runner as ``func``
(``args.func(args) -> exit code``). Connection settings come from ``LLOG_*``
variables (see the README); ``--etcd``, ``--store`` and ``--root-prefix``, accepted
anywhere on the line, override them.

Exit codes: 0 success, 1 a runtime failure (one line on stderr), 2 a usage error
(one line on stderr, nothing connected), 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence

from llog.cli.common import config_from_args
from llog.cli.failures import describe
from llog.cli.parser import LlogArgumentParser
from llog.config import LlogConfig
from llog.environment import warn_unknown
from llog.errors import LlogError
from llog.version import __version__

log = logging.getLogger(__name__)

#: Subcommand modules, in help order.
COMMAND_MODULES = (
    "llog.cli.dev",
    "llog.cli.admin",
    "llog.cli.data",
    "llog.cli.groups",
    "llog.cli.users",
    "llog.cli.acls",
    "llog.cli.quotas",
    "llog.cli.schemas",
    "llog.cli.compactor",
    "llog.cli.etcd",
    "llog.cli.doctor",
    "llog.cli.upgrade",
    "llog.cli.broker",
    "llog.cli.loadtest",
)

EXIT_FAILURE = 1
EXIT_INTERRUPTED = 130


def build_parser() -> argparse.ArgumentParser:
    parser = LlogArgumentParser(prog="llog", description="llog: a leaderless log on object storage")
    parser.add_argument("--version", action="version", version=f"llog {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def _config_or_none(args: argparse.Namespace) -> LlogConfig | None:
    try:
        return config_from_args(args)
    except LlogError:
        return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``llog`` command line; returns the exit code."""
    args = build_parser().parse_args(argv)
    verbose = getattr(args, "verbose", False)
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.DEBUG if verbose else logging.WARNING,
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        )
    warn_unknown(os.environ)
    try:
        return int(args.func(args) or 0)
    except (LlogError, OSError) as exc:
        if isinstance(exc, BrokenPipeError):
            return _closed_stdout()
        log.debug("command failed", exc_info=True)
        print(f"llog: error: {describe(exc, _config_or_none(args))}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def _closed_stdout() -> int:
    """The reader of our stdout went away (``llog consume t | head``): stop quietly,
    without Python's own complaint when it flushes stdout at exit."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return EXIT_FAILURE
