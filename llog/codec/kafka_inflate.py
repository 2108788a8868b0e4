"""Inflating a Kafka record batch's records with a cap: gzip, snappy (raw or
xerial-framed, as the Java client writes it), lz4 (frame) and zstd, each decoded in
steps that never produce more than ``cap`` bytes, so a small batch that inflates to
gigabytes (a decompression bomb) is refused having cost at most ``cap`` bytes of
memory. Used only to check a batch (:func:`llog.codec.kafka_body.check_batches`);
readers decode stored batches, which passed this check, with kafka-python's codecs.
"""

from __future__ import annotations

import io
import zlib
from collections.abc import Callable

from llog.codec.batch import BatchFormatError

GZIP, SNAPPY, LZ4, ZSTD = 1, 2, 3, 4
NAMES = {GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}

#: The largest zstd window a batch may ask for: a frame's window is memory the
#: decoder allocates before it produces a byte. Clients compress with far smaller
#: ones (level 3: 2 MiB; level 19: 8 MiB).
ZSTD_MAX_WINDOW = 1 << 25

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = 16  # magic, version, compatible version


class InflateError(BatchFormatError):
    """Compressed records that do not decode."""


class InflatedTooLarge(BatchFormatError):
    """Records that inflate past the cap (the caller says which batch and cap)."""


class CodecMissing(BatchFormatError):
    """A compression library is not installed."""


def inflate(data: memoryview, codec: int, cap: int) -> bytes:
    """``data`` decompressed with ``codec`` (a batch's compression attribute), or
    :class:`InflatedTooLarge` as soon as the output would pass ``cap`` bytes,
    :class:`InflateError` when it does not decode, :class:`CodecMissing` when the
    codec's library is not installed, and :class:`InflateError` for an unknown codec."""
    fn = _INFLATERS.get(codec)
    if fn is None:
        raise InflateError(f"unknown compression type {codec}")
    try:
        return fn(data, cap)
    except (InflatedTooLarge, CodecMissing, InflateError):
        raise
    except Exception as exc:  # each library raises its own kinds on bad input
        raise InflateError(f"does not decompress as {NAMES[codec]} ({type(exc).__name__}: {exc})") from None


def _gzip(data: memoryview, cap: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    rest = bytes(data)
    while rest:  # a gzip stream may hold several members, as GZIPInputStream reads them
        d = zlib.decompressobj(wbits=31)
        chunks.append(d.decompress(rest, cap + 1 - size))
        size += len(chunks[-1])
        if size > cap or d.unconsumed_tail:
            raise InflatedTooLarge(f"inflates past {cap} bytes")
        if not d.eof:
            raise InflateError("gzip stream ends early")
        rest = d.unused_data
    return _joined(chunks)


def _joined(chunks: list[bytes]) -> bytes:
    """The chunks as one bytes object, without a copy for the usual single one."""
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _varint_preamble(chunk: memoryview) -> int:
    """A raw snappy block's uncompressed length, from its little-endian varint
    preamble (read before anything is decompressed)."""
    value, shift = 0, 0
    for i in range(min(len(chunk), 5)):
        b = chunk[i]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value
        shift += 7
    raise InflateError("snappy block has no length preamble")


def _snappy(data: memoryview, cap: int) -> bytes:
    try:
        import snappy
    except ImportError:
        raise CodecMissing("snappy is not installed on this broker") from None
    if bytes(data[:8]) == _XERIAL_MAGIC:
        chunks = []
        pos = _XERIAL_HEADER
        while pos < len(data):
            if len(data) - pos < 4:
                raise InflateError("xerial snappy block header cut short")
            size = int.from_bytes(data[pos : pos + 4], "big")
            pos += 4
            if size > len(data) - pos:
                raise InflateError("xerial snappy block runs past the data")
            chunks.append(data[pos : pos + size])
            pos += size
    else:
        chunks = [data]
    out: list[bytes] = []
    size = 0
    for chunk in chunks:
        size += _varint_preamble(chunk)
        if size > cap:
            raise InflatedTooLarge(f"inflates past {cap} bytes")
        out.append(snappy.decompress(bytes(chunk)))
    if sum(map(len, out)) > cap:
        raise InflatedTooLarge(f"inflates past {cap} bytes")
    return _joined(out) if out else b""


def _lz4(data: memoryview, cap: int) -> bytes:
    try:
        import lz4.frame
    except ImportError:
        raise CodecMissing("lz4 is not installed on this broker") from None
    chunks: list[bytes] = []
    size = 0
    rest = bytes(data)
    while rest:  # concatenated frames
        d = lz4.frame.LZ4FrameDecompressor()
        chunks.append(d.decompress(rest, max_length=cap + 1 - size))
        size += len(chunks[-1])
        if size > cap or (not d.eof and not d.needs_input):
            raise InflatedTooLarge(f"inflates past {cap} bytes")
        if not d.eof:
            raise InflateError("lz4 frame ends early")
        rest = d.unused_data
    return _joined(chunks)


def _zstd(data: memoryview, cap: int) -> bytes:
    try:
        import zstandard
    except ImportError:
        raise CodecMissing("zstd is not installed on this broker") from None
    dctx = zstandard.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW)
    chunks: list[bytes] = []
    size = 0
    with dctx.stream_reader(io.BytesIO(bytes(data)), read_across_frames=True) as reader:
        # read() may return less than asked before the end: read on to the cap.
        while size <= cap and (more := reader.read(cap + 1 - size)):
            chunks.append(more)
            size += len(more)
    if size > cap:
        raise InflatedTooLarge(f"inflates past {cap} bytes")
    return _joined(chunks) if chunks else b""


_INFLATERS: dict[int, Callable[[memoryview, int], bytes]] = {GZIP: _gzip, SNAPPY: _snappy, LZ4: _lz4, ZSTD: _zstd}
