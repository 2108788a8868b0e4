"""Decoding the broker's requests into their types (:mod:`llog.broker.api_types`):
strict, naming the offending field, before anything is written. msgspec checks each
field; the rules that span fields are here."""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, TypeVar

import msgspec

from llog.broker.api_types import (
    Base64,
    BlobQuery,
    BrokersQuery,
    Bytes,
    CommitRequest,
    ConsumeRequest,
    OffsetsQuery,
    ProduceRequest,
    RecordIn,
)
from llog.errors import InvalidInput, InvalidTopicName
from llog.errors import InvalidRequest as InvalidRequest  # re-exported: the broker imports it from here
from llog.names import check_group, check_topic
from llog.records import Record

T = TypeVar("T")


@dataclass(frozen=True)
class ProducePartition:
    """One topic-partition's records of a produce request, decoded, for the producer."""

    topic: str
    partition: int
    records: tuple[Record, ...]  # without timestamps: the writer stamps append time
    producer_id: str | None = None
    sequence: int | None = None
    producer_epoch: int | None = None


_DECODERS: dict[type, msgspec.json.Decoder[Any]] = {
    t: msgspec.json.Decoder(t) for t in (ProduceRequest, ConsumeRequest, CommitRequest)
}


def parse_produce(body: bytes) -> tuple[ProducePartition, ...]:
    req = _decode(ProduceRequest, body)
    out = []
    for i, tp in enumerate(req.topic_partitions):
        where = f"topic_partitions[{i}]"
        _check_topic(tp.topic, where)
        if (tp.producer_id is None) != (tp.sequence is None):
            raise InvalidRequest(f"{where}.sequence", "producer_id and sequence go together")
        if tp.producer_epoch is not None and tp.producer_id is None:
            raise InvalidRequest(f"{where}.producer_epoch", "producer_epoch needs producer_id and sequence")
        records = tuple([_record(r, where, j) for j, r in enumerate(tp.records)])
        out.append(ProducePartition(tp.topic, tp.partition, records, tp.producer_id, tp.sequence, tp.producer_epoch))
    return tuple(out)


def parse_consume(body: bytes) -> ConsumeRequest:
    req = _decode(ConsumeRequest, body)
    if req.group is None:
        if req.auto_offset_reset is not msgspec.UNSET:
            raise InvalidRequest("auto_offset_reset", "only applies with a group")
    else:
        _check_group(req.group)
    for i, fp in enumerate(req.topic_partitions):
        _check_topic(fp.topic, f"topic_partitions[{i}]")
        if fp.fetch_offset is None and req.group is None:
            raise InvalidRequest(f"topic_partitions[{i}].fetch_offset", "is required")
    return req


def parse_commit(body: bytes) -> CommitRequest:
    req = _decode(CommitRequest, body)
    _check_group(req.group)
    for i, c in enumerate(req.offsets):
        _check_topic(c.topic, f"offsets[{i}]")
    # A member id alone cannot tell a session that expired from a new one of the same id;
    # the lease can. Without it (clients of the earlier API) the fence is the id only.
    if req.member_lease is not None and req.member is None:
        raise InvalidRequest("member", "is required with member_lease")
    return req


def parse_offsets_query(params: list[tuple[str, str]]) -> OffsetsQuery:
    """``GET /offsets`` query parameters: ``group`` (required) and ``topic``."""
    q = _convert_query(OffsetsQuery, params)
    _check_group(q.group)
    if q.topic is not None:
        _check_topic(q.topic, "")
    return q


def parse_blob_query(params: list[tuple[str, str]]) -> BlobQuery:
    """``GET /blobs`` query parameters: ``key``, ``offset`` (>= 0) and ``length`` (>= 1),
    all required."""
    return _convert_query(BlobQuery, params)


def parse_brokers_query(params: list[tuple[str, str]], header: str | None) -> BrokersQuery:
    """``GET /brokers``: the ``zone`` query parameter, which the ``Llog-Zone`` header
    (``header``) overrides; each is checked."""
    query = _convert_query(BrokersQuery, params)
    if header is None:
        return query
    try:
        return _convert_query(BrokersQuery, [("zone", header)])
    except InvalidRequest as exc:
        raise InvalidRequest("Llog-Zone", exc.reason) from None


def encode_bytes(b: bytes) -> Bytes:
    """A value as the API returns it: a string if it is UTF-8, else ``{"base64": …}``."""
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return Base64(base64.b64encode(b).decode("ascii"))


def _decode(cls: type[T], body: bytes) -> T:
    try:
        decoded: T = _DECODERS[cls].decode(body)
    except msgspec.ValidationError as exc:
        if "got `float`" not in str(exc):
            raise _invalid(exc) from None
        decoded = _decode_integral_floats(cls, body)
    except msgspec.DecodeError as exc:
        raise InvalidRequest("body", f"not valid JSON: {exc}") from None
    return decoded


#: A decimal exponent past int64's (2^63 - 1 is about 9.2e18).
_INT64_DIGITS = 19


