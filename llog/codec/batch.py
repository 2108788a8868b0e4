"""``bytes-batch-v1``: one partition's records, laid out column-wise.

A body never contains offsets (a blob is uploaded before its offsets are known).
Layout (little-endian; see protocol/README.md, "bytes-batch-v1"):

    0   magic   b"LLB1"
    4   u32     CRC-32 (zlib) of every byte from offset 8 to the end of the body
    8   u32     record count n
    12  u32     flags: 1 = has keys, 2 = has headers
    16  u32     header entry count h (0 without headers)
    20  u32     length of the concatenated values
    24  u32     length of the concatenated keys (0 without keys)
    28  u32     reserved, 0
    32  sections, each starting on an 8-byte boundary relative to the body:
        i64[n]     timestamps (ms)
        i32[n+1]   value end offsets, Arrow binary layout (starts at 0)
        keys:    u8[ceil(n/8)] key validity bitmap (LSB first), i32[n+1] key offsets
        headers: i32[n+1] per-record header list offsets, i32[h+1] header-key offsets,
                 i32[h+1] header-value offsets, header-key bytes, header-value bytes
        values bytes, keys bytes

The arrays are exactly Arrow's buffers, so a reader can wrap them in Arrow arrays
without a per-record loop (:meth:`Batch.to_arrow`).
"""

from __future__ import annotations

import struct
import sys
import zlib
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import TYPE_CHECKING, Any

from llog.records import Headers, Record

if TYPE_CHECKING:
    import pyarrow as pa

ENCODING = "bytes-batch-v1"
MAGIC = b"LLB1"
FLAG_KEYS = 1
FLAG_HEADERS = 2
_HEADER = struct.Struct("<4sIIIIIII")
HEADER_SIZE = _HEADER.size  # 32
_MAX_SECTION = 2**31 - 1  # i32 offsets
_LITTLE = sys.byteorder == "little"


class BatchFormatError(ValueError):
    """The bytes are not a valid ``bytes-batch-v1`` body (the caller names the object)."""


def _pad(n: int) -> int:
    return (-n) & 7


def _le(arr: array[int]) -> bytes:
    if not _LITTLE:
        arr = array(arr.typecode, arr)
        arr.byteswap()
    return arr.tobytes()


def _offsets(lengths: Iterator[int] | Sequence[int]) -> array[int]:
    out = array("i", [0])
    out.extend(accumulate(lengths))
    return out


