"""``bytes-batch-v1``: one partition's records, laid out column-wise.

A WAL body never contains offsets (a blob is uploaded before its offsets are known);
only a key-compacted body (spec §10.2) carries offset deltas, for the gaps its removed
records left.
Layout (little-endian; see protocol/README.md, "bytes-batch-v1"):

    0   magic   b"LLB1"
    4   u32     CRC-32 (zlib) of every byte from offset 8 to the end of the body
    8   u32     record count n
    12  u32     flags: 1 = has keys, 2 = has headers, 4 = has null values, 8 = has offsets
    16  u32     header entry count h (0 without headers)
    20  u32     length of the concatenated values
    24  u32     length of the concatenated keys (0 without keys)
    28  u32     reserved, 0
    32  sections, each starting on an 8-byte boundary relative to the body:
        i64[n]     timestamps (ms)
        offsets: i32[n] offset deltas from the entry's first offset, strictly rising (a
                 key-compacted body: records removed leave gaps)
        i32[n+1]   value end offsets, Arrow binary layout (starts at 0)
        null values: u8[ceil(n/8)] value validity bitmap (LSB first; 0 = null, a tombstone)
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
from array import array
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import accumulate, pairwise, repeat
from typing import TYPE_CHECKING, Any, Literal, cast

from llog.codec.crc import crc32, crc32_combine
from llog.records import Headers, Record

if TYPE_CHECKING:
    import pyarrow as pa

ENCODING = "bytes-batch-v1"
MAGIC = b"LLB1"
FLAG_KEYS = 1
FLAG_HEADERS = 2
FLAG_NULL_VALUES = 4
FLAG_OFFSETS = 8
_FLAGS = FLAG_KEYS | FLAG_HEADERS | FLAG_NULL_VALUES | FLAG_OFFSETS
_HEADER = struct.Struct("<4sIIIIIII")
HEADER_SIZE = _HEADER.size  # 32
_MAX_SECTION = 2**31 - 1  # i32 offsets
_LITTLE = sys.byteorder == "little"
_ZEROS = bytes(8)
_SPLIT_COPY_MAX = 64 * 1024

#: ``(timestamps, keys, values, headers)`` of a run of records (:meth:`Batch.columns`).
#: A None value is a tombstone (Kafka's null value).
Columns = tuple[list[int], "list[bytes | None] | None", "list[bytes | None]", "list[Headers] | None"]
#: The same, as records to encode: a None timestamp is unset (gets the append time).
RecordColumns = tuple["list[int | None]", "list[bytes | None]", "list[bytes | None]", "list[Headers] | None"]
#: Byte lengths of those values and keys (0 for a None key), for a caller that measured
#: them already: the encoder then skips its own pass over each column.
Lengths = tuple[list[int], list[int]]


class BatchFormatError(ValueError):
    """The bytes are not a valid ``bytes-batch-v1`` body (the caller names the object)."""


def _pad(n: int) -> int:
    return (-n) & 7


def _le(arr: array[int]) -> bytes:
    if not _LITTLE:
        arr = array(arr.typecode, arr)
        arr.byteswap()
    return arr.tobytes()


def _split(data: memoryview, offsets: list[int]) -> list[bytes]:
    """The pieces of ``data`` between consecutive ``offsets``."""
    base = offsets[0]
    if offsets[-1] - base > _SPLIT_COPY_MAX:
        # Copy each piece straight out of the buffer: a large temporary copy costs more
        # (fresh pages from the OS) than the per-piece memoryview slices.
        return [data[a:b].tobytes() for a, b in pairwise(offsets)]
    blob = bytes(data[base : offsets[-1]])
    if base:
        offsets = [o - base for o in offsets]
    return [blob[a:b] for a, b in pairwise(offsets)]


def _offsets(lengths: Iterable[int], count: int) -> bytes:
    """The ``count + 1`` little-endian int32 offsets of pieces of these ``lengths``."""
    # struct packs the running sums straight from the iterator: building a list and an
    # array from it took half of a 120-record body's encode time.
    try:
        return struct.pack(f"<{count + 1}i", 0, *accumulate(lengths))
    except struct.error as exc:
        raise BatchFormatError("a section exceeds 2 GiB in one body") from exc


@dataclass(frozen=True)
class EncodedBody:
    """A body as the pieces it is laid out from, with its length and CRC. A shared
    blob joins every body's pieces once (:func:`llog.codec.blob.pack`) instead of
    building each body first: a fresh buffer of a few hundred KiB costs page faults
    that showed as a fifth of the write path's CPU."""

    chunks: tuple[bytes | bytearray, ...]
    length: int
    crc: int

    @classmethod
    def of(cls, body: bytes) -> EncodedBody:
        return cls((body,), len(body), struct.unpack_from("<I", body, 4)[0])

    def tobytes(self) -> bytes:
        return b"".join(self.chunks)

    def full_crc(self) -> int | None:
        """CRC-32 of every byte of the body (its own ``crc`` covers them from offset 8
        on), for an upload checksum; ``None`` without zlib-ng's ``crc32_combine``."""
        if crc32_combine is None:
            return None
        return crc32_combine(crc32(self.chunks[0][:8]), self.crc, self.length - 8)


