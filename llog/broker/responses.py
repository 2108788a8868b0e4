"""The broker's two JSON answer shapes: an error, and a per-partition result list."""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse

from llog.broker.statuses import request_status, retry_headers
from llog.errors import LlogError


def error_response(status: int, error_type: str, message: str, **extra: Any) -> JSONResponse:
    """A whole request refused: ``error`` and ``error_type`` (plus ``extra``)."""
    return JSONResponse({"error": message, "error_type": error_type, **extra}, status_code=status,
                        headers=retry_headers(status))


def results_response(body: dict[str, Any], errors: list[LlogError], total: int) -> JSONResponse:
    """A per-partition answer: ``body`` plus the counts, with the request's status."""
    status = request_status(errors, total)
    return JSONResponse({**body, "success_count": total - len(errors), "error_count": len(errors)},
                        status_code=status, headers=retry_headers(status))
