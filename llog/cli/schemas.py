"""``llog schemas list|show|register|check|delete|compatibility``: the schema registry
(llog/registry/, docs/schema-registry.md) from the shell, as the broker's REST API and
confluent-kafka's ``SchemaRegistryClient`` see it::

    llog schemas register clicks-value --file click.avsc
    llog schemas register readings-value --type PROTOBUF --file reading.proto
    llog schemas list
    llog schemas show clicks-value [--version 2]
    llog schemas check clicks-value --file click-v2.avsc
    llog schemas compatibility [clicks-value] [--set FULL]
    llog schemas delete clicks-value [--version 1] [--permanent]
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from llog.cli.common import connection_from_args, print_json
from llog.registry import SchemaRegistry
from llog.registry.model import AVRO, SCHEMA_TYPES


def register(subparsers: Any) -> None:
    schemas = subparsers.add_parser("schemas", help="the schema registry (Confluent's API on every broker)")
    sub = schemas.add_subparsers(dest="schemas_command", metavar="ACTION", required=True)
    p = sub.add_parser("list", help="subjects (--deleted: soft-deleted ones too)")
    p.add_argument("--deleted", action="store_true")
    p.add_argument("--prefix", default="", help="only subjects starting with this")
    p.set_defaults(func=_list)
    p = sub.add_parser("show", help="a subject's version (default: latest) or, with --id, a schema")
    p.add_argument("subject", nargs="?")
    p.add_argument("--version", default="latest")
    p.add_argument("--id", type=int, help="the schema with this id instead")
    p.set_defaults(func=_show)
    for name, helptext in (("register", "register a schema under a subject (checked for compatibility)"),
                           ("check", "would this schema be compatible? (exit 1 if not)")):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("subject")
        p.add_argument("--file", required=True, help="the schema (.avsc, .json, .proto; - for stdin)")
        p.add_argument("--type", default=AVRO, choices=SCHEMA_TYPES)
        p.set_defaults(func=_register if name == "register" else _check)
    p = sub.add_parser("delete", help="soft-delete a subject or one version (--permanent: for good, after)")
    p.add_argument("subject")
    p.add_argument("--version")
    p.add_argument("--permanent", action="store_true")
    p.set_defaults(func=_delete)
    p = sub.add_parser("compatibility", help="the registry's or a subject's compatibility level")
    p.add_argument("subject", nargs="?")
    p.add_argument("--set", metavar="LEVEL", help="NONE, BACKWARD, FORWARD, FULL or *_TRANSITIVE")
    p.set_defaults(func=_compatibility)


def _text(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    with open(path, encoding="utf-8") as f:
        return f.read()


def _list(args: argparse.Namespace) -> int:
    with connection_from_args(args) as conn:
        for s in SchemaRegistry(conn).subjects(deleted=args.deleted, prefix=args.prefix):
            print(s)
    return 0


def _show(args: argparse.Namespace) -> int:
    with connection_from_args(args) as conn:
        reg = SchemaRegistry(conn)
        if args.id is not None:
            print_json({"id": args.id, **reg.schema(args.id).to_api()})
        elif args.subject:
            print_json(reg.version(args.subject, args.version).to_api())
        else:
            print("give a subject or --id", file=sys.stderr)
            return 2
    return 0


def _register(args: argparse.Namespace) -> int:
    with connection_from_args(args) as conn:
        rs = SchemaRegistry(conn).register(args.subject, _text(args.file), args.type)
    print(f"{rs.subject} version {rs.version}: schema id {rs.schema_id}")
    return 0


def _check(args: argparse.Namespace) -> int:
    with connection_from_args(args) as conn:
        reg = SchemaRegistry(conn)
        why = reg.check(args.subject, _text(args.file), args.type, version=None)
        level = reg.compatibility(args.subject, fallback=True)
    if why:
        print(f"incompatible ({level.value}):")
        for m in why:
            print(f"  {m}")
        return 1
    print(f"compatible ({level.value})")
    return 0


def _delete(args: argparse.Namespace) -> int:
    with connection_from_args(args) as conn:
        reg = SchemaRegistry(conn)
        if args.version is not None:
            versions = [reg.delete_version(args.subject, args.version, permanent=args.permanent)]
        else:
            versions = reg.delete_subject(args.subject, permanent=args.permanent)
    how = "deleted for good" if args.permanent else "soft-deleted"
    print(f"{args.subject}: versions {', '.join(map(str, versions))} {how}")
    return 0


def _compatibility(args: argparse.Namespace) -> int:
    with connection_from_args(args) as conn:
        reg = SchemaRegistry(conn)
        level = (reg.set_compatibility(args.set, args.subject) if args.set
                 else reg.compatibility(args.subject, fallback=True))
    print(f"{args.subject or 'registry'}: {level.value}")
    return 0
