"""The records inside a Kafka v2 record batch (the Kafka protocol guide, "Record"):
one parser that both checks a producer's batch before it is stored and decodes a
stored batch for readers, so every batch a broker accepts is one every reader and the
compactor can decode.

Each record is ``length: varint`` then, within those ``length`` bytes,
``attributes: int8, timestampDelta: varlong, offsetDelta: varint, keyLength: varint,
key, valueLength: varint, value, headerCount: varint`` and per header
``keyLength: varint, key (UTF-8), valueLength: varint, value``; varints are zigzag
encoded, a length of -1 is null. Checked: the framing tiles the records area exactly,
record ``i`` has offset delta ``i``, attributes are 0, a null or negative header key,
a header key that is not UTF-8, a negative length other than -1 and a timestamp
outside int64 are refused, and so is a record whose key, value and headers together
pass the record limit.
"""

from __future__ import annotations

from dataclasses import dataclass

from llog.codec.batch import BatchFormatError
from llog.records import Headers

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


class RecordFormatError(BatchFormatError):
    """A record that is not well-formed (the message says which and why)."""


class OversizedRecord(RecordFormatError):
    """A record whose key, value and headers pass the record limit."""

    def __init__(self, index: int, size: int, limit: int) -> None:
        super().__init__(f"record {index} holds {size} bytes of key, value and headers, over the limit of {limit}")
        self.size = size
        self.limit = limit


@dataclass
class KafkaRecords:
    """Decoded records as columns: what :func:`parse` fills when asked to."""

    timestamps: list[int | None]
    keys: list[bytes | None]
    values: list[bytes | None]
    headers: list[Headers]


def parse(
    area: bytes,
    n: int,
    *,
    base_timestamp: int,
    log_append_time: int | None = None,
    limit: int | None = None,
    out: KafkaRecords | None = None,
) -> None:
    """Check the ``n`` records of ``area`` (a batch's records, decompressed) and, with
    ``out``, append them to it. ``base_timestamp`` is the batch's; a batch stamped with
    log-append time gives every record ``log_append_time``. ``limit`` caps each record's
    key + value + header bytes. Raises :class:`RecordFormatError` (with the record's
    index) for anything malformed."""
    end = len(area)
    pos = 0
    i = 0
    # Single-byte timestamp deltas lie in [-64, 63]; longer ones widen the range.
    lowest_delta, highest_delta = -64, 63
    try:
        for i in range(n):
            pos, stop, ts_delta = _head(area, pos, i, end)
            if not -64 <= ts_delta <= 63:
                lowest_delta, highest_delta = min(lowest_delta, ts_delta), max(highest_delta, ts_delta)
            pos, key_at, key_len, value_at, value_len, headers, size = _body(area, pos, i, stop)
            if limit is not None and size > limit:
                raise OversizedRecord(i, size, limit)
            if out is not None:
                out.timestamps.append(base_timestamp + ts_delta if log_append_time is None else log_append_time)
                out.keys.append(None if key_len < 0 else area[key_at : key_at + key_len])
                out.values.append(None if value_len < 0 else area[value_at : value_at + value_len])
                out.headers.append(headers)
    except IndexError:
        raise RecordFormatError(f"record {i} runs past the records area") from None
    if pos != end:
        raise RecordFormatError(f"{end - pos} bytes follow the last of the {n} records")
    for ts in (base_timestamp + lowest_delta, base_timestamp + highest_delta, log_append_time or 0):
        if not _INT64_MIN <= ts <= _INT64_MAX:
            raise RecordFormatError(f"a record's timestamp {ts} is outside int64")


# The two halves of one record, for :func:`parse`'s loop. Varints of one and two bytes
# (the common cases) are read in line; _varint reads the others. Zigzag: v -> (v >> 1) ^ -(v & 1).


