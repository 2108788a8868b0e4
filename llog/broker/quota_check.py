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
from llog.broker.responses import error_response
from llog.broker.state import Broker
from llog.quotas.entities import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, QuotaKind

CLIENT_ID_HEADER = "llog-client-id"
#: Where the produce route leaves the size of the body it read.
BODY_BYTES_SCOPE_KEY = "llog.body_bytes"
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
    """Count what a served request moved against its client's quota."""
    kind = _KINDS.get(path)
    if kind is None or not broker.quotas.any:
        return
    moved = request.scope.get(BODY_BYTES_SCOPE_KEY, 0) if kind == PRODUCER_BYTE_RATE else len(response.body)
    broker.meter.record(_user(caller), request.headers.get(CLIENT_ID_HEADER, ""), kind, moved, time.monotonic(),
                        broker.config.zone)


def _user(caller: Caller) -> str:
    return caller.principal.removeprefix("User:")
