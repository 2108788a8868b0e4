"""Request parsing and response shapes of the broker's HTTP API, and its OpenAPI
document. Parsing is strict: unknown fields, wrong types and out-of-range numbers are
rejected with the offending field named, before anything is written."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

from llog.errors import InvalidInput, InvalidTopicName
from llog.names import check_topic

MAX_TOPIC_PARTITIONS = 10_000
MAX_WAIT_MS = 60_000
DEFAULT_PARTITION_MAX_BYTES = 1024 * 1024
DEFAULT_MAX_BYTES = 16 * 1024 * 1024


class InvalidRequest(InvalidInput):
    """The request body is malformed; ``field`` names the part at fault."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


@dataclass(frozen=True)
class ProducePartition:
    topic: str
    partition: int
    records: tuple[bytes, ...]
    producer_id: str | None = None
    sequence: int | None = None


@dataclass(frozen=True)
class ProduceRequest:
    topic_partitions: tuple[ProducePartition, ...]


@dataclass(frozen=True)
class FetchPartition:
    topic: str
    partition: int
    fetch_offset: int
    partition_max_bytes: int


@dataclass(frozen=True)
class ConsumeRequest:
    topic_partitions: tuple[FetchPartition, ...]
    max_wait_ms: int
    min_bytes: int
    max_bytes: int


def load_json(body: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError) as exc:  # bad UTF-8 and bad JSON are ValueErrors
        raise InvalidRequest("body", f"not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise InvalidRequest("body", f"must be a JSON object, got {_kind(doc)}")
    return doc


def parse_produce(body: bytes) -> ProduceRequest:
    doc = load_json(body)
    _only(doc, "body", {"topic_partitions"})
    tps = _list(doc, "topic_partitions", "")
    out = []
    for i, tp in enumerate(tps):
        where = f"topic_partitions[{i}]"
        if not isinstance(tp, dict):
            raise InvalidRequest(where, f"must be an object, got {_kind(tp)}")
        _only(tp, where, {"topic", "partition", "records", "producer_id", "sequence"})
        topic, partition = _topic(tp, where), _int(tp, "partition", where, required=True)
        recs = _list(tp, "records", f"{where}.")
        values = tuple(_record(r, f"{where}.records[{j}]") for j, r in enumerate(recs))
        pid = tp.get("producer_id")
        if pid is not None and (not isinstance(pid, str) or not 0 < len(pid) <= 256):
            raise InvalidRequest(f"{where}.producer_id", "must be a string of 1 to 256 characters")
        seq = _int(tp, "sequence", where, required=False)
        if (pid is None) != (seq is None):
            raise InvalidRequest(f"{where}.sequence", "producer_id and sequence go together")
        assert partition is not None
        out.append(ProducePartition(topic, partition, values, pid, seq))
    return ProduceRequest(tuple(out))


def parse_consume(body: bytes) -> ConsumeRequest:
    doc = load_json(body)
    _only(doc, "body", {"topic_partitions", "max_wait_ms", "min_bytes", "max_bytes"})
    tps = _list(doc, "topic_partitions", "")
    out = []
    for i, tp in enumerate(tps):
        where = f"topic_partitions[{i}]"
        if not isinstance(tp, dict):
            raise InvalidRequest(where, f"must be an object, got {_kind(tp)}")
        _only(tp, where, {"topic", "partition", "fetch_offset", "partition_max_bytes"})
        topic = _topic(tp, where)
        partition = _int(tp, "partition", where, required=True)
        offset = _int(tp, "fetch_offset", where, required=True)
        pmax = _int(tp, "partition_max_bytes", where, required=False, minimum=1)
        assert partition is not None and offset is not None
        out.append(FetchPartition(topic, partition, offset,
                                  DEFAULT_PARTITION_MAX_BYTES if pmax is None else pmax))
    wait = _int(doc, "max_wait_ms", "", required=False, maximum=MAX_WAIT_MS)
    min_bytes = _int(doc, "min_bytes", "", required=False)
    max_bytes = _int(doc, "max_bytes", "", required=False, minimum=1)
    return ConsumeRequest(
        tuple(out),
        500 if wait is None else wait,
        1 if min_bytes is None else min_bytes,
        DEFAULT_MAX_BYTES if max_bytes is None else max_bytes,
    )


def encode_bytes(b: bytes) -> str | dict[str, str]:
    """A value as the API returns it: a string if it is UTF-8, else ``{"base64": …}``."""
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(b).decode("ascii")}