def _head(area: bytes, pos: int, i: int, end: int) -> tuple[int, int, int]:
    """Record ``i``'s length, attributes, timestamp and offset deltas from ``pos``:
    (position of its key length, the record's end, its timestamp delta)."""
    b = area[pos]
    if b < 0x80:
        length = (b >> 1) ^ -(b & 1)
        pos += 1
    elif (c := area[pos + 1]) < 0x80:
        v = (b & 0x7F) | (c << 7)
        length = (v >> 1) ^ -(v & 1)
        pos += 2
    else:
        length, pos = _varint(area, pos, 5)
    stop = pos + length
    if length < 0 or stop > end:
        raise RecordFormatError(f"record {i} has length {length}, past the records area")
    if area[pos]:
        raise RecordFormatError(f"record {i} has attributes {area[pos]}, which must be 0")
    b = area[pos + 1]
    if b < 0x80:
        pos += 2
        ts_delta = (b >> 1) ^ -(b & 1)
    else:
        ts_delta, pos = _varint(area, pos + 1, 10)
    # The offset delta must be i, whose zigzag is 2i.
    b = area[pos]
    if b < 0x80:
        zigzag = b
        pos += 1
    elif (c := area[pos + 1]) < 0x80:
        zigzag = (b & 0x7F) | (c << 7)
        pos += 2
    else:
        offset_delta, pos = _varint(area, pos, 5)
        zigzag = (offset_delta << 1) ^ (offset_delta >> 63)
    if zigzag != i << 1:
        raise RecordFormatError(f"record {i} has offset delta {(zigzag >> 1) ^ -(zigzag & 1)}")
    return pos, stop, ts_delta


def _body(area: bytes, pos: int, i: int, stop: int) -> tuple[int, int, int, int, int, Headers, int]:
    """Record ``i``'s key, value and headers from ``pos``, ending at ``stop``: (its end,
    key position and length, value position and length, headers, its key + value +
    header bytes); a length of -1 is null."""
    b = area[pos]
    if b < 0x80:
        key_len = (b >> 1) ^ -(b & 1)
        pos += 1
    elif (c := area[pos + 1]) < 0x80:
        v = (b & 0x7F) | (c << 7)
        key_len = (v >> 1) ^ -(v & 1)
        pos += 2
    else:
        key_len, pos = _varint(area, pos, 5)
    key_at = pos
    if key_len > 0:
        pos += key_len
    elif key_len < -1:
        raise RecordFormatError(f"record {i} has key length {key_len}")
    b = area[pos]
    if b < 0x80:
        value_len = (b >> 1) ^ -(b & 1)
        pos += 1
    elif (c := area[pos + 1]) < 0x80:
        v = (b & 0x7F) | (c << 7)
        value_len = (v >> 1) ^ -(v & 1)
        pos += 2
    else:
        value_len, pos = _varint(area, pos, 5)
    value_at = pos
    if value_len > 0:
        pos += value_len
    elif value_len < -1:
        raise RecordFormatError(f"record {i} has value length {value_len}")
    size = (key_len if key_len > 0 else 0) + (value_len if value_len > 0 else 0)
    headers: Headers = ()
    if area[pos]:
        count, pos = _varint(area, pos, 5)
        if count < 0:
            raise RecordFormatError(f"record {i} has header count {count}")
        headers, pos, header_bytes = _headers(area, pos, stop, count, i)
        size += header_bytes
    else:
        pos += 1
    if pos != stop:
        raise RecordFormatError(f"record {i}'s fields end at byte {pos}, its length says {stop}")
    return pos, key_at, key_len, value_at, value_len, headers, size


# The common shape, checked by quick_check: a timestamp delta of at most 2 varint bytes
# (|delta| < 2^13), so any base timestamp this far inside int64 gives valid timestamps.
_QUICK_TS_MARGIN = 1 << 14