def content_digest(body: bytes | memoryview) -> int:
    """What identifies a body's records for an idempotent retry (spec §8.7): CRC-32 of
    every byte after the timestamps section, that is the records' values, keys, headers
    and their offsets. Timestamps are left out: records sent without one are stamped
    with the append time, which differs between a batch and its retry."""
    n = int.from_bytes(bytes(body[8:12]), "little")
    return crc32(memoryview(body)[HEADER_SIZE + 8 * n:])


def encode(records: Sequence[Record], default_timestamp: int = 0) -> bytes:
    """Encode ``records`` into one body; a record without a timestamp gets
    ``default_timestamp`` (the writer's append time)."""
    return encode_body(records, default_timestamp).tobytes()


def encode_body(records: Sequence[Record], default_timestamp: int = 0) -> EncodedBody:
    """:func:`encode`, as pieces."""
    return encode_columns(columns_of(records), default_timestamp)


def columns_of(records: Sequence[Record]) -> RecordColumns:
    """``(timestamps, keys, values, headers)`` of ``records``, one list per field;
    ``headers`` is None when no record has any (timestamps may hold None: unset)."""
    headers = [r.headers for r in records]
    return (
        [r.timestamp for r in records],
        [r.key for r in records],
        [r.value for r in records],
        None if headers.count(()) == len(headers) else headers,
    )


def encode_columns(
    cols: RecordColumns, default_timestamp: int = 0, lengths: Lengths | None = None,
    deltas: Sequence[int] | None = None,
) -> EncodedBody:
    """Encode records given as columns (:func:`columns_of`); a record whose timestamp is
    None gets ``default_timestamp`` (the writer's append time). ``lengths``, when given,
    must be the columns' own (:data:`Lengths`). ``deltas``: each record's offset less
    the entry's first offset, strictly rising (a key-compacted body, spec §10.2)."""
    stamps, keys, values, headers = cols
    n = len(values)
    if n == 0:
        raise BatchFormatError("a batch holds at least one record")
    null_values = values.count(None)
    present = cast("list[bytes]", values) if not null_values else [v for v in values if v is not None]
    value_blob = b"".join(present)
    if len(value_blob) > _MAX_SECTION:
        raise BatchFormatError("values exceed 2 GiB in one body")
    if lengths is None:
        value_lengths: Iterable[int] = (map(len, present) if not null_values
                                        else [0 if v is None else len(v) for v in values])
    else:
        value_lengths = lengths[0]
    parts: list[bytes] = [_timestamps(stamps, default_timestamp, n)]
    flags = 0
    if deltas is not None:
        if len(deltas) != n or deltas[0] < 0 or any(b <= a for a, b in pairwise(deltas)) or deltas[-1] >= 2**31:
            raise BatchFormatError("offset deltas must rise strictly from >= 0, one per record")
        parts.append(_le(array("i", deltas)))
        flags = FLAG_OFFSETS
    parts.append(_offsets(value_lengths, n))
    if null_values:  # tombstones: a validity bitmap, as for keys
        parts.append(_validity(values, n))
        flags |= FLAG_NULL_VALUES
    key_flags, key_blob = _append_keys(parts, keys, lengths[1] if lengths else None, n)
    header_flags, header_count = _append_headers(parts, headers, n)
    flags |= key_flags | header_flags
    parts.append(value_blob)
    parts.append(key_blob)
    head = bytearray(_HEADER.pack(MAGIC, 0, n, flags, header_count, len(value_blob), len(key_blob), 0))
    return _assemble(head, parts)


def _timestamps(stamps: Sequence[int | None], default_timestamp: int, n: int) -> bytes:
    """The timestamp column; an unset timestamp becomes ``default_timestamp``."""
    if stamps.count(None) == n:  # unset: one append time for all
        ts = array("q", [default_timestamp]) * n
    else:
        ts = array("q", [default_timestamp if t is None else t for t in stamps])
    return _le(ts)


