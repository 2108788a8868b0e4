"""Crafted Kafka v2 record batches for the edge tests, the fuzzers and bench/edge.py:
valid ones built field by field, decompression bombs streamed through each codec
(never holding their inflated bytes), and batches whose CRC holds over broken insides;
and one request sent and its answer read on a plain socket (:func:`exchange`), for the
tests and benches that speak the protocol below any client.
"""

from __future__ import annotations

import socket
import struct
import zlib
from collections.abc import Iterable, Iterator
from typing import Any

from crc32c import crc32c

GZIP, SNAPPY, LZ4, ZSTD = 1, 2, 3, 4
T0 = 1_714_564_800_000
_BATCH = struct.Struct(">qiibIhiqqqhii")


def varint(value: int) -> bytes:
    """A zigzag varint (Kafka's record fields)."""
    v = (value << 1) ^ (value >> 63)
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def record(i: int, value: bytes | None, key: bytes | None = None, headers: Iterable[tuple[str, bytes]] = (),
           *, ts_delta: int | None = None, offset_delta: int | None = None) -> bytes:
    """Record ``i`` of a batch, framed (length prefix included)."""
    body = bytearray(b"\x00")
    body += varint(i if ts_delta is None else ts_delta)
    body += varint(i if offset_delta is None else offset_delta)
    body += varint(-1) if key is None else varint(len(key)) + key
    body += varint(-1) if value is None else varint(len(value)) + value
    hs = list(headers)
    body += varint(len(hs))
    for k, v in hs:
        body += varint(len(k.encode())) + k.encode() + varint(len(v)) + v
    return varint(len(body)) + bytes(body)


def batch(area: bytes, count: int, *, codec: int = 0, producer: tuple[int, int, int] = (-1, -1, -1),
          attributes: int | None = None, last_delta: int | None = None, base_ts: int = T0) -> bytes:
    """A v2 batch of ``count`` records whose (compressed) records area is ``area``,
    signed with its CRC-32C."""
    pid, epoch, seq = producer
    attrs = codec if attributes is None else attributes
    head = bytearray(_BATCH.pack(0, 49 + len(area), -1, 2, 0, attrs, count - 1 if last_delta is None else last_delta,
                                 base_ts, base_ts + count - 1, pid, epoch, seq, count))
    raw = bytes(head) + area
    crc = crc32c(raw[21:])
    return raw[:17] + struct.pack(">I", crc) + raw[21:]


def plain_batch(values: list[bytes], *, producer: tuple[int, int, int] = (-1, -1, -1),
                transactional: bool = False) -> bytes:
    """An uncompressed batch of ``values`` (keyless, no headers); ``transactional``
    sets the attribute bit 4."""
    return batch(b"".join(record(i, v) for i, v in enumerate(values)), len(values), producer=producer,
                 attributes=16 if transactional else None)


def _zeros(n: int, chunk: int = 1 << 20) -> Iterator[bytes]:
    block = bytes(chunk)
    while n > 0:
        yield block[: min(n, chunk)]
        n -= chunk


def _big_record_pieces(value_bytes: int) -> tuple[bytes, Iterator[bytes], bytes]:
    """One record whose value is ``value_bytes`` zeros, as (head, zeros, tail)."""
    fields_before = b"\x00" + varint(0) + varint(0) + varint(-1) + varint(value_bytes)
    fields_after = varint(0)
    length = len(fields_before) + value_bytes + len(fields_after)
    return varint(length) + fields_before, _zeros(value_bytes), fields_after


