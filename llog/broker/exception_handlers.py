"""Answers for requests that fail as a whole: an oversized body, a malformed request,
a client gone mid-body, and llog errors raised outside the per-partition results."""

from __future__ import annotations

import logging

from starlette.requests import ClientDisconnect
from starlette.responses import Response

from llog.broker.request_body import RequestTimeout, RequestTooLarge
from llog.broker.responses import error_response
from llog.broker.schemas import InvalidRequest
from llog.broker.statuses import error_status
from llog.errors import InvalidInput, LlogError

log = logging.getLogger(__name__)


def error_answer(exc: Exception) -> Response | None:
    """The answer to a request whose handler raised ``exc``; ``None`` for an
    exception that is the broker's own fault (the caller logs it and answers 500)."""
    if isinstance(exc, RequestTooLarge):
        return error_response(413, "RequestTooLarge", str(exc))
    if isinstance(exc, RequestTimeout):
        return error_response(408, "RequestTimeout", str(exc))
    if isinstance(exc, InvalidRequest):
        return error_response(400, "InvalidRequest", str(exc), field=exc.field)
    if isinstance(exc, ClientDisconnect):
        # Nobody reads this answer; the server drops it.
        return error_response(400, "ClientDisconnect", "the client closed the connection mid-request")
    if isinstance(exc, LlogError):
        # A whole request failed (not one partition of it): an outage is a 503 as on
        # the per-partition routes; anything else is the broker's fault.
        if isinstance(exc, InvalidInput):
            return error_response(400, type(exc).__name__, str(exc))
        status = error_status(exc)
        if status == 409:
            status = 500
            log.error("request failed: %s", exc, exc_info=exc)
        return error_response(status, type(exc).__name__, str(exc))
    return None