def _append_keys(
    parts: list[bytes], keys: Sequence[bytes | None], key_lengths: list[int] | None, n: int
) -> tuple[int, bytes]:
    """Append the key validity bitmap and offsets (none when no record has a key);
    returns the flags they set and the key bytes."""
    nulls = keys.count(None)
    if nulls == n:
        return 0, b""
    if nulls:
        parts.append(_validity(keys, n))
        key_blob = b"".join([k for k in keys if k is not None])
        if key_lengths is None:
            key_lengths = [len(k) if k is not None else 0 for k in keys]
        parts.append(_offsets(key_lengths, n))
    else:  # every record keyed (the common case): no per-record bit loop
        full, rest = divmod(n, 8)
        parts.append(b"\xff" * full + (bytes([(1 << rest) - 1]) if rest else b""))
        present = cast("list[bytes]", keys)
        key_blob = b"".join(present)
        parts.append(_offsets(key_lengths if key_lengths is not None else map(len, present), n))
    return FLAG_KEYS, key_blob


def _validity(items: Sequence[bytes | None], n: int) -> bytes:
    """Arrow's validity bitmap of ``items``: bit ``i`` set iff item ``i`` is not None."""
    bitmap = bytearray((n + 7) // 8)
    for i, item in enumerate(items):
        if item is not None:
            bitmap[i >> 3] |= 1 << (i & 7)
    return bytes(bitmap)


def _append_headers(parts: list[bytes], headers: Sequence[Headers] | None, n: int) -> tuple[int, int]:
    """Append the header sections (none when no record has a header); returns the
    flags they set and the number of headers."""
    if headers is None or not any(headers):
        return 0, 0
    hkeys = [h[0].encode() for hs in headers for h in hs]
    hvals = [h[1] for hs in headers for h in hs]
    header_count = len(hkeys)
    parts.append(_offsets(map(len, headers), n))
    parts.append(_offsets(map(len, hkeys), header_count))
    parts.append(_offsets(map(len, hvals), header_count))
    parts.append(b"".join(hkeys))
    parts.append(b"".join(hvals))
    return FLAG_HEADERS, header_count


def _assemble(head: bytearray, parts: list[bytes]) -> EncodedBody:
    """Lay ``parts`` out after ``head``, each padded, and write the CRC into ``head``."""
    # The CRC runs over the pieces; whoever writes the body joins them once.
    crc = crc32(memoryview(head)[8:])
    chunks: list[bytes | bytearray] = [head]
    length = len(head)
    for part in parts:
        crc = crc32(part, crc)
        chunks.append(part)
        pad = _pad(len(part))
        if pad:
            crc = crc32(_ZEROS[:pad], crc)
            chunks.append(_ZEROS[:pad])
        length += len(part) + pad
    struct.pack_into("<I", head, 4, crc)
    return EncodedBody(tuple(chunks), length, crc)


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
    #: None when no value is null; else bit ``i`` is 0 iff record ``i`` is a tombstone.
    value_validity: memoryview | None
    #: None for a dense body (record ``i`` at the entry's first offset + ``i``); else
    #: format 'i', record ``i``'s offset less the entry's first offset (spec §10.2).
    deltas: memoryview | None

    def __len__(self) -> int:
        return self.count

    @property
    def extent(self) -> int:
        """Offsets the body's records span from the entry's first: its record count,
        or for a key-compacted body its last delta + 1 (at most the entry's count)."""
        return self.count if self.deltas is None else int(self.deltas[self.count - 1]) + 1

    def span(self, lo: int, hi: int) -> tuple[int, int]:
        """Rows ``[start, stop)``: the records whose offset less the entry's first is in
        ``[lo, hi)``."""
        if self.deltas is None:
            start = min(max(lo, 0), self.count)
            return start, max(start, min(hi, self.count))
        return bisect_left(self.deltas, lo), bisect_left(self.deltas, hi)

    def offsets(self, first: int, start: int, stop: int) -> Iterable[int]:
        """The offsets of rows ``[start, stop)``, the entry's first at ``first``."""
        if self.deltas is None:
            return range(first + start, first + stop)
        return [first + d for d in self.deltas[start:stop].tolist()]

    def rows(
        self, start: int = 0, stop: int | None = None
    ) -> Iterator[tuple[int, bytes | None, bytes | None, Headers]]:
        """Yield ``(timestamp, key, value, headers)`` for records ``[start, stop)``."""
        ts, keys, values, headers = self.columns(start, stop)
        yield from zip(
            ts,
            keys if keys is not None else repeat(None),
            values,
            headers if headers is not None else repeat(()),
            strict=False,  # the repeat() fillers are endless
        )

    def columns(self, start: int = 0, stop: int | None = None) -> Columns:
        """Records ``[start, stop)`` as lists ``(timestamps, keys, values, headers)``;
        ``keys`` is None when the body has no keys, ``headers`` None when it has no
        headers. For callers that build their own per-record objects (cheaper than
        :meth:`rows`: no per-record tuple or generator step)."""
        stop = self.count if stop is None else min(stop, self.count)
        if start >= stop:
            return [], None, [], None
        ts: list[int] = self.timestamps[start:stop].tolist()
        values: list[bytes | None] = list(_split(self.values, self.value_offsets[start : stop + 1].tolist()))
        if self.value_validity is not None:
            _null_out(values, self.value_validity, start, stop)
        keys: list[bytes | None] | None = None
        if self.key_offsets is not None and self.keys is not None and self.key_validity is not None:
            keys = list(_split(self.keys, self.key_offsets[start : stop + 1].tolist()))
            _null_out(keys, self.key_validity, start, stop)
        return ts, keys, values, self._headers(start, stop)

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
            pa.binary(), n,
            [None if self.value_validity is None else buf(self.value_validity), buf(self.value_offsets),
             buf(self.values)],
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
                # All-zero offsets from one zeroed buffer (no per-record Python list).
                pa.Array.from_buffers(pa.int32(), n + 1, [None, buf(bytes(4 * (n + 1)))]),
                pa.array([], pa.struct([("key", pa.string()), ("value", pa.binary())])),
            ).cast(hdr_type)
        timestamp = pa.Array.from_buffers(pa.int64(), n, [None, buf(self.timestamps)])
        return {"timestamp": timestamp, "key": key, "value": value, "headers": headers}


