"""``llog groups list|describe|reset|delete|delete-offsets``."""

from __future__ import annotations

import argparse
from typing import Any

from llog.cli import values
from llog.cli.common import connection_from_args, print_json
from llog.errors import InvalidInput
from llog.group_names import list_groups
from llog.groups.admin import delete_group, delete_offsets, describe_group, reset_offsets


def register(subparsers: Any) -> None:
    groups = subparsers.add_parser("groups", help="consumer groups: list, describe (lag), reset offsets, delete")
    gsub = groups.add_subparsers(dest="groups_command", metavar="ACTION", required=True)

    p = gsub.add_parser("list", help="groups with any committed state")
    p.set_defaults(func=_list)

    p = gsub.add_parser("describe", help="members, epoch, committed offset and lag per partition")
    p.add_argument("group", type=values.group)
    p.add_argument("--topic", type=values.topic, action="append", help="also show this topic's uncommitted partitions")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_describe)

    p = gsub.add_parser("reset", help="move committed offsets (stop the group's consumers first)")
    p.add_argument("group", type=values.group)
    p.add_argument("topic", type=values.topic)
    p.add_argument("--to", type=values.reset_target, required=True, help="earliest, latest, an offset, or ts:EPOCH_MS")
    p.add_argument("-p", "--partition", type=values.partition, action="append", help="only these partitions")
    p.set_defaults(func=_reset)

    p = gsub.add_parser("delete", help="forget a group: offsets, epoch, ownerships (Kafka's DeleteGroups)")
    p.add_argument("group", type=values.group)
    p.set_defaults(func=_delete)

    p = gsub.add_parser("delete-offsets", help="forget a group's committed offsets for a topic (Kafka's OffsetDelete)")
    p.add_argument("group", type=values.group)
    p.add_argument("topic", type=values.topic)
    p.add_argument("-p", "--partition", type=values.partition, action="append", help="only these partitions")
    p.set_defaults(func=_delete_offsets)


def _list(args: argparse.Namespace) -> int:
    with connection_from_args(args) as conn:
        for g in list_groups(conn):
            print(g)
    return 0


def _describe(args: argparse.Namespace) -> int:
    with connection_from_args(args) as conn:
        d = describe_group(conn, args.group, args.topic)
    rows = [
        {"topic": p.topic, "partition": p.partition, "committed": p.committed, "next_offset": p.next_offset,
         "lag": p.lag, "owner": p.owner}
        for p in d.partitions
    ]
    if args.json:
        print_json({"group": d.group, "members": list(d.members), "epoch": d.epoch, "epoch_owner": d.epoch_owner,
                    "total_lag": d.total_lag, "partitions": rows})
        return 0
    print(f"group {d.group}: {len(d.members)} member(s), epoch {d.epoch if d.epoch is not None else '-'}, "
          f"total lag {d.total_lag}")
    for m in d.members:
        print(f"  member {m}")
    print("topic\tpartition\tcommitted\tnext_offset\tlag\towner")
    for r in rows:
        print("\t".join("-" if r[c] is None else str(r[c]) for c in r))
    return 0


def _reset(args: argparse.Namespace) -> int:
    with connection_from_args(args) as conn:
        for c in reset_offsets(conn, args.group, args.topic, to=args.to, partitions=args.partition):
            print(f"{args.group} {c.topic}/{c.partition} -> {c.offset}")
    return 0


def _delete(args: argparse.Namespace) -> int:
    with connection_from_args(args) as conn:
        if not delete_group(conn, args.group):
            raise InvalidInput(f"no group {args.group!r}")
    print(f"deleted group {args.group}")
    return 0


def _delete_offsets(args: argparse.Namespace) -> int:
    with connection_from_args(args) as conn:
        gone = delete_offsets(conn, args.group, args.topic, args.partition)
    print(f"{args.group}: deleted the committed offsets of {args.topic} partitions "
          f"{', '.join(map(str, gone)) if gone else '(none were committed)'}")
    return 0
