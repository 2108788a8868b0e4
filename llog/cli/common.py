"""What every subcommand shares: the connection from global flags and JSON output."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from llog.config import LlogConfig
from llog.connection import Connection, connect


def config_from_args(args: argparse.Namespace) -> LlogConfig:
    """``LLOG_*`` settings with the global ``--etcd``/``--store``/``--root-prefix`` flags applied
    (absent when not given: their parser defaults are ``SUPPRESS``)."""
    return LlogConfig.from_env(
        etcd_endpoints=getattr(args, "etcd", None),
        object_store=getattr(args, "store", None),
        root_prefix=getattr(args, "root_prefix", None),
    )


def connection_from_args(args: argparse.Namespace) -> Connection:
    return connect(config_from_args(args))


def print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, sort_keys=True, default=str)
    sys.stdout.write("\n")
