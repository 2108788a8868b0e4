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

from array import array
from dataclasses import dataclass
from typing import Any

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


#: Batches of fewer records are parsed record by record (the array set-up would cost more).
QUICK_MIN_RECORDS = 64
# Timestamp deltas of the quick check have at most 3 varint bytes: |delta| < 2^20.
_QUICK_TS_MARGIN = 1 << 21


def quick_check(area: bytes, n: int, *, base_timestamp: int, limit: int | None) -> bool:
    """``True`` if :func:`parse` would accept ``area`` (``n`` records, checked against
    ``limit``, not decoded): the same rules, checked column by column with numpy for the
    common shape (varints of at most 3 bytes, no headers), at about a sixth of
    :func:`parse`'s cost. ``False`` means "not shown here", never "malformed": the
    caller then runs :func:`parse`, whose verdict and message are the reference."""
    if n < QUICK_MIN_RECORDS or not _INT64_MIN + _QUICK_TS_MARGIN <= base_timestamp <= _INT64_MAX - _QUICK_TS_MARGIN:
        return False
    framed = _frame(area, n)
    if framed is None:
        return False
    import numpy as np  # here: only brokers that check Kafka batches pay for the import

    a = np.frombuffer(area, np.uint8)
    pos, stop = np.frombuffer(framed[0], np.int64).copy(), np.frombuffer(framed[1], np.int64)
    if a.take(pos, mode="clip").any():  # attributes
        return False
    pos += 1
    _ts, nb = _var3(a, pos)  # the timestamp delta: within the margin, so within int64
    if not nb.all():
        return False
    pos += nb
    offset_delta, nb = _var3(a, pos)
    if not nb.all() or (offset_delta != np.arange(n)).any():
        return False
    pos += nb
    key_len, nb = _var3(a, pos)
    if not nb.all() or (key_len < -1).any():
        return False
    pos += nb + np.maximum(key_len, 0)
    value_len, nb = _var3(a, pos)
    if not nb.all() or (value_len < -1).any():
        return False
    pos += nb + np.maximum(value_len, 0)
    if a.take(pos, mode="clip").any() or (pos + 1 != stop).any():  # no headers, and the record ends
        return False
    return limit is None or not (np.maximum(key_len, 0) + np.maximum(value_len, 0) > limit).any()


def _frame(area: bytes, n: int) -> tuple[array[int], array[int]] | None:
    """Where each of the ``n`` records' fields start and where the record ends, from
    their length prefixes of at most 2 bytes; ``None`` when they do not tile ``area``.
    Kept as machine integers (8 bytes a record, not a Python int each)."""
    starts, stops = array("q", bytes(8 * n)), array("q", bytes(8 * n))
    pos, end = 0, len(area)
    try:
        for i in range(n):
            b = area[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            elif (c := area[pos + 1]) < 0x80:
                v = (b & 0x7F) | (c << 7)
                length = (v >> 1) ^ -(v & 1)
                pos += 2
            else:
                return None
            if length < 0:
                return None
            starts[i] = pos
            pos += length
            stops[i] = pos
    except IndexError:
        return None
    return (starts, stops) if pos == end else None


def _var3(a: Any, pos: Any) -> tuple[Any, Any]:
    """The zigzag varints at ``pos`` (numpy arrays): their values and byte counts, the
    count 0 where a varint is longer than 3 bytes (or runs off ``a``)."""
    import numpy as np

    b0, b1, b2 = (a.take(pos + k, mode="clip").astype(np.int32) for k in range(3))
    one = b0 < 0x80
    two = (b1 < 0x80) & ~one
    three = (b2 < 0x80) & ~one & ~two
    v = np.where(one, b0, (b0 & 0x7F) | ((b1 & 0x7F) << 7) | np.where(three, b2 << 14, 0))
    # Clipped reads past the end repeat the last byte: such a varint runs off the area.
    inside = pos + np.where(one, 0, np.where(two, 1, 2)) < len(a)
    return (v >> 1) ^ -(v & 1), (one + 2 * two + 3 * three) * inside


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
