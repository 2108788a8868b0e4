"""Answers for requests that fail as a whole: HTTP errors, an oversized body, a
malformed request, and llog errors raised outside the per-partition results."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from llog.broker.request_body import RequestTooLarge
from llog.broker.responses import error_response
from llog.broker.schemas import InvalidRequest
from llog.broker.statuses import error_status
from llog.errors import InvalidInput, LlogError

log = logging.getLogger(__name__)


async def http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own 404/405 in the broker's error shape."""
    assert isinstance(exc, HTTPException)
    kind = {404: "NotFound", 405: "MethodNotAllowed"}.get(exc.status_code, "HTTPError")
    return error_response(exc.status_code, kind, f"{exc.detail}: {request.method} {request.url.path}")


async def too_large(_request: Request, exc: Exception) -> Response:
    """A body over the size limit: 413."""
    return error_response(413, "RequestTooLarge", str(exc))


async def invalid_request(_request: Request, exc: Exception) -> Response:
    """A body or query that does not parse: 400, naming the field."""
    assert isinstance(exc, InvalidRequest)
    return error_response(400, "InvalidRequest", str(exc), field=exc.field)


async def llog_error(_request: Request, exc: Exception) -> Response:
    """A whole request failed (not one partition of it): an outage is a 503 as
    on the per-partition routes; anything else is the broker's fault."""
    assert isinstance(exc, LlogError)
    if isinstance(exc, InvalidInput):
        status = 400
    else:
        status = error_status(exc)
        if status == 409:
            status = 500
            log.error("request failed: %s", exc, exc_info=exc)
    return error_response(status, type(exc).__name__, str(exc))


#: Starlette's ``exception_handlers``, most specific class first.
EXCEPTION_HANDLERS: dict[Any, Callable[[Request, Exception], Awaitable[Response]]] = {
    HTTPException: http_error, RequestTooLarge: too_large, InvalidRequest: invalid_request, LlogError: llog_error,
}
