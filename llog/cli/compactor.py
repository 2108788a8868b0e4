"""``llog compactor``, ``llog compact TOPIC [PARTITION]``, ``llog vacuum [--dry-run]``.

Each subcommand stores its runner as ``func`` (``args.func(args) -> exit code``).
"""

from __future__ import annotations

import argparse
from typing import Any

from compactor import command


def register(subparsers: Any) -> None:
    """Add the compactor's subcommands to the ``llog`` parser's ``subparsers``."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "compactor", help="run the compactor service (compaction, retention, vacuum, HTTP metrics)"
    )
    command.add_service_args(p)
    p.set_defaults(func=command.run_service)

    p = subparsers.add_parser("compact", help="compact a topic's partitions now (one-shot)")
    command.add_compact_args(p)
    p.set_defaults(func=command.run_compact)

    p = subparsers.add_parser("vacuum", help="delete data objects nothing references any more")
    command.add_vacuum_args(p)
    p.set_defaults(func=command.run_vacuum)
