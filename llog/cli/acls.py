"""``llog acls add|list|remove``: the ACLs the authorizer decides by (``LLOG_AUTH_ACLS``;
docs/security.md), in etcd, as ``kafka-acls.sh`` manages them through a broker::

    llog acls add --principal User:alice --operation Read --topic orders --group billing
    llog acls add --principal User:etl --operation Write --topic raw. --prefixed
    llog acls list --principal User:alice
    llog acls remove --principal User:alice --topic orders
"""

from __future__ import annotations

import argparse
import itertools
from typing import Any

from llog.auth.acl_store import AclStore
from llog.auth.acls import (
    CLUSTER_NAME,
    WILDCARD,
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    camel,
    parse_enum,
)
from llog.cli.common import connection_from_args, print_json
from llog.errors import InvalidInput


def _operation(text: str) -> Operation:
    try:
        return parse_enum(Operation, text)
    except InvalidInput as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _resource_args(p: argparse.ArgumentParser, *, filtering: bool) -> None:
    p.add_argument("--topic", action="append", default=[], help="a topic (repeatable; * for every topic)")
    p.add_argument("--group", action="append", default=[], help="a consumer group (repeatable; * for every group)")
    p.add_argument("--transactional-id", action="append", default=[], help="a transactional id (repeatable)")
    p.add_argument("--cluster", action="store_true", help="the cluster (creating topics, ACLs, idempotent writes)")
    p.add_argument("--prefixed", action="store_true", help="the names are prefixes, not literal names")
    p.add_argument("--principal", help="Type:name (User:alice, User:* for everyone)" + (
        "" if filtering else "; required"), required=not filtering)
    p.add_argument("--host", default=None if filtering else WILDCARD,
                   help="the client address" + ("" if filtering else " (default: * for any)"))
    p.add_argument("--operation", type=_operation, action="append", default=[],
                   help="Read, Write, Create, Delete, Alter, Describe, DescribeConfigs, AlterConfigs, "
                        "IdempotentWrite or All (repeatable)" + ("" if filtering else "; required"))
    p.add_argument("--deny", action="store_true", help="deny instead of allow (a deny wins over any allow)")


def register(subparsers: Any) -> None:
    acls = subparsers.add_parser("acls", help="who may do what (the authorizer's ACLs, LLOG_AUTH_ACLS)")
    asub = acls.add_subparsers(dest="acls_command", metavar="ACTION", required=True)
    p = asub.add_parser("add", help="allow (or --deny) a principal operations on resources",
                        description="Add an ACL for every operation and resource given. Adding one that exists "
                                    "changes nothing. Brokers apply a change within a second.")
    _resource_args(p, filtering=False)
    p.set_defaults(func=_add)
    p = asub.add_parser("list", help="the ACLs, all or those matching the options")
    _resource_args(p, filtering=True)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_list)
    p = asub.add_parser("remove", help="remove the ACLs matching the options (--all: every ACL)")
    _resource_args(p, filtering=True)
    p.add_argument("--all", action="store_true", help="remove every ACL matching, even with no option given")
    p.set_defaults(func=_remove)


def _resources(args: argparse.Namespace) -> list[tuple[ResourceType, str]]:
    out = [(ResourceType.TOPIC, t) for t in args.topic] + [(ResourceType.GROUP, g) for g in args.group]
    out += [(ResourceType.TRANSACTIONAL_ID, t) for t in args.transactional_id]
    if args.cluster:
        out.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return out


def _pattern(args: argparse.Namespace) -> PatternType:
    return PatternType.PREFIXED if args.prefixed else PatternType.LITERAL


def _filters(args: argparse.Namespace) -> list[AclFilter]:
    """One filter per resource and operation given (none given: any)."""
    resources: list[tuple[ResourceType, str | None]] = [*_resources(args)] or [(ResourceType.ANY, None)]
    operations = args.operation or [Operation.ANY]
    pattern = _pattern(args) if args.prefixed or resources[0][0] != ResourceType.ANY else PatternType.ANY
    permission = Permission.DENY if args.deny else Permission.ANY
    return [AclFilter(rtype, name, pattern, args.principal, args.host, op, permission).check()
            for (rtype, name), op in itertools.product(resources, operations)]


def _add(args: argparse.Namespace) -> int:
    resources = _resources(args)
    if not resources or not args.operation:
        raise InvalidInput("give at least one --operation and one resource (--topic, --group, --cluster, "
                           "--transactional-id)")
    permission = Permission.DENY if args.deny else Permission.ALLOW
    bindings = [AclBinding(rtype, name, _pattern(args), args.principal, args.host, op, permission)
                for (rtype, name), op in itertools.product(resources, args.operation)]
    with connection_from_args(args) as conn:
        AclStore(conn).add(bindings)
    for b in bindings:
        print(f"added: {b.describe()}")
    return 0


def _selected(store: AclStore, filters: list[AclFilter]) -> list[AclBinding]:
    seen: dict[AclBinding, None] = {}
    for f in filters:
        seen.update(dict.fromkeys(store.list(f)))
    return list(seen)


def _list(args: argparse.Namespace) -> int:
    with connection_from_args(args) as conn:
        found = _selected(AclStore(conn), _filters(args))
    if args.json:
        print_json([{"resource_type": camel(b.resource_type), "resource_name": b.resource_name,
                     "pattern_type": camel(b.pattern_type), "principal": b.principal, "host": b.host,
                     "operation": camel(b.operation), "permission": camel(b.permission)} for b in found])
    else:
        for b in found:
            print(b.describe())
    return 0


def _remove(args: argparse.Namespace) -> int:
    if not (args.all or _resources(args) or args.principal or args.operation or args.host):
        raise InvalidInput("give what to remove (--principal, --topic, ...), or --all for every ACL")
    removed: list[AclBinding] = []
    with connection_from_args(args) as conn:
        store = AclStore(conn)
        for f in _filters(args):
            removed += store.remove(f)
    for b in removed:
        print(f"removed: {b.describe()}")
    return 0