def _integral(text: str) -> int | float:
    """A JSON number written with a fraction or exponent, as an int when it is a whole
    number (exactly: ``9007199254740993.0`` is not rounded through a float). One past
    every int64 (``1e999999999``) stays a float: its int would take memory, not fit."""
    d = Decimal(text)
    if d.is_finite() and d.adjusted() <= _INT64_DIGITS and d == d.to_integral_value():
        return int(d)
    return float(text)


_FLOATS_AS_INTEGERS = msgspec.json.Decoder(float_hook=_integral)


def _decode_integral_floats(cls: type[T], body: bytes) -> T:
    """The slow path of a body with a number such as ``1.0`` where an integer goes:
    JSON Schema's ``integer`` (the OpenAPI document's) is any whole number, however
    written, while msgspec's decoder takes only integer literals. Only bodies the fast
    decode refused come here, maybe before reading the rest: that may not be JSON."""
    try:
        return msgspec.convert(_FLOATS_AS_INTEGERS.decode(body), cls)
    except msgspec.ValidationError as exc:
        raise _invalid(exc) from None
    except msgspec.DecodeError as exc:
        raise InvalidRequest("body", f"not valid JSON: {exc}") from None


def _convert_query(cls: type[T], params: list[tuple[str, str]]) -> T:
    """Query parameters into ``cls``: each at most once; strings become the field's
    type (``strict=False``); unknown and missing ones are named."""
    got: dict[str, str] = {}
    for name, value in params:
        if name in got:
            raise InvalidRequest(name, "given more than once")
        got[name] = value
    try:
        return msgspec.convert(got, cls, strict=False)
    except msgspec.ValidationError as exc:
        raise _invalid(exc, unknown="unknown query parameter") from None


# msgspec names the place of an error as a path: "... - at `$.topic_partitions[0]`".
_AT = re.compile(r"^(?P<reason>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.S)
_FIELD = re.compile(r"^Object (?P<what>missing required|contains unknown) field `(?P<name>[^`]+)`$")


def _invalid(exc: msgspec.ValidationError, unknown: str = "unknown field") -> InvalidRequest:
    """msgspec's message as the broker's :class:`InvalidRequest`: the field by its path
    (``topic_partitions[0].partition``; ``body`` for the whole body)."""
    m = _AT.match(str(exc))
    assert m is not None  # the pattern matches any string
    reason, path = m["reason"], (m["path"] or "").lstrip(".")
    named = _FIELD.match(reason)
    if named is not None:  # the field itself, not the object holding it
        path = f"{path}.{named['name']}" if path else named["name"]
        reason = "is required" if named["what"] == "missing required" else unknown
    return InvalidRequest(path or "body", reason)


def _check_topic(topic: str, where: str) -> None:
    """Names the pattern already admits but llog reserves."""
    try:
        check_topic(topic)
    except InvalidTopicName as exc:
        raise InvalidRequest(f"{where}.topic" if where else "topic", str(exc)) from None


def _check_group(group: str) -> None:
    try:
        check_group(group)
    except InvalidInput as exc:
        raise InvalidRequest("group", str(exc)) from None


def _record(r: str | RecordIn, tp_where: str, j: int) -> Record:
    """Record ``j`` of the topic-partition at ``tp_where``. msgspec has refused lone
    surrogate escapes, so every string encodes; the field name is built only for an
    error (this runs once per produced record)."""
    if isinstance(r, str):
        return Record(r.encode("utf-8"))
    where = f"{tp_where}.records[{j}]"
    if r.base64 is not msgspec.UNSET:
        if r.value is not msgspec.UNSET or r.key is not msgspec.UNSET or r.headers is not msgspec.UNSET:
            raise InvalidRequest(where, 'is either {"base64": ...} alone or {"value": ..., "key", "headers"}')
        return Record(_b64(r.base64, f"{where}.base64"))
    if r.value is msgspec.UNSET:
        raise InvalidRequest(f"{where}.value", "is required")
    key = None if r.key is None or r.key is msgspec.UNSET else _bytes(r.key, f"{where}.key")
    headers = () if r.headers is msgspec.UNSET else tuple(
        [(name, _bytes(value, f"{where}.headers[{i}][1]")) for i, (name, value) in enumerate(r.headers)])
    value = None if r.value is None else _bytes(r.value, f"{where}.value")
    return Record(value, key, headers=headers)


def _bytes(v: Bytes, where: str) -> bytes:
    return v.encode("utf-8") if isinstance(v, str) else _b64(v.base64, f"{where}.base64")


def _b64(s: str, where: str) -> bytes:
    """``s`` decoded when it matches :data:`~llog.broker.api_types.BASE64_PATTERN`:
    binascii alone also takes a pad after a whole group (``AAAA=``)."""
    pad = s.find("=")
    if len(s) % 4 or (pad != -1 and s[pad:] not in ("=", "==")):
        raise InvalidRequest(where, "not valid base64")
    try:
        return base64.b64decode(s, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest(where, "not valid base64") from None
