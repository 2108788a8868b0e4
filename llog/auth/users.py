"""Users and their SCRAM credentials in etcd (protocol/README.md, "Key layout":
``{root}/_users/{name}``). A credential is derived once per mechanism when the password
is set (``scram.derive``); the password itself is never stored. Every authentication
reads the user's key, so a deleted user or a changed password applies to the next
connection at once, on every broker."""

from __future__ import annotations

import base64
import json
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import unquote

from llog.auth.scram import DEFAULT_ITERATIONS, MECHANISMS, ScramCredential, derive, password_matches
from llog.connection import Connection
from llog.errors import CorruptMetadata, InvalidInput, UnknownUser, UserExists
from llog.etcd.operations import Delete, Put, absent, mod_revision_is
from llog.state.keys import prefix_range_end

#: Kafka's limit on a SCRAM user name's length.
MAX_NAME_CHARS = 255


@dataclass(frozen=True)
class UserInfo:
    """A user as listed: the name and, by mechanism, the iteration count."""

    name: str
    mechanisms: dict[str, int]


#: What an unknown user's password is checked against (a derivation's worth of time).
_NOBODY = ScramCredential("SCRAM-SHA-256", b"\0" * 32, DEFAULT_ITERATIONS, b"\0" * 32, b"\0" * 32)


def check_user_name(name: str) -> str:
    """``name`` if it can name a user: 1 to 255 characters, none of them a control character."""
    if not 0 < len(name) <= MAX_NAME_CHARS or any(unicodedata.category(c).startswith("C") for c in name):
        raise InvalidInput(f"invalid user name {name!r}: 1 to {MAX_NAME_CHARS} characters, no control characters")
    return name


def _encode(creds: Sequence[ScramCredential]) -> bytes:
    return json.dumps({"scram": {c.mechanism: {
        "salt": base64.b64encode(c.salt).decode(), "iterations": c.iterations,
        "stored_key": base64.b64encode(c.stored_key).decode(), "server_key": base64.b64encode(c.server_key).decode(),
    } for c in creds}}, sort_keys=True).encode()


def _decode(key: str, value: bytes) -> dict[str, ScramCredential]:
    try:
        doc = json.loads(value)["scram"]
        return {m: ScramCredential(m, base64.b64decode(c["salt"]), int(c["iterations"]),
                                   base64.b64decode(c["stored_key"]), base64.b64decode(c["server_key"]))
                for m, c in doc.items() if m in MECHANISMS}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CorruptMetadata(key, f"not a user record: {exc}") from exc


class Users:
    """The users of one deployment (its root prefix)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def add(self, name: str, password: str, *, mechanisms: Sequence[str] = tuple(MECHANISMS),
            iterations: int = DEFAULT_ITERATIONS) -> None:
        """Create ``name`` with ``password``; :class:`UserExists` if it is taken."""
        self._store(name, password, mechanisms, iterations, new=True)

    def set_password(self, name: str, password: str, *, mechanisms: Sequence[str] = tuple(MECHANISMS),
                     iterations: int = DEFAULT_ITERATIONS) -> None:
        """Replace ``name``'s credentials; :class:`UnknownUser` if there is no such user."""
        self._store(name, password, mechanisms, iterations, new=False)

    def _store(self, name: str, password: str, mechanisms: Sequence[str], iterations: int, *, new: bool) -> None:
        """Put ``name``'s credentials if the key is absent (``new``) or present (not ``new``)."""
        key = self.conn.keys.user(check_user_name(name))
        put = [Put(key, _encode([derive(m, password, iterations=iterations) for m in mechanisms]))]
        if new and not self.conn.etcd.txn([absent(key)], put).succeeded:
            raise UserExists(name)
        if not new and self.conn.etcd.txn([absent(key)], [], put).succeeded:
            raise UnknownUser(name)

    def change_credentials(self, name: str, upserts: dict[str, ScramCredential], deletes: Sequence[str]) -> None:
        """Set ``upserts`` and remove the ``deletes`` mechanisms of ``name`` in one change
        (Kafka's AlterUserScramCredentials: the user is created if new and goes with its
        last credential); :class:`UnknownUser`, and nothing changed, if a mechanism to
        delete has no credential."""

        def changed(creds: dict[str, ScramCredential]) -> dict[str, ScramCredential]:
            if any(m not in creds for m in deletes):
                raise UnknownUser(name)
            return {**{m: c for m, c in creds.items() if m not in deletes}, **upserts}

        self._change(name, changed)

    def _change(self, name: str, change: Callable[[dict[str, ScramCredential]], dict[str, ScramCredential]]) -> None:
        """Apply ``change`` to ``name``'s credentials, compare-and-swap (again if another
        change won the race)."""
        key = self.conn.keys.user(check_user_name(name))
        while True:
            kv = self.conn.etcd.get(key)
            now = change({} if kv is None else _decode(key, kv.value))
            guard = absent(key) if kv is None else mod_revision_is(key, kv.mod_revision)
            op = Put(key, _encode(list(now.values()))) if now else Delete(key)
            if self.conn.etcd.txn([guard], [op]).succeeded:
                return

    def delete(self, name: str) -> None:
        """Remove ``name``: its next authentication fails (connections already open stay)."""
        key = self.conn.keys.user(check_user_name(name))
        if self.conn.etcd.txn([absent(key)], [], [Delete(key)]).succeeded:
            raise UnknownUser(name)

    def list(self) -> list[UserInfo]:
        prefix = self.conn.keys.users_prefix()
        return [UserInfo(unquote(kv.key[len(prefix):]),
                         {m: c.iterations for m, c in sorted(_decode(kv.key, kv.value).items())})
                for kv in self.conn.etcd.scan(prefix, prefix_range_end(prefix))]

    def verify(self, name: str, password: str) -> bool:
        """Whether ``name`` is a user whose password is ``password`` (SASL/PLAIN's and
        HTTP Basic's check: one PBKDF2 derivation, against any of its credentials)."""
        cred = next(iter(self.credentials(name).values()), None)
        # An unknown user costs the same derivation: the time taken tells no names.
        return password_matches(cred or _NOBODY, password) and cred is not None

    def credentials(self, name: str) -> dict[str, ScramCredential]:
        """``name``'s credentials by mechanism; none for an unknown user."""
        if not 0 < len(name) <= MAX_NAME_CHARS:
            return {}
        key = self.conn.keys.user(name)
        kv = self.conn.etcd.get(key)
        return {} if kv is None else _decode(key, kv.value)