def _kind(v: object) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(v), "number"
    )


def _only(doc: dict[str, Any], where: str, allowed: set[str]) -> None:
    extra = sorted(set(doc) - allowed)
    if extra:
        prefix = "" if where == "body" else f"{where}."
        raise InvalidRequest(f"{prefix}{extra[0]}", "unknown field")


def _list(doc: dict[str, Any], name: str, prefix: str) -> list[Any]:
    v = doc.get(name)
    if not isinstance(v, list):
        raise InvalidRequest(f"{prefix}{name}", f"must be an array, got {_kind(v)}")
    if not 0 < len(v) <= MAX_TOPIC_PARTITIONS:
        raise InvalidRequest(f"{prefix}{name}", f"must hold 1 to {MAX_TOPIC_PARTITIONS} items, got {len(v)}")
    return v


def _topic(tp: dict[str, Any], where: str) -> str:
    topic = tp.get("topic")
    try:
        return check_topic(topic)
    except InvalidTopicName as exc:
        raise InvalidRequest(f"{where}.topic", str(exc)) from None


def _int(
    doc: dict[str, Any], name: str, where: str, *, required: bool, minimum: int = 0, maximum: int = 2**63 - 1
) -> int | None:
    field = f"{where}.{name}" if where else name
    if name not in doc:
        if required:
            raise InvalidRequest(field, "is required")
        return None
    v = doc[name]
    if isinstance(v, bool) or not isinstance(v, int):
        raise InvalidRequest(field, f"must be an integer, got {_kind(v)}")
    if not minimum <= v <= maximum:
        raise InvalidRequest(field, f"must be in [{minimum}, {maximum}], got {v}")
    return v


def _record(r: object, where: str) -> bytes:
    if isinstance(r, str):
        try:
            return r.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidRequest(where, "string is not valid UTF-8 (lone surrogate)") from None
    if isinstance(r, dict):
        if set(r) != {"base64"} or not isinstance(r["base64"], str):
            raise InvalidRequest(where, 'must be a string or {"base64": "<string>"}')
        try:
            return base64.b64decode(r["base64"], validate=True)
        except (binascii.Error, ValueError):
            raise InvalidRequest(f"{where}.base64", "not valid base64") from None
    raise InvalidRequest(where, f'must be a string or {{"base64": ...}}, got {_kind(r)}')


_BYTES = {"oneOf": [{"type": "string"}, {
    "type": "object", "required": ["base64"], "additionalProperties": False,
    "properties": {"base64": {"type": "string", "format": "byte"}},
}]}
_ERROR = {"type": "object", "required": ["error", "error_type"], "properties": {
    "error": {"type": "string"}, "error_type": {"type": "string"}, "field": {"type": "string"},
}}
_TP = {"topic": {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,249}$"},
       "partition": {"type": "integer", "minimum": 0}}


def _errors(*codes: str) -> dict[str, Any]:
    return {c: {"description": "error", "content": {"application/json": {"schema": _ERROR}}} for c in codes}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": schema}}}