def quick_check(area: bytes, n: int, *, base_timestamp: int, limit: int | None) -> bool:
    """``True`` if :func:`parse` would accept ``area`` (``n`` records, against
    ``limit``), checked for the shape producers send — lengths and deltas of at most 2
    varint bytes, attributes 0, offset deltas below 8,192, no headers — in one loop at
    two fifths of :func:`parse`'s cost. ``False`` means "not shown here", never
    "malformed": the caller then runs :func:`parse`, the reference."""
    if not _INT64_MIN + _QUICK_TS_MARGIN <= base_timestamp <= _INT64_MAX - _QUICK_TS_MARGIN or n > 8192:
        return False
    limit = _INT64_MAX if limit is None else limit
    pos, end = 0, len(area)
    try:
        for i in range(n):
            b = area[pos]  # the length: >= 0, so its zigzag is even
            if b < 0x80:
                stop, pos = pos + 1 + (b >> 1), pos + 1
            elif (c := area[pos + 1]) < 0x80:
                stop, pos = pos + 2 + (((b & 0x7F) | (c << 7)) >> 1), pos + 2
            else:
                return False
            if b & 1 or area[pos]:  # a negative length, or attributes
                return False
            if area[pos + 1] < 0x80:  # the timestamp delta
                pos += 2
            elif area[pos + 2] < 0x80:
                pos += 3
            else:
                return False
            if i < 64:  # the offset delta, i: its zigzag 2i in one byte, or two
                if area[pos] != i << 1:
                    return False
                pos += 1
            elif area[pos] != ((i << 1) & 0x7F) | 0x80 or area[pos + 1] != i >> 6:
                return False
            else:
                pos += 2
            size = 0
            for _ in (0, 1):  # the key's length, then the value's: null (zigzag 1) or >= 0
                b = area[pos]
                if b == 1:
                    pos += 1
                elif b & 1:
                    return False
                elif b < 0x80:
                    size, pos = size + (b >> 1), pos + 1 + (b >> 1)
                elif (c := area[pos + 1]) < 0x80:
                    length = ((b & 0x7F) | (c << 7)) >> 1
                    size, pos = size + length, pos + 2 + length
                else:
                    return False
            if area[pos] or pos + 1 != stop or size > limit:  # no headers, the record's end, the limit
                return False
            pos = stop
    except IndexError:
        return False
    return pos == end


def _varint(area: bytes, pos: int, max_bytes: int) -> tuple[int, int]:
    """A zigzag varint at ``pos`` of at most ``max_bytes`` bytes: (value, next pos)."""
    value, shift = 0, 0
    for k in range(max_bytes):
        b = area[pos + k]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return (value >> 1) ^ -(value & 1), pos + k + 1
        shift += 7
    raise RecordFormatError(f"varint at byte {pos} is longer than {max_bytes} bytes")


def _headers(area: bytes, pos: int, stop: int, count: int, i: int) -> tuple[Headers, int, int]:
    """``count`` headers of record ``i`` from ``pos``: (headers, next pos, their bytes)."""
    out = []
    size = 0
    for _ in range(count):
        if pos >= stop:
            raise RecordFormatError(f"record {i}'s headers run past the record")
        key_len, pos = _varint(area, pos, 5)
        if key_len < 0:
            raise RecordFormatError(f"record {i} has a header key of length {key_len}")
        raw_key = area[pos : pos + key_len]
        pos += key_len
        try:
            key = raw_key.decode()
        except UnicodeDecodeError:
            raise RecordFormatError(f"record {i} has a header key that is not UTF-8") from None
        value_len, pos = _varint(area, pos, 5)
        if value_len < -1:
            raise RecordFormatError(f"record {i} has a header value of length {value_len}")
        value = b"" if value_len < 0 else area[pos : pos + value_len]
        pos += max(value_len, 0)
        size += key_len + max(value_len, 0)
        out.append((key, value))
    if pos > stop:
        raise RecordFormatError(f"record {i}'s headers run past the record")
    return tuple(out), pos, size