def encode(records: Sequence[Record]) -> bytes:
    """Encode ``records`` (timestamps already set) into one body."""
    n = len(records)
    if n == 0:
        raise BatchFormatError("a batch holds at least one record")
    values = [r.value for r in records]
    value_blob = b"".join(values)
    if len(value_blob) > _MAX_SECTION:
        raise BatchFormatError("values exceed 2 GiB in one body")
    parts: list[bytes] = []
    ts = array("q", [r.timestamp if r.timestamp is not None else 0 for r in records])
    parts.append(_le(ts))
    parts.append(_le(_offsets(map(len, values))))
    flags = 0
    key_blob = b""
    keys = [r.key for r in records]
    if any(k is not None for k in keys):
        flags |= FLAG_KEYS
        bitmap = bytearray((n + 7) // 8)
        for i, k in enumerate(keys):
            if k is not None:
                bitmap[i >> 3] |= 1 << (i & 7)
        parts.append(bytes(bitmap))
        key_blob = b"".join(k for k in keys if k is not None)
        parts.append(_le(_offsets(len(k) if k is not None else 0 for k in keys)))
    header_count = 0
    if any(r.headers for r in records):
        flags |= FLAG_HEADERS
        hkeys = [h[0].encode() for r in records for h in r.headers]
        hvals = [h[1] for r in records for h in r.headers]
        header_count = len(hkeys)
        parts.append(_le(_offsets(len(r.headers) for r in records)))
        parts.append(_le(_offsets(map(len, hkeys))))
        parts.append(_le(_offsets(map(len, hvals))))
        parts.append(b"".join(hkeys))
        parts.append(b"".join(hvals))
    parts.append(value_blob)
    parts.append(key_blob)
    body = bytearray(HEADER_SIZE)
    for part in parts:
        body += part
        body += b"\0" * _pad(len(part))
    _HEADER.pack_into(body, 0, MAGIC, 0, n, flags, header_count, len(value_blob), len(key_blob), 0)
    struct.pack_into("<I", body, 4, zlib.crc32(memoryview(body)[8:]))
    return bytes(body)


@dataclass(frozen=True)
class Batch:
    """A decoded body: column buffers over the original bytes (no copies)."""

    count: int
    timestamps: memoryview  # format 'q'
    value_offsets: memoryview  # format 'i', n+1
    values: memoryview
    key_validity: memoryview | None
    key_offsets: memoryview | None
    keys: memoryview | None
    header_offsets: memoryview | None
    header_key_offsets: memoryview | None
    header_keys: memoryview | None
    header_value_offsets: memoryview | None
    header_values: memoryview | None

    def __len__(self) -> int:
        return self.count

    def rows(self, start: int = 0, stop: int | None = None) -> Iterator[tuple[int, bytes | None, bytes, Headers]]:
        """Yield ``(timestamp, key, value, headers)`` for records ``[start, stop)``."""
        stop = self.count if stop is None else min(stop, self.count)
        if start >= stop:
            return
        ts = self.timestamps[start:stop].tolist()
        vo = self.value_offsets[start : stop + 1].tolist()
        vals = bytes(self.values[vo[0] : vo[-1]])
        base = vo[0]
        keys: list[bytes | None] | None = None
        if self.key_offsets is not None and self.keys is not None and self.key_validity is not None:
            ko = self.key_offsets[start : stop + 1].tolist()
            kb = bytes(self.keys[ko[0] : ko[-1]])
            kbase = ko[0]
            bits = self.key_validity
            keys = [
                kb[ko[j] - kbase : ko[j + 1] - kbase] if bits[(start + j) >> 3] & (1 << ((start + j) & 7)) else None
                for j in range(stop - start)
            ]
        headers = self._headers(start, stop)
        for j in range(stop - start):
            yield (
                ts[j],
                keys[j] if keys is not None else None,
                vals[vo[j] - base : vo[j + 1] - base],
                headers[j] if headers is not None else (),
            )

    def _headers(self, start: int, stop: int) -> list[Headers] | None:
        if (
            self.header_offsets is None
            or self.header_key_offsets is None
            or self.header_keys is None
            or self.header_value_offsets is None
            or self.header_values is None
        ):
            return None
        ho = self.header_offsets[start : stop + 1].tolist()
        hko = self.header_key_offsets.tolist()
        hvo = self.header_value_offsets.tolist()
        hk = bytes(self.header_keys)
        hv = bytes(self.header_values)
        out: list[Headers] = []
        for j in range(stop - start):
            out.append(
                tuple(
                    (hk[hko[h] : hko[h + 1]].decode(), hv[hvo[h] : hvo[h + 1]])
                    for h in range(ho[j], ho[j + 1])
                )
            )
        return out

    def to_arrow(self) -> dict[str, pa.Array]:
        """Arrow arrays for ``timestamp`` (int64 ms), ``key``, ``value`` and ``headers``,
        built straight from the buffers (zero-copy where Arrow's layout allows)."""
        import pyarrow as pa

        n = self.count
        buf = pa.py_buffer
        value = pa.Array.from_buffers(
            pa.binary(), n, [None, buf(self.value_offsets), buf(self.values)]
        )
        if self.key_offsets is not None and self.keys is not None and self.key_validity is not None:
            key = pa.Array.from_buffers(
                pa.binary(), n, [buf(self.key_validity), buf(self.key_offsets), buf(self.keys)]
            )
        else:
            key = pa.nulls(n, pa.binary())
        hdr_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
        if (
            self.header_offsets is not None
            and self.header_key_offsets is not None
            and self.header_keys is not None
            and self.header_value_offsets is not None
            and self.header_values is not None
        ):
            h = len(self.header_key_offsets) - 1
            hkeys = pa.Array.from_buffers(
                pa.string(), h, [None, buf(self.header_key_offsets), buf(self.header_keys)]
            )
            hvals = pa.Array.from_buffers(
                pa.binary(), h, [None, buf(self.header_value_offsets), buf(self.header_values)]
            )
            entries = pa.StructArray.from_arrays([hkeys, hvals], names=["key", "value"])
            headers = pa.ListArray.from_arrays(
                pa.Array.from_buffers(pa.int32(), n + 1, [None, buf(self.header_offsets)]), entries
            ).cast(hdr_type)
        else:
            headers = pa.ListArray.from_arrays(
                pa.array([0] * (n + 1), pa.int32()),
                pa.array([], pa.struct([("key", pa.string()), ("value", pa.binary())])),
            ).cast(hdr_type)
        timestamp = pa.Array.from_buffers(pa.int64(), n, [None, buf(self.timestamps)])
        return {"timestamp": timestamp, "key": key, "value": value, "headers": headers}


def _cast(mv: memoryview, fmt: str) -> memoryview:
    if not _LITTLE:  # pragma: no cover - big-endian hosts
        arr = array(fmt, mv.tobytes())
        arr.byteswap()
        return memoryview(arr)
    return mv.cast(fmt)


def decode(body: bytes | bytearray | memoryview, *, verify: bool = True) -> Batch:
    """Decode one body; raise :class:`BatchFormatError` on any inconsistency."""
    mv = memoryview(body)
    if mv.ndim != 1 or mv.itemsize != 1:
        mv = mv.cast("B")
    total = len(mv)
    if total < HEADER_SIZE:
        raise BatchFormatError(f"body of {total} bytes is shorter than its header")
    magic, crc, n, flags, hcount, vlen, klen, _ = _HEADER.unpack_from(mv, 0)
    if magic != MAGIC:
        raise BatchFormatError(f"bad magic {bytes(magic)!r}")
    if verify and zlib.crc32(mv[8:]) != crc:
        raise BatchFormatError("checksum mismatch")
    if n == 0:
        raise BatchFormatError("empty batch")
    if flags & ~(FLAG_KEYS | FLAG_HEADERS):
        raise BatchFormatError(f"unknown flags {flags:#x}")
    pos = HEADER_SIZE

    def take(size: int) -> memoryview:
        nonlocal pos
        end = pos + size
        if end > total:
            raise BatchFormatError("truncated body")
        out = mv[pos:end]
        pos = end + _pad(size)
        return out

    timestamps = _cast(take(8 * n), "q")
    value_offsets = _cast(take(4 * (n + 1)), "i")
    key_validity = key_offsets = None
    if flags & FLAG_KEYS:
        key_validity = take((n + 7) // 8)
        key_offsets = _cast(take(4 * (n + 1)), "i")
    header_offsets = hko = hvo = hk = hv = None
    if flags & FLAG_HEADERS:
        header_offsets = _cast(take(4 * (n + 1)), "i")
        hko = _cast(take(4 * (hcount + 1)), "i")
        hvo = _cast(take(4 * (hcount + 1)), "i")
        hk = take(_last(hko))
        hv = take(_last(hvo))
        _check_offsets(header_offsets, hcount)
    values = take(vlen)
    keys = take(klen) if flags & FLAG_KEYS else None
    if pos != total:
        raise BatchFormatError(f"body length {total} does not match its sections ({pos})")
    _check_offsets(value_offsets, vlen)
    if key_offsets is not None:
        _check_offsets(key_offsets, klen)
    if hko is not None and hvo is not None:
        _check_offsets(hko, len(hk) if hk is not None else 0)
        _check_offsets(hvo, len(hv) if hv is not None else 0)
    return Batch(n, timestamps, value_offsets, values, key_validity, key_offsets, keys,
                 header_offsets, hko, hk, hvo, hv)


def _last(offsets: memoryview) -> int:
    v = int(offsets[len(offsets) - 1])
    if v < 0:
        raise BatchFormatError("negative offset")
    return v


def _check_offsets(offsets: memoryview, end: int) -> None:
    # Endpoints and monotonicity: cheap enough (C-level tolist) and it keeps a
    # crafted body from slicing outside its buffers.
    if offsets[0] != 0 or offsets[len(offsets) - 1] != end:
        raise BatchFormatError("offsets do not span their section")
    seq: list[Any] = offsets.tolist()
    if any(b < a for a, b in zip(seq, seq[1:])):
        raise BatchFormatError("offsets are not monotonic")
