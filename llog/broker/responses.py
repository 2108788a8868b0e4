"""The broker's JSON answers, encoded from their types (:mod:`llog.broker.api_types`)."""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.responses import Response

from llog.broker.api_types import ErrorBody, ResultsBody
from llog.broker.statuses import request_status, retry_headers
from llog.errors import LlogError


def json_response(body: Any, status: int = 200) -> Response:
    """``body`` (a struct, or plain data) as JSON, with ``Retry-After`` on a 503."""
    return Response(msgspec.json.encode(body), status_code=status, media_type="application/json",
                    headers=retry_headers(status))


def error_response(status: int, error_type: str, message: str, *, field: str | None = None) -> Response:
    """A whole request refused: ``error`` and ``error_type`` (and the ``field`` at fault)."""
    return json_response(ErrorBody(message, error_type, msgspec.UNSET if field is None else field), status)


def results_response(body: ResultsBody, errors: list[LlogError], total: int) -> Response:
    """A per-partition answer: ``body`` with the counts filled in, with the request's status."""
    body.success_count = total - len(errors)
    body.error_count = len(errors)
    return json_response(body, request_status(errors, total))
