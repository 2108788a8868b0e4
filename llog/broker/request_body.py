"""Reading a request body up to the broker's size limit."""

from __future__ import annotations

from starlette.requests import Request


class RequestTooLarge(Exception):
    """The body is larger than the limit (answered 413)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"request body exceeds the limit of {limit} bytes")


async def read_body(request: Request, limit: int) -> bytes:
    """The whole body, or :class:`RequestTooLarge` as soon as it (or its declared
    ``Content-Length``) passes ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise RequestTooLarge(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestTooLarge(limit)
        chunks.append(chunk)
    return b"".join(chunks)
