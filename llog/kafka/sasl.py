"""SASL/PLAIN on the Kafka listener: with ``LLOG_BROKER_TOKEN`` set, a connection
must authenticate (SaslHandshake v1, then SaslAuthenticate) with the token as its
password before any request but ApiVersions; the user name is free (it is logged).
Without the token, the listener is open, like the HTTP API."""

from __future__ import annotations

import hmac
import logging
from typing import Any

from kafka.protocol.sasl import SaslAuthenticateResponse, SaslHandshakeResponse

from llog.kafka.errors import ErrorCode

log = logging.getLogger(__name__)

MECHANISM = "PLAIN"


class SaslState:
    """One connection's authentication."""

    def __init__(self, token: str | None) -> None:
        self._token = None if token is None else token.encode()
        self.authenticated = token is None
        self._mechanism_agreed = False
        #: Set when the connection must be closed once the answer is sent.
        self.failed = False

    def handshake(self, req: Any) -> SaslHandshakeResponse:
        ok = req.mechanism == MECHANISM
        self._mechanism_agreed = ok
        return SaslHandshakeResponse[req.API_VERSION](
            error_code=ErrorCode.NONE if ok else ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=[MECHANISM])

    def authenticate(self, req: Any) -> SaslAuthenticateResponse:
        R = SaslAuthenticateResponse[req.API_VERSION]
        if not self._mechanism_agreed:
            self.failed = True
            return R(error_code=ErrorCode.ILLEGAL_SASL_STATE, error_message="SaslHandshake for PLAIN first",
                     auth_bytes=b"", session_lifetime_ms=0)
        parts = bytes(req.auth_bytes).split(b"\0")
        user = parts[1].decode("utf-8", "replace") if len(parts) == 3 else "?"
        if self._token is None or (len(parts) == 3 and hmac.compare_digest(parts[2], self._token)):
            self.authenticated = True
            log.info("Kafka client authenticated as %r", user)
            return R(error_code=ErrorCode.NONE, error_message=None, auth_bytes=b"", session_lifetime_ms=0)
        self.failed = True
        log.warning("Kafka client %r failed SASL/PLAIN authentication", user)
        return R(error_code=ErrorCode.SASL_AUTHENTICATION_FAILED,
                 error_message="authentication failed: the password must be the broker's LLOG_BROKER_TOKEN",
                 auth_bytes=b"", session_lifetime_ms=0)