def _null_out(items: list[bytes | None], bits: memoryview, start: int, stop: int) -> None:
    """Set ``items[j]`` (record ``start + j``) to None where the validity bit is 0."""
    mask = (1 << (stop - start)) - 1
    if (int.from_bytes(bits, "little") >> start) & mask == mask:  # none null: no per-record loop
        return
    for j in range(stop - start):
        if not bits[(start + j) >> 3] & (1 << ((start + j) & 7)):
            items[j] = None


def _cast(mv: memoryview, fmt: Literal["q", "i"]) -> memoryview:
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
    if verify and crc32(mv[8:]) != crc:
        raise BatchFormatError("checksum mismatch")
    if n == 0:
        raise BatchFormatError("empty batch")
    if flags & ~_FLAGS:
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
    deltas = _cast(take(4 * n), "i") if flags & FLAG_OFFSETS else None
    value_offsets = _cast(take(4 * (n + 1)), "i")
    value_validity = take((n + 7) // 8) if flags & FLAG_NULL_VALUES else None
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
        if hk is not None:
            _check_utf8(hk, hko)
    if deltas is not None:
        _check_deltas(deltas)
    return Batch(n, timestamps, value_offsets, values, key_validity, key_offsets, keys,
                 header_offsets, hko, hk, hvo, hv, value_validity, deltas)


def _check_deltas(deltas: memoryview) -> None:
    seq: list[int] = deltas.tolist()
    if seq[0] < 0 or any(b <= a for a, b in pairwise(seq)):
        raise BatchFormatError("offset deltas do not rise strictly from >= 0")


def _last(offsets: memoryview) -> int:
    v = int(offsets[len(offsets) - 1])
    if v < 0:
        raise BatchFormatError("negative offset")
    return v


def _check_utf8(data: memoryview, offsets: memoryview) -> None:
    # Header keys are str: bytes that pass the CRC but do not split into UTF-8 keys
    # (a writer bug) must fail here, as corruption, not later in rows() or in Arrow.
    raw = bytes(data)
    try:
        raw.decode()
    except UnicodeDecodeError as exc:
        raise BatchFormatError("header keys are not valid UTF-8") from exc
    if any(o < len(raw) and raw[o] & 0xC0 == 0x80 for o in offsets.tolist()):
        raise BatchFormatError("a header key boundary splits a UTF-8 character")


def _check_offsets(offsets: memoryview, end: int) -> None:
    # Endpoints and monotonicity: cheap enough (C-level tolist) and it keeps a
    # crafted body from slicing outside its buffers.
    if offsets[0] != 0 or offsets[len(offsets) - 1] != end:
        raise BatchFormatError("offsets do not span their section")
    seq: list[Any] = offsets.tolist()
    if sorted(seq) != seq:  # timsort on a sorted list is one C-level pass
        raise BatchFormatError("offsets are not monotonic")
