"""``llog users add|passwd|delete|list``: the users Kafka clients authenticate as
(SASL SCRAM-SHA-256/512 or PLAIN, with ``LLOG_AUTH_USERS`` on; docs/security.md)."""

from __future__ import annotations

import argparse
import getpass
import sys
from typing import Any

from llog.auth.scram import DEFAULT_ITERATIONS, MAX_ITERATIONS, MECHANISMS, MIN_ITERATIONS
from llog.auth.users import Users, check_user_name
from llog.cli.common import connection_from_args, print_json
from llog.errors import InvalidInput


def _name(text: str) -> str:
    try:
        return check_user_name(text)
    except InvalidInput as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _iterations(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not MIN_ITERATIONS <= value <= MAX_ITERATIONS:
        raise argparse.ArgumentTypeError(f"iterations {text!r} must be in {MIN_ITERATIONS}..{MAX_ITERATIONS}")
    return value


def register(subparsers: Any) -> None:
    users = subparsers.add_parser("users", help="users Kafka clients authenticate as (SCRAM, PLAIN)")
    usub = users.add_subparsers(dest="users_command", metavar="ACTION", required=True)
    for action, helptext in (("add", "create a user"), ("passwd", "change a user's password")):
        p = usub.add_parser(action, help=helptext,
                            description=f"{helptext.capitalize()}. The password is asked for twice on a terminal, "
                                        "or read from the first line of stdin with --password-stdin; only SCRAM "
                                        "credentials derived from it are stored (in etcd), never the password.")
        p.add_argument("user", type=_name)
        p.add_argument("--password-stdin", action="store_true", help="read the password from stdin's first line")
        p.add_argument("--mechanism", choices=tuple(MECHANISMS), action="append",
                       help="credentials for this mechanism only (repeatable; default: both)")
        p.add_argument("--iterations", type=_iterations, default=DEFAULT_ITERATIONS,
                       help=f"PBKDF2 iterations (default {DEFAULT_ITERATIONS}, as Kafka's)")
        p.set_defaults(func=_set_password, new=action == "add")
    p = usub.add_parser("delete", help="remove a user (its next authentication fails)")
    p.add_argument("user", type=_name)
    p.set_defaults(func=_delete)
    p = usub.add_parser("list", help="users and their mechanisms")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_list)


def _password(args: argparse.Namespace) -> str:
    if args.password_stdin or not sys.stdin.isatty():
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = getpass.getpass(f"password for {args.user}: ")
        if getpass.getpass("again: ") != password:
            raise InvalidInput("the passwords differ")
    if not password:
        raise InvalidInput("the password is empty")
    return password


def _set_password(args: argparse.Namespace) -> int:
    """``add`` (``args.new``) or ``passwd``."""
    password = _password(args)
    with connection_from_args(args) as conn:
        users = Users(conn)
        store = users.add if args.new else users.set_password
        store(args.user, password, mechanisms=args.mechanism or tuple(MECHANISMS), iterations=args.iterations)
    print(f"added user {args.user}" if args.new else f"changed the password of {args.user}")
    return 0


def _delete(args: argparse.Namespace) -> int:
    with connection_from_args(args) as conn:
        Users(conn).delete(args.user)
    print(f"deleted user {args.user}")
    return 0


def _list(args: argparse.Namespace) -> int:
    with connection_from_args(args) as conn:
        users = Users(conn).list()
    if args.json:
        print_json([{"user": u.name, "mechanisms": u.mechanisms} for u in users])
    else:
        for u in users:
            print(f"{u.name}\t{' '.join(f'{m}(iterations={i})' for m, i in u.mechanisms.items())}")
    return 0
