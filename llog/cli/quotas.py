"""``llog quotas set|list|remove``: client quotas (docs/security.md, "Quotas"), in etcd,
as ``kafka-configs.sh --entity-type users|clients`` manages them through a broker::

    llog quotas set --user alice producer_byte_rate=5242880 consumer_byte_rate=10485760
    llog quotas set --default-user request_percentage=50
    llog quotas set --user alice --client-id etl producer_byte_rate=1048576
    llog quotas list
    llog quotas remove --user alice producer_byte_rate
"""

from __future__ import annotations

import argparse
from typing import Any

from llog.cli.common import connection_from_args, print_json
from llog.errors import InvalidInput
from llog.quotas.entities import DEFAULT, KINDS, Name, QuotaEntity
from llog.quotas.store import QuotaStore, entity_path


def _entity_args(p: argparse.ArgumentParser) -> None:
    user = p.add_mutually_exclusive_group()
    user.add_argument("--user", help="the user the quotas are for")
    user.add_argument("--default-user", action="store_true", help="every user without quotas of its own")
    client = p.add_mutually_exclusive_group()
    client.add_argument("--client-id", help="the client id the quotas are for (with --user: that user's client)")
    client.add_argument("--default-client-id", action="store_true",
                        help="every client id without quotas of its own")


def register(subparsers: Any) -> None:
    quotas = subparsers.add_parser("quotas", help="client quotas: byte rates and request time per user and client id")
    qsub = quotas.add_subparsers(dest="quotas_command", metavar="ACTION", required=True)
    p = qsub.add_parser("set", help="set quotas of a user, a client id or both",
                        description=f"Set KIND=VALUE quotas ({', '.join(KINDS)}: bytes a second, or a percentage "
                                    "of one request thread's time). Brokers apply a change within a second.")
    _entity_args(p)
    p.add_argument("quotas", nargs="+", metavar="KIND=VALUE")
    p.set_defaults(func=_set)
    p = qsub.add_parser("list", help="every entity's quotas")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_list)
    p = qsub.add_parser("remove", help="remove quotas of a user, a client id or both (no KIND: all of them)")
    _entity_args(p)
    p.add_argument("kinds", nargs="*", metavar="KIND")
    p.set_defaults(func=_remove)


def _entity(args: argparse.Namespace) -> QuotaEntity:
    user: Name | None = DEFAULT if args.default_user else args.user
    client: Name | None = DEFAULT if args.default_client_id else args.client_id
    if user is None and client is None:
        raise InvalidInput("name whose quotas: --user, --default-user, --client-id or --default-client-id")
    return QuotaEntity(user, client)


def _set(args: argparse.Namespace) -> int:
    values: dict[str, float | None] = {}
    for item in args.quotas:
        kind, _, value = item.partition("=")
        try:
            values[kind] = float(value)
        except ValueError:
            raise InvalidInput(f"{item!r} is not KIND=VALUE with a number") from None
    entity = _entity(args)
    with connection_from_args(args) as conn:
        QuotaStore(conn).alter([(entity, values)])
    print(f"set: {entity}: " + ", ".join(f"{k}={_number(v)}" for k, v in values.items() if v is not None))
    return 0


def _remove(args: argparse.Namespace) -> int:
    entity = _entity(args)
    with connection_from_args(args) as conn:
        store = QuotaStore(conn)
        kinds = args.kinds or list(store.read_all()[0].get(entity, {}))
        store.alter([(entity, dict.fromkeys(kinds))])
    print(f"removed: {entity}: {', '.join(kinds) or 'nothing'}")
    return 0


def _list(args: argparse.Namespace) -> int:
    with connection_from_args(args) as conn:
        held, _ = QuotaStore(conn).read_all()
    rows = sorted((entity_path(e), values) for e, values in held.items())
    if args.json:
        print_json([{"entity": path, "quotas": values} for path, values in rows])
        return 0
    for path, values in rows:
        print(f"{path}\t" + " ".join(f"{k}={_number(v)}" for k, v in sorted(values.items())))
    return 0


def _number(v: float) -> str:
    return f"{v:.0f}" if v.is_integer() else f"{v:g}"
