"""Client quotas on the HTTP API (docs/security.md, "Quotas"): a produce's body bytes and
a consume's answer's bytes count against the caller's ``producer_byte_rate`` and
``consumer_byte_rate``; a client still waiting out its quota is answered 429 with
``Retry-After`` (whole seconds) and nothing is done. The client id is the
``Llog-Client-Id`` header (none: the empty client id)."""

from __future__ import annotations

import math
import time

from starlette.requests import Request
from starlette.responses import Response

from llog.auth.authorizer import Caller
from llog.broker.http_auth import CALLER_SCOPE_KEY
from llog.broker.responses import error_response
from llog.broker.state import Broker
from llog.quotas.entities import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, QuotaKind

CLIENT_ID_HEADER = "llog-client-id"
_KINDS: dict[str, QuotaKind] = {"/produce": PRODUCER_BYTE_RATE, "/consume": CONSUMER_BYTE_RATE}


def refused(broker: Broker, caller: Caller, request: Request, path: str) -> Response | None:
    """429 when the caller's client must still wait; ``None`` to go on."""
    kind = _KINDS.get(path)
    if kind is None or not broker.quotas.any:
        return None
    wait = broker.meter.wait_s(_user(caller), request.headers.get(CLIENT_ID_HEADER, ""), kind, time.monotonic(),
                               broker.config.zone)
    if wait <= 0:
        return None
    broker.conn.metrics.quota_throttles.labels("http", path).inc()
    broker.conn.metrics.quota_throttle_seconds.labels("http").inc(wait)
    resp = error_response(429, "QuotaExceeded", f"over the {kind} quota: send again in {wait:.2f} s")
    resp.headers["retry-after"] = str(math.ceil(wait))
    return resp


def count(broker: Broker, caller: Caller, request: Request, path: str, response: Response) -> None:
    """Count a served consume's answer against its client's ``consumer_byte_rate``."""
    if _KINDS.get(path) != CONSUMER_BYTE_RATE or not broker.quotas.any:
        return
    broker.meter.record(_user(caller), request.headers.get(CLIENT_ID_HEADER, ""), CONSUMER_BYTE_RATE,
                        len(response.body), time.monotonic(), broker.config.zone)


def count_produced(broker: Broker, request: Request, nbytes: int) -> None:
    """Count a produce's body against its client's ``producer_byte_rate`` as soon as it
    is read, before its records are taken: a client's requests in flight at once (HTTP
    clients send many) then find the rate they raise, and the one past the quota ends
    the burst (counted at its answer, after the commit, they all got in first)."""
    caller = request.scope.get(CALLER_SCOPE_KEY)
    if caller is None or not broker.quotas.any:
        return
    broker.meter.record(_user(caller), request.headers.get(CLIENT_ID_HEADER, ""), PRODUCER_BYTE_RATE, nbytes,
                        time.monotonic(), broker.config.zone)


def _user(caller: Caller) -> str:
    return caller.principal.removeprefix("User:")
