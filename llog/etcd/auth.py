"""How llog proves itself to etcd: TLS and etcd's users (:class:`EtcdSecurity`), and
the token each member's client holds (:class:`Tokens`)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
from etcd3 import etcdrpc

from llog.config import LlogConfig
from llog.errors import CoordinationError
from llog.etcd.members import RETRYABLE, Member
from llog.metrics import Metrics

log = logging.getLogger(__name__)


class WatchRefused(Exception):
    """etcd created a watch and cancelled it at once (an expired token), or ended one."""


class AuthenticationFailed(Exception):
    """A member could not be asked for a token (unreachable): try another."""


@dataclass(frozen=True)
class EtcdSecurity:
    """How llog proves itself to etcd and checks etcd's certificate: TLS (a CA to trust,
    optionally a client certificate and key) and etcd's own users (a name and password,
    exchanged for a token per member)."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    user: str | None = None
    password: str | None = field(default=None, repr=False)

    @property
    def tls(self) -> bool:
        return self.ca_file is not None

    @classmethod
    def of(cls, config: LlogConfig) -> EtcdSecurity:
        """``LLOG_ETCD_CA_FILE``, ``..._CERT_FILE``, ``..._KEY_FILE``, ``..._USER``, ``..._PASSWORD``."""
        return cls(config.etcd_ca_file, config.etcd_cert_file, config.etcd_key_file, config.etcd_user,
                   config.etcd_password)


class Tokens:
    """etcd's users: a token per member, asked for when the member is first used and
    again when etcd refuses the one held — expired, or (JWT tokens) issued before a
    change of etcd's users and roles. One thread asks at a time per member; the others
    wait and use its token. A request etcd refused for its token was not run, so it is
    sent again, whatever it is (etcd's Go client does the same). python3-etcd3 would
    authenticate only when a client is built (failing for a member that is down then)
    and never again."""

    def __init__(self, security: EtcdSecurity, metrics: Metrics) -> None:
        self._security = security
        self._metrics = metrics

    @staticmethod
    def refused(exc: BaseException) -> bool:
        """Whether etcd refused a request (or a watch) for its token."""
        if isinstance(exc, WatchRefused):
            return "token" in str(exc) or "auth" in str(exc)
        if not isinstance(exc, grpc.RpcError) or not hasattr(exc, "code"):
            return False
        detail = str(exc.details() if hasattr(exc, "details") else "")
        # An expired token; a JWT issued before a change of users and roles; none at all
        # (taken without one while etcd's auth was off, and it is on now).
        return exc.code() == grpc.StatusCode.UNAUTHENTICATED or any(why in detail for why in (
            "auth revision is old", "revision in header is old", "revision of auth store is old",
            "user name is empty"))

    def ensure(self, m: Member, deadline: float, *, stale: int | None = None) -> int:
        """The token ``m``'s client holds (its number; 0 without etcd users), a new one
        first if it has none or still holds ``stale``. A new token also gets a new watch
        stream: etcd checks a stream's token when a watch is added to it (the watches on
        the old stream carry on)."""
        user = self._security.user
        if user is None:
            return 0
        with m.token_lock:
            if m.token and m.token != stale:
                return m.token
            self._metrics.etcd_ops.labels("authenticate").inc()
            try:
                resp = m.client.authstub.Authenticate(
                    etcdrpc.AuthenticateRequest(name=user, password=self._security.password or ""), deadline)
            except grpc.RpcError as exc:
                code = exc.code() if hasattr(exc, "code") else None
                detail = str(exc.details() if hasattr(exc, "details") else exc)
                if code in RETRYABLE:
                    raise AuthenticationFailed(f"authenticating to {m.endpoint}: {code}") from exc
                if "authentication is not enabled" not in detail:
                    raise CoordinationError(f"etcd refused user {user!r} at {m.endpoint}: {detail}") from exc
                # Users configured before etcd's auth is turned on: carry on without a
                # token (as etcd's Go client does), so either can be changed first.
                log.info("etcd at %s has authentication off; using it without a token", m.endpoint)
                m.token += 1
                return m.token
            m.client.metadata = (("token", resp.token), ("hasleader", "true"))
            m.client._stubs.pop("watcher", None)  # made afresh, with the new token, for the next watch
            m.token += 1
            return m.token

    def call(self, m: Member, deadline: float, fn: Callable[[Any], Any]) -> Any:
        """``fn(client)`` with a token, and once more with a new one if etcd refused it."""
        held = self.ensure(m, deadline)
        try:
            return fn(m.client)
        except grpc.RpcError as exc:
            if not (held and self.refused(exc)):
                raise
        self.ensure(m, deadline, stale=held)
        return fn(m.client)
