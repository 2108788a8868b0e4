"""SASL on the Kafka listener. A connection must authenticate (SaslHandshake v1, then
SaslAuthenticate) before any request but ApiVersions when the broker has a token
(``LLOG_BROKER_TOKEN``) or authenticates users (``LLOG_AUTH_USERS``):

- PLAIN: a user's name and password (``llog users``; checked against the stored SCRAM
  credential), or any name with the broker token as the password (the compatibility
  option, while a token is set);
- SCRAM-SHA-256 and SCRAM-SHA-512 (``llog/auth/scram.py``), against the users only.

Without either, the listener is open, like the HTTP API. :meth:`SaslState.authenticate`
reads etcd and derives keys: it runs on a thread, never on the event loop."""

from __future__ import annotations

import hmac
import logging
import time
from typing import Any

from kafka.protocol.sasl import SaslAuthenticateResponse, SaslHandshakeResponse

from llog.auth.acls import ANONYMOUS
from llog.auth.authorizer import Caller
from llog.auth.login_budget import LoginGuard
from llog.auth.scram import MECHANISMS, ScramFailure, ScramServer
from llog.auth.users import Users
from llog.errors import LlogError
from llog.kafka.errors import ErrorCode
from llog.metrics import Metrics

log = logging.getLogger(__name__)

PLAIN = "PLAIN"


class SaslState:
    """One connection's authentication; :attr:`principal` once it succeeded, and
    :attr:`caller`, whom the authorizer judges (``User:ANONYMOUS`` until then; a
    client that gave the broker token is a super user)."""

    def __init__(self, token: str | None, users: Users | None = None, metrics: Metrics | None = None,
                 host: str = "", certificate: str | None = None, guard: LoginGuard | None = None) -> None:
        self._token = None if token is None else token.encode()
        self._guard = guard
        #: The PLAIN password tried (a failure is remembered by it, not re-derived).
        self._secret: bytes | None = None
        self._users = users
        self._metrics = metrics
        self.authenticated = token is None and users is None
        #: Who the client authenticated as (the PLAIN user name with the token).
        self.principal: str | None = None
        # A client certificate's subject names the client unless SASL names it after.
        self.caller = Caller(certificate or ANONYMOUS, host)
        self.mechanisms = [PLAIN, *(MECHANISMS if users is not None else ())]
        self._mechanism: str | None = None
        self._scram: ScramServer | None = None
        self._scram_user = ""
        #: Set when the connection must be closed once the answer is sent.
        self.failed = False
        #: Seconds the last refusal's answer is to be held back (a suspect's): the
        #: listener waits them out on its event loop, not on a login thread.
        self.hold_s = 0.0

    def handshake(self, req: Any) -> SaslHandshakeResponse:
        ok = req.mechanism in self.mechanisms
        self._mechanism = req.mechanism if ok else None
        self._scram = ScramServer(req.mechanism) if ok and req.mechanism in MECHANISMS else None
        return SaslHandshakeResponse[req.API_VERSION](
            error_code=ErrorCode.NONE if ok else ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=self.mechanisms)

    def authenticate(self, req: Any) -> SaslAuthenticateResponse:
        R = SaslAuthenticateResponse[req.API_VERSION]
        if self._mechanism is None:
            self.failed = True
            return R(error_code=ErrorCode.ILLEGAL_SASL_STATE, error_message="SaslHandshake first",
                     auth_bytes=b"", session_lifetime_ms=0)
        try:
            if self._scram is not None:
                reply = self._scram_step(bytes(req.auth_bytes))
            else:
                reply = self._plain(bytes(req.auth_bytes))
        except (ScramFailure, LlogError) as exc:
            self.failed = True
            self._count("failed")
            detail = f"SASL/{self._mechanism} as {self._scram_user or '?'!r}: {exc}"
            if self._guard is None:
                log.warning("Kafka client failed %s", detail)
            else:  # counted lines, and a suspect's answer held back (by the listener)
                now = time.monotonic()
                user = self._scram_user or None
                self.hold_s = self._guard.verdict(self.caller.host, user, now).delay_s
                self._guard.failed("kafka", self.caller.host, user, detail, now, self._secret,
                                   remembered=isinstance(exc, _Remembered))
            message = str(exc) if isinstance(exc, ScramFailure) else "authentication failed"
            return R(error_code=ErrorCode.SASL_AUTHENTICATION_FAILED, error_message=message,
                     auth_bytes=b"", session_lifetime_ms=0)
        if self.authenticated:
            self._count("ok")
            log.info("Kafka client authenticated as %r (SASL/%s)", self.principal, self._mechanism)
        return R(error_code=ErrorCode.NONE, error_message=None, auth_bytes=reply, session_lifetime_ms=0)

    def _count(self, result: str) -> None:
        if self._metrics is not None:
            self._metrics.kafka_authentications.labels(self._mechanism or "?", result).inc()

    def _plain(self, auth: bytes) -> bytes:
        parts = auth.split(b"\0")
        if len(parts) != 3:
            raise ScramFailure("malformed SASL/PLAIN message")
        authzid, user_b, password_b = parts
        user = self._scram_user = user_b.decode("utf-8", "replace")
        if authzid and authzid != user_b:
            raise ScramFailure("an authorization id other than the user is not supported")
        if self._token is not None and hmac.compare_digest(password_b, self._token):
            self._authenticated(user, token=True)
            return b""
        self._secret = password_b
        if self._guard is not None and self._guard.known_bad(user, password_b, time.monotonic()):
            raise _Remembered("authentication failed: unknown user or wrong password")
        if self._users is None or not self._users.verify(user, password_b.decode("utf-8", "replace")):
            raise ScramFailure("authentication failed: unknown user or wrong password"
                               + ("" if self._users is not None else " (the password is the broker's token)"))
        self._authenticated(user)
        return b""

    def _scram_step(self, message: bytes) -> bytes:
        scram = self._scram
        assert scram is not None and self._users is not None
        if not self._scram_user:
            self._scram_user = scram.first(message)
            return scram.challenge(self._users.credentials(self._scram_user).get(scram.mechanism),
                                   self._scram_user)
        reply = scram.final(message)
        self._authenticated(self._scram_user)
        return reply

    def _authenticated(self, user: str, *, token: bool = False) -> None:
        self.caller = Caller(f"User:{user}", self.caller.host, token=token)
        self.authenticated, self.principal = True, user


class _Remembered(ScramFailure):
    """A PLAIN password that just failed, refused again without deriving it."""
