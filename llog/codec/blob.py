"""Shared WAL blob: many partitions' bodies in one object (protocol/README.md, "Shared WAL blob").

    0   magic   b"LLS1"
    4   u32     big-endian length H of the msgpack header
    8   header  msgpack map {"v": 1, "created_at_ms": int, "parts": [part, ...]}
                part = {"topic", "partition", "msg_count", "encoding",
                        "body_offset", "body_length", "crc"}
    8+H bodies, concatenated in ``parts`` order; ``body_offset`` is absolute in the blob

Each body checksums itself (see :mod:`llog.codec.batch`), so a reader that fetched one
body by range GET can verify it without the header; ``crc`` in the header repeats it
for tools that check a whole blob.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

import msgpack

from llog.codec.batch import ENCODING, EncodedBody
from llog.codec.bodies import ENCODINGS
from llog.codec.crc import crc32, crc32_combine

MAGIC = b"LLS1"
VERSION = 1
_PREFIX = struct.Struct(">4sI")


class BlobFormatError(ValueError):
    """The bytes are not a valid shared WAL blob."""


@dataclass(frozen=True)
class BlobPart:
    topic: str
    partition: int
    msg_count: int
    body_offset: int
    body_length: int
    crc: int
    encoding: str = ENCODING


@dataclass(frozen=True)
class BlobBody:
    """One partition's encoded body, ready to pack."""

    topic: str
    partition: int
    msg_count: int
    body: bytes | EncodedBody
    encoding: str = ENCODING


@dataclass(frozen=True)
class PackedBlob:
    data: bytes
    parts: tuple[BlobPart, ...]
    created_at_ms: int
    #: CRC-32 of ``data``, combined from the bodies' CRCs (``None`` without zlib-ng).
    crc32: int | None = None


def _header(created_at_ms: int, parts: Sequence[BlobPart]) -> bytes:
    out: bytes = msgpack.packb(
        {
            "v": VERSION,
            "created_at_ms": created_at_ms,
            "parts": [
                {
                    "topic": p.topic,
                    "partition": p.partition,
                    "msg_count": p.msg_count,
                    "encoding": p.encoding,
                    "body_offset": p.body_offset,
                    "body_length": p.body_length,
                    "crc": p.crc,
                }
                for p in parts
            ],
        }
    )
    return out


def pack(bodies: Sequence[BlobBody], created_at_ms: int) -> PackedBlob:
    """Pack bodies into one blob. Body offsets depend on the header's length, which
    depends on the offsets' encoded widths, so the header is sized until it is stable."""
    if not bodies:
        raise BlobFormatError("a blob holds at least one body")
    encoded = [b.body if isinstance(b.body, EncodedBody) else EncodedBody.of(b.body) for b in bodies]
    header_len = 0
    while True:
        pos = _PREFIX.size + header_len
        parts = []
        for b, e in zip(bodies, encoded, strict=True):
            parts.append(BlobPart(b.topic, b.partition, b.msg_count, pos, e.length, e.crc, b.encoding))
            pos += e.length
        header = _header(created_at_ms, parts)
        if len(header) == header_len:
            break
        header_len = len(header)
    prefix = _PREFIX.pack(MAGIC, header_len)
    data = b"".join([prefix, header, *(c for e in encoded for c in e.chunks)])
    return PackedBlob(data, tuple(parts), created_at_ms, _blob_crc(prefix + header, encoded))


def _blob_crc(head: bytes, bodies: Sequence[EncodedBody]) -> int | None:
    """The whole blob's CRC-32, combined from the bodies' own: no body is read again."""
    if crc32_combine is None:
        return None
    crc = crc32(head)
    for e in bodies:
        full = e.full_crc()
        assert full is not None
        crc = crc32_combine(crc, full, e.length)
    return crc


def parse_header(data: bytes | memoryview) -> tuple[int, tuple[BlobPart, ...]]:
    """Return ``(created_at_ms, parts)`` from the start of a blob."""
    if len(data) < _PREFIX.size:
        raise BlobFormatError("blob shorter than its prefix")
    magic, hlen = _PREFIX.unpack_from(data, 0)
    if magic != MAGIC:
        raise BlobFormatError(f"bad magic {bytes(magic)!r}")
    end = _PREFIX.size + hlen
    if len(data) < end:
        raise BlobFormatError("blob shorter than its header")
    try:
        head = msgpack.unpackb(bytes(data[_PREFIX.size : end]))
        if head["v"] != VERSION:
            raise BlobFormatError(f"unsupported blob version {head['v']!r}")
        for p in head["parts"]:
            if p["encoding"] not in ENCODINGS:
                raise BlobFormatError(f"unknown body encoding {p['encoding']!r}")
        parts = tuple(
            BlobPart(
                topic=p["topic"],
                partition=p["partition"],
                msg_count=p["msg_count"],
                body_offset=p["body_offset"],
                body_length=p["body_length"],
                crc=p["crc"],
                encoding=p["encoding"],
            )
            for p in head["parts"]
        )
        return int(head["created_at_ms"]), parts
    except (KeyError, TypeError, ValueError, msgpack.UnpackException) as exc:
        if isinstance(exc, BlobFormatError):
            raise
        raise BlobFormatError(f"bad header: {exc}") from exc
