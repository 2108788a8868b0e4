"""Who an HTTP request comes from (docs/security.md), and whether the authorizer lets it:

- ``Authorization: Bearer <LLOG_BROKER_TOKEN>``: the broker token, a super user;
- ``Authorization: Basic <user:password>`` with ``LLOG_AUTH_USERS``: a user of ``llog
  users``, the principal ``User:<name>``. A password is checked once (PBKDF2, on the
  logins' own threads: llog/auth/login_budget.py) and the success remembered for
  :data:`VERIFIED_S` seconds, so a changed password or a deleted user applies within
  that time; a failure is remembered too, and a flood of them is held back;
- nothing, when neither a token nor users are configured: ``User:ANONYMOUS``.

A request that must authenticate and does not is answered 401 before its route is
looked at; with the authorizer on (``LLOG_AUTH_ACLS``), each route checks its caller
(:func:`check`) and a refusal is 403."""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import logging
import time

from starlette.requests import Request
from starlette.types import Scope

from llog.auth.acls import ANONYMOUS, CLUSTER_NAME, Operation, ResourceType, camel
from llog.auth.authorizer import Caller, client_host
from llog.auth.users import Users
from llog.broker.state import Broker
from llog.errors import NotAuthorized

log = logging.getLogger(__name__)

#: Seconds a verified user's password is taken as good without deriving it again.
VERIFIED_S = 5.0
#: Verified passwords remembered at most (the memo starts over beyond).
_VERIFIED_ENTRIES = 10_000
#: Where the caller is kept in a request's ASGI scope.
CALLER_SCOPE_KEY = "llog.caller"


_OPEN = Caller(ANONYMOUS, "", "http")


class HttpAuth:
    """One broker's HTTP authentication (token, users or none)."""

    def __init__(self, broker: Broker) -> None:
        cfg = broker.config
        self._metrics = broker.conn.metrics
        self._users = Users(broker.conn) if cfg.auth_users else None
        #: Whether users authenticate (HTTP Basic).
        self.users = self._users is not None
        #: Whether a request must authenticate (a token or users are configured).
        self.required = bool(cfg.broker_token) or self._users is not None
        # The broker's workers ask each other with their broker's own secret.
        self._tokens = [t.encode() for t in (cfg.broker_token, broker.place and broker.place.secret) if t]
        self._verified: dict[bytes, tuple[str, float]] = {}
        self._guard = broker.logins
        #: Nothing to check at all (no credentials, no authorizer): every request is let in as is.
        self._open = not self.required and broker.authorizer is None

    async def caller(self, scope: Scope) -> Caller | None:
        """The request's caller, or ``None`` when it must authenticate and did not."""
        if self._open:
            return _OPEN
        host = client_host(scope["client"][0]) if scope.get("client") else ""
        header = next((v for k, v in scope["headers"] if k == b"authorization"), None)
        if header is not None:
            scheme, _, cred = header.partition(b" ")
            scheme, cred = scheme.lower(), cred.strip()
            if scheme == b"bearer" and any(hmac.compare_digest(cred, t) for t in self._tokens):
                return Caller("User:token", host, "http", token=True)
            if scheme == b"basic" and self._users is not None:
                user = await self._basic(cred, host)
                if user is not None:
                    return Caller(f"User:{user}", host, "http")
        if self.required:
            self._metrics.http_authentications.labels("refused").inc()
            return None
        return Caller(ANONYMOUS, host, "http")

    async def _basic(self, cred: bytes, host: str) -> str | None:
        try:
            user, sep, password = base64.b64decode(cred, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        if not sep or not user:
            return None
        memo_key = hashlib.sha256(cred).digest()
        now = time.monotonic()
        known = self._verified.get(memo_key)
        if known is not None and known[1] > now:
            return known[0]
        users = self._users
        assert users is not None
        guard, secret = self._guard, password.encode()
        verdict = guard.verdict(host, user, now, "http")
        # A password that just failed is refused without deriving it again; the others
        # are checked on the logins' own threads (a suspect's: on the suspects' one).
        remembered = guard.known_bad(user, secret, now)
        if remembered or not await asyncio.get_running_loop().run_in_executor(
                guard.executor(verdict), users.verify, user, password):
            self._metrics.http_authentications.labels("failed").inc()
            guard.failed("http", host, user, f"HTTP Basic as {user!r}", time.monotonic(), secret,
                         remembered=remembered)
            if verdict.delay_s:
                await asyncio.sleep(verdict.delay_s)
            return None
        self._metrics.http_authentications.labels("ok").inc()
        if len(self._verified) >= _VERIFIED_ENTRIES:
            self._verified.clear()
        self._verified[memo_key] = (user, now + VERIFIED_S)
        return user


class Access:
    """What one request's caller may do (everything, without the authorizer)."""

    def __init__(self, request: Request, broker: Broker) -> None:
        self._authz = broker.authorizer
        self._caller: Caller | None = request.scope.get(CALLER_SCOPE_KEY)

    def allows(self, op: Operation, rtype: ResourceType, name: str = CLUSTER_NAME, *, audit: bool = True) -> bool:
        if self._authz is None:
            return True
        # No caller (a route the app did not authenticate): nothing is allowed.
        return self._caller is not None and self._authz.allows(self._caller, op, rtype, name, audit=audit)

    def check(self, op: Operation, rtype: ResourceType, name: str = CLUSTER_NAME) -> None:
        """:class:`NotAuthorized` (HTTP 403) unless :meth:`allows`."""
        if not self.allows(op, rtype, name):
            raise self.refusal(op, rtype, name)

    def refusal(self, op: Operation, rtype: ResourceType, name: str) -> NotAuthorized:
        return NotAuthorized(self._caller.principal if self._caller else "?", camel(op), camel(rtype), name)

    def may_create(self, topic: str) -> bool:
        """What auto-creating ``topic`` takes (:meth:`Authorizer.may_create`; not audited)."""
        if self._authz is None:
            return True
        return self._caller is not None and self._authz.may_create(self._caller, topic)
