"""The HTTP/1.1 the S3 proxy needs: message heads, body framing (Content-Length,
chunked, until close) and S3 error responses. Bodies are copied as raw bytes, so a
chunked body keeps its chunk lines and trailers."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from email.utils import formatdate

#: The streams' buffer limit: the largest message head accepted, and how much a stream
#: buffers before it stops reading (64 KiB, asyncio's default, halves a large GET's rate).
STREAM_LIMIT = 1024 * 1024
_COPY_BYTES = 1024 * 1024


class HttpParseError(Exception):
    """A message head the proxy cannot parse; the connection is closed."""


@dataclass(frozen=True)
class Head:
    """A request or response head: its first line split in three, headers in order."""

    first: tuple[str, str, str]
    headers: tuple[tuple[str, str], ...]

    def get(self, name: str, default: str = "") -> str:
        low = name.lower()
        for k, v in self.headers:
            if k.lower() == low:
                return v
        return default

    def without(self, name: str) -> Head:
        low = name.lower()
        return Head(self.first, tuple((k, v) for k, v in self.headers if k.lower() != low))

    def encode(self) -> bytes:
        lines = [" ".join(self.first), *(f"{k}: {v}" for k, v in self.headers)]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    @property
    def wants_close(self) -> bool:
        return self.get("connection").lower() == "close"


def parse_head(raw: bytes) -> Head:
    text = raw.decode("latin-1").rstrip("\r\n")
    first, *lines = text.split("\r\n")
    parts = first.split(" ", 2)
    if len(parts) < 2:
        raise HttpParseError(f"bad start line {first!r}")
    headers = []
    for line in lines:
        name, sep, value = line.partition(":")
        if not sep:
            raise HttpParseError(f"bad header line {line!r}")
        headers.append((name.strip(), value.strip()))
    return Head((parts[0], parts[1], parts[2] if len(parts) > 2 else ""), tuple(headers))


async def read_head(reader: asyncio.StreamReader) -> Head | None:
    """The next head on ``reader``; None when the peer closed between messages."""
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            return None
        raise HttpParseError("connection closed inside a message head") from None
    except asyncio.LimitOverrunError:
        raise HttpParseError(f"message head over {STREAM_LIMIT} bytes") from None
    return parse_head(raw)


@dataclass(frozen=True)
class Framing:
    """How a body ends: ``length`` bytes, ``chunked``, at ``close``, or ``none``."""

    kind: str
    length: int = 0

    @property
    def empty(self) -> bool:
        return self.kind == "none" or (self.kind == "length" and self.length == 0)


def request_framing(head: Head) -> Framing:
    if "chunked" in head.get("transfer-encoding").lower():
        return Framing("chunked")
    length = head.get("content-length")
    return Framing("length", int(length)) if length else Framing("none")


def response_framing(head: Head, method: str) -> Framing:
    status = int(head.first[1])
    if method == "HEAD" or status < 200 or status in (204, 304):
        return Framing("none")
    if "chunked" in head.get("transfer-encoding").lower():
        return Framing("chunked")
    length = head.get("content-length")
    return Framing("length", int(length)) if length else Framing("close")


async def copy_body(framing: Framing, reader: asyncio.StreamReader, writer: asyncio.StreamWriter | None) -> None:
    """Move one body from ``reader`` to ``writer`` (None: discard it)."""
    async for piece in _body_pieces(framing, reader):
        if writer is not None:
            writer.write(piece)
            await writer.drain()


async def read_body(framing: Framing, reader: asyncio.StreamReader) -> bytes:
    return b"".join([piece async for piece in _body_pieces(framing, reader)])


async def _body_pieces(framing: Framing, reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    if framing.kind == "length":
        left = framing.length
        while left:
            piece = await reader.readexactly(min(left, _COPY_BYTES))
            left -= len(piece)
            yield piece
    elif framing.kind == "chunked":
        while True:
            size_line = await reader.readuntil(b"\r\n")
            yield size_line
            size = int(size_line.split(b";", 1)[0].strip(), 16)
            if size == 0:
                while True:  # trailers, then the empty line
                    line = await reader.readuntil(b"\r\n")
                    yield line
                    if line == b"\r\n":
                        return
            yield await reader.readexactly(size + 2)
    elif framing.kind == "close":
        while piece := await reader.read(_COPY_BYTES):
            yield piece


_REASONS = {500: "Internal Server Error", 503: "Slow Down"}
_S3_ERRORS = {
    500: ("InternalError", "We encountered an internal error. Please try again."),
    503: ("SlowDown", "Please reduce your request rate."),
}


def s3_error(status: int, resource: str, *, with_body: bool = True, close: bool = False) -> bytes:
    """A whole S3 error response (head and XML body) for ``status`` 500 or 503."""
    code, message = _S3_ERRORS[status]
    request_id = uuid.uuid4().hex[:16].upper()
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{message}</Message>"
        f"<Resource>{_xml_escape(resource)}</Resource><RequestId>{request_id}</RequestId></Error>"
    ).encode()
    headers = [
        ("Content-Type", "application/xml"),
        ("Content-Length", str(len(body) if with_body else 0)),
        ("x-amz-request-id", request_id),
        ("Date", formatdate(usegmt=True)),
        ("Server", "llog-nemesis"),
    ]
    if close:
        headers.append(("Connection", "close"))
    head = Head(("HTTP/1.1", str(status), _REASONS[status]), tuple(headers)).encode()
    return head + body if with_body else head


def simple_response(status: int, reason: str, body: bytes, content_type: str) -> bytes:
    head = Head(("HTTP/1.1", str(status), reason), (
        ("Content-Type", content_type), ("Content-Length", str(len(body))),
    ))
    return head.encode() + body


def _xml_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