def openapi_document() -> dict[str, Any]:
    produce_req = {"type": "object", "required": ["topic_partitions"], "additionalProperties": False, "properties": {
        "topic_partitions": {"type": "array", "minItems": 1, "maxItems": MAX_TOPIC_PARTITIONS, "items": {
            "type": "object", "required": ["topic", "partition", "records"], "additionalProperties": False,
            "properties": {**_TP, "records": {"type": "array", "minItems": 1, "items": _BYTES},
                           "producer_id": {"type": "string", "minLength": 1, "maxLength": 256},
                           "sequence": {"type": "integer", "minimum": 0}},
        }},
    }}
    produce_res = {"type": "object", "properties": {
        "results": {"type": "array", "items": {"type": "object", "properties": {
            **_TP, "ok": {"type": "boolean"}, "start_offset": {"type": "integer"},
            "end_offset": {"type": "integer"}, "count": {"type": "integer"},
            "index_key": {"type": "string"}, "wal_uri": {"type": "string"},
            "error_type": {"type": "string"}, "error": {"type": "string"},
        }}},
        "success_count": {"type": "integer"}, "error_count": {"type": "integer"},
    }}
    consume_req = {"type": "object", "required": ["topic_partitions"], "additionalProperties": False, "properties": {
        "topic_partitions": {"type": "array", "minItems": 1, "maxItems": MAX_TOPIC_PARTITIONS, "items": {
            "type": "object", "required": ["topic", "partition", "fetch_offset"], "additionalProperties": False,
            "properties": {**_TP, "fetch_offset": {"type": "integer", "minimum": 0},
                           "partition_max_bytes": {"type": "integer", "minimum": 1}},
        }},
        "max_wait_ms": {"type": "integer", "minimum": 0, "maximum": MAX_WAIT_MS, "default": 500},
        "min_bytes": {"type": "integer", "minimum": 0, "default": 1},
        "max_bytes": {"type": "integer", "minimum": 1, "default": DEFAULT_MAX_BYTES},
    }}
    record = {"type": "object", "properties": {
        "offset": {"type": "integer"}, "timestamp": {"type": "integer"},
        "key": {"oneOf": [_BYTES, {"type": "null"}]}, "value": _BYTES,
        "headers": {"type": "array", "items": {"type": "array", "items": {}}},
    }}
    consume_res = {"type": "object", "properties": {
        "topic_partitions": {"type": "array", "items": {"type": "object", "properties": {
            **_TP, "ok": {"type": "boolean"}, "high_watermark": {"type": "integer"},
            "log_start_offset": {"type": "integer"}, "next_offset": {"type": "integer"},
            "records": {"type": "array", "items": record},
            "error_type": {"type": "string"}, "error": {"type": "string"},
        }}},
        "success_count": {"type": "integer"}, "error_count": {"type": "integer"},
    }}
    plain = {"200": {"description": "ok", **_json({"type": "object"})}}
    return {
        "openapi": "3.0.3",
        "info": {"title": "llog broker", "version": "1"},
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}],
        "paths": {
            "/produce": {"post": {
                "summary": "Append records to topic-partitions (coalesced with other requests)",
                "requestBody": {"required": True, **_json(produce_req)},
                "responses": {"200": {"description": "every partition appended", **_json(produce_res)},
                              "409": {"description": "some partition failed", **_json(produce_res)},
                              "503": {"description": "every partition refused: back-pressure", **_json(produce_res)},
                              **_errors("400", "401", "413")},
            }},
            "/consume": {"post": {
                "summary": "Fetch records; long-polls until min_bytes or max_wait_ms",
                "requestBody": {"required": True, **_json(consume_req)},
                "responses": {"200": {"description": "records", **_json(consume_res)},
                              "409": {"description": "some partition failed", **_json(consume_res)},
                              **_errors("400", "401", "413")},
            }},
            "/health": {"get": {"security": [], "responses": plain}},
            "/metrics": {"get": {"responses": plain}},
            "/metrics/prometheus": {"get": {"responses": {"200": {"description": "Prometheus text format"}}}},
            "/openapi.json": {"get": {"security": [], "responses": plain}},
        },
    }