def compress_stream(pieces: Iterable[bytes], codec: int) -> bytes:
    """``pieces`` concatenated and compressed with ``codec`` as Kafka clients frame it,
    streamed: the uncompressed bytes are never held at once."""
    if codec == GZIP:
        c = zlib.compressobj(6, zlib.DEFLATED, 31)
        return b"".join([*(c.compress(p) for p in pieces), c.flush()])
    if codec == ZSTD:
        import zstandard

        z = zstandard.ZstdCompressor().compressobj()
        return b"".join([*(z.compress(p) for p in pieces), z.flush()])
    if codec == LZ4:
        import lz4.frame

        f = lz4.frame.LZ4FrameCompressor()
        return b"".join([f.begin(), *(f.compress(p) for p in pieces), f.flush()])
    if codec == SNAPPY:  # xerial framing, as the Java client writes it, in 4 MiB blocks
        import snappy

        out = [b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)]
        pending = bytearray()
        for p in pieces:
            pending += p
            while len(pending) >= 4 << 20:
                block = snappy.compress(bytes(pending[: 4 << 20]))
                out.append(struct.pack(">i", len(block)) + block)
                del pending[: 4 << 20]
        if pending:
            block = snappy.compress(bytes(pending))
            out.append(struct.pack(">i", len(block)) + block)
        return b"".join(out)
    raise ValueError(codec)


def bomb(codec: int, value_bytes: int = 1 << 30) -> bytes:
    """A one-record batch whose record's value is ``value_bytes`` zeros, compressed."""
    head, zeros, tail = _big_record_pieces(value_bytes)
    return batch(compress_stream([head, *zeros, tail], codec), 1, codec=codec)


def empty_records_bomb(count: int = 30_000_000) -> bytes:
    """A gzip batch of ``count`` empty records, every one with offset delta 0."""
    one = record(0, None)
    per_chunk = (1 << 20) // len(one)
    chunks = (one * min(per_chunk, count - i) for i in range(0, count, per_chunk))
    return batch(compress_stream(chunks, GZIP), count, codec=GZIP)


def resigned(raw: bytes) -> bytes:
    """``raw`` with its CRC-32C computed again (a batch altered after it was signed)."""
    return raw[:17] + struct.pack(">I", crc32c(raw[21:])) + raw[21:]


def hostile_batches(max_record_bytes: int) -> list[tuple[str, bytes, int]]:
    """(what, batch, the Kafka error code a broker with these limits must answer) of
    the edge acceptance: bombs in every codec, empty-record floods, a record over the
    limit once inflated, broken insides. Built in a few seconds (the bombs stream)."""
    over = record(0, bytes(max_record_bytes + 1))
    return [
        ("gzip bomb, a 1 GiB value", bomb(GZIP), 10),
        ("zstd bomb, a 1 GiB value", bomb(ZSTD), 10),
        ("lz4 bomb, a 1 GiB value", bomb(LZ4), 10),
        # snappy cannot compress past ~21:1, so its bomb is what fits under the batch limit
        ("snappy bomb, a 150 MiB value", bomb(SNAPPY, 150 << 20), 10),
        ("30,000,000 empty records", empty_records_bomb(30_000_000), 10),
        ("900,000 empty records, offset delta 0", empty_records_bomb(900_000), 87),
        ("a record over the limit once inflated", batch(compress_stream([over], ZSTD), 1, codec=ZSTD), 10),
        ("offset deltas 0, 0", batch(record(0, b"a") + record(1, b"b", offset_delta=0), 2), 87),
        ("a record framed past its end", batch(record(0, b"a")[:-1] + b"\x02\x00", 1), 87),
    ]


def read_exactly(sock: socket.socket, n: int) -> bytes:
    """``n`` bytes from ``sock``; :class:`ConnectionError` if it closes first."""
    out = b""
    while len(out) < n:
        got = sock.recv(n - len(out))
        if not got:
            raise ConnectionError("the broker closed the connection")
        out += got
    return out


def exchange(sock: socket.socket, request: Any, correlation: int = 1, client_id: str = "test") -> bytes:
    """Send ``request`` (a kafka-python protocol message) with its header; the answer's
    frame, header included (decode it with the response class at the request's version)."""
    request.with_header(correlation_id=correlation, client_id=client_id)
    sock.sendall(request.encode(header=True, framed=True))
    return read_exactly(sock, struct.unpack(">i", read_exactly(sock, 4))[0])
