"""The ``llog`` argument parser class: global connection flags on every (sub)command
and one-line usage errors."""

from __future__ import annotations

import argparse
from typing import Any, NoReturn

from llog.cli import values


class LlogArgumentParser(argparse.ArgumentParser):
    """An :class:`argparse.ArgumentParser` whose every instance (argparse builds
    subcommand parsers with the parent's class) takes the global flags, so they work
    before or after the subcommand. Their defaults are ``SUPPRESS``: a subcommand that
    was not given one leaves the value from before the subcommand alone."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        g = self.add_argument_group("connection (anywhere on the line)")
        g.add_argument("--etcd", type=values.endpoints, default=argparse.SUPPRESS,
                       help="etcd endpoints host:port, comma separated (LLOG_ETCD_ENDPOINTS)")
        g.add_argument("--store", type=values.store_uri, default=argparse.SUPPRESS,
                       help="object store, s3://bucket/prefix or file:///path (LLOG_OBJECT_STORE)")
        g.add_argument("--root-prefix", type=values.root_prefix, default=argparse.SUPPRESS,
                       help="root of llog's etcd keys and object keys (LLOG_ROOT_PREFIX)")
        g.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                       help="debug logging, and a traceback with an error")

    def error(self, message: str) -> NoReturn:
        """One line on stderr, exit 2 (argparse would print the usage block first)."""
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")
