"""Reading a request body up to the broker's size limit, within its time limit."""

from __future__ import annotations

import asyncio
import logging

from starlette.requests import Request

log = logging.getLogger(__name__)


class RequestTooLarge(Exception):
    """The body is larger than the limit (answered 413)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"request body exceeds the limit of {limit} bytes")


class RequestTimeout(Exception):
    """The body did not arrive whole in time (answered 408): a client trickling its
    bytes holds a connection and its buffer no longer than this."""

    def __init__(self, timeout_s: float) -> None:
        super().__init__(f"request body did not arrive within {timeout_s:g} s (LLOG_BROKER_BODY_TIMEOUT_S)")


async def read_body(request: Request, limit: int, timeout_s: float) -> bytes:
    """The whole body, or :class:`RequestTooLarge` as soon as it (or its declared
    ``Content-Length``) passes ``limit`` bytes, or :class:`RequestTimeout` when it has
    not all arrived within ``timeout_s``."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise RequestTooLarge(limit)
    # A timer that cancels this task, not asyncio.wait_for, which costs a task per body.
    task = asyncio.current_task()
    assert task is not None
    expired = False

    def expire() -> None:
        nonlocal expired
        expired = True
        task.cancel()

    timer = asyncio.get_running_loop().call_later(timeout_s, expire)
    try:
        return await _read(request, limit)
    except asyncio.CancelledError:
        if not expired:
            raise
        if hasattr(task, "uncancel"):  # Python 3.11+: this cancellation is handled here
            task.uncancel()
        client = request.client
        log.warning("HTTP client %s sent a body slower than %g s; answering 408",
                    f"{client.host}:{client.port}" if client else "?", timeout_s)
        raise RequestTimeout(timeout_s) from None
    finally:
        timer.cancel()


async def _read(request: Request, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestTooLarge(limit)
        chunks.append(chunk)
    return b"".join(chunks)
