"""Request parsing and response shapes of the broker's HTTP API, and its OpenAPI
document. Parsing is strict: unknown fields, wrong types and out-of-range numbers are
rejected with the offending field named, before anything is written."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from llog.errors import InvalidInput, InvalidTopicName
from llog.errors import InvalidRequest as InvalidRequest  # re-exported: the broker imports it from here
from llog.names import TOPIC_NAME_PATTERN, TOPIC_NAME_RE, TopicPartition, check_group, check_topic
from llog.records import Record

MAX_TOPIC_PARTITIONS = 10_000
MAX_WAIT_MS = 60_000
DEFAULT_PARTITION_MAX_BYTES = 1024 * 1024
DEFAULT_MAX_BYTES = 16 * 1024 * 1024
AUTO_OFFSET_RESETS = ("earliest", "latest")
MAX_MEMBER_CHARS = 256


@dataclass(frozen=True)
class ProducePartition:
    topic: str
    partition: int
    records: tuple[Record, ...]  # without timestamps: the writer stamps append time
    producer_id: str | None = None
    sequence: int | None = None


@dataclass(frozen=True)
class ProduceRequest:
    topic_partitions: tuple[ProducePartition, ...]


@dataclass(frozen=True)
class FetchPartition:
    topic: str
    partition: int
    fetch_offset: int | None  # None: the group's committed offset (resolved before fetching)
    partition_max_bytes: int


@dataclass(frozen=True)
class ConsumeRequest:
    topic_partitions: tuple[FetchPartition, ...]
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    group: str | None = None
    auto_offset_reset: str = "earliest"  # where a group partition with no commit starts


@dataclass(frozen=True)
class CommitOffset:
    topic: str
    partition: int
    offset: int


@dataclass(frozen=True)
class CommitRequest:
    group: str
    offsets: tuple[CommitOffset, ...]
    reset: bool = False
    epoch: int | None = None  # exclusive-consumer epoch the commit runs under
    member: str | None = None  # member that must own every partition
    member_lease: int | None = None  # the lease of that member's session (given with member)


@dataclass(frozen=True)
class BlobQuery:
    """``GET /blobs``: a byte range of a blob this broker wrote."""

    key: str
    offset: int
    length: int


@dataclass(frozen=True)
class OffsetsQuery:
    group: str
    topic: str | None = None


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
    out = []
    for where, tp in _objects(doc, "topic_partitions", {"topic", "partition", "records", "producer_id", "sequence"}):
        topic, partition = _topic(tp, where), _int(tp, "partition", where, required=True)
        recs = _list(tp, "records", f"{where}.")
        records = tuple([_record(r, where, j) for j, r in enumerate(recs)])
        pid = tp.get("producer_id")
        if pid is not None and (not isinstance(pid, str) or TOPIC_NAME_RE.fullmatch(pid) is None):
            raise InvalidRequest(f"{where}.producer_id", f"must match {TOPIC_NAME_PATTERN}")
        seq = _int(tp, "sequence", where, required=False)
        if (pid is None) != (seq is None):
            raise InvalidRequest(f"{where}.sequence", "producer_id and sequence go together")
        assert partition is not None
        out.append(ProducePartition(topic, partition, records, pid, seq))
    return ProduceRequest(tuple(out))


def parse_consume(body: bytes) -> ConsumeRequest:
    doc = load_json(body)
    _only(doc, "body", {"topic_partitions", "max_wait_ms", "min_bytes", "max_bytes", "group", "auto_offset_reset"})
    group = _group(doc) if "group" in doc else None
    reset = doc.get("auto_offset_reset", "earliest")
    if "auto_offset_reset" in doc and group is None:
        raise InvalidRequest("auto_offset_reset", "only applies with a group")
    if reset not in AUTO_OFFSET_RESETS:
        raise InvalidRequest("auto_offset_reset", f"must be one of {', '.join(AUTO_OFFSET_RESETS)}")
    out = []
    for where, tp in _objects(doc, "topic_partitions", {"topic", "partition", "fetch_offset", "partition_max_bytes"}):
        topic = _topic(tp, where)
        partition = _int(tp, "partition", where, required=True)
        offset = _int(tp, "fetch_offset", where, required=group is None)
        pmax = _int(tp, "partition_max_bytes", where, required=False, minimum=1)
        assert partition is not None
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
        group,
        reset,
    )


def parse_commit(body: bytes) -> CommitRequest:
    doc = load_json(body)
    _only(doc, "body", {"group", "offsets", "reset", "epoch", "member", "member_lease"})
    group = _group(doc)
    out: list[CommitOffset] = []
    seen: set[TopicPartition] = set()
    for where, entry in _objects(doc, "offsets", {"topic", "partition", "offset"}):
        topic = _topic(entry, where)
        partition = _int(entry, "partition", where, required=True)
        offset = _int(entry, "offset", where, required=True)
        assert partition is not None and offset is not None
        if (topic, partition) in seen:  # which of two offsets wins would be a guess
            raise InvalidRequest(where, f"{topic}/{partition} appears twice")
        seen.add((topic, partition))
        out.append(CommitOffset(topic, partition, offset))
    reset = doc.get("reset", False)
    if not isinstance(reset, bool):
        raise InvalidRequest("reset", f"must be a boolean, got {_kind(reset)}")
    member = doc.get("member")
    if member is not None and (not isinstance(member, str) or not 0 < len(member) <= MAX_MEMBER_CHARS):
        raise InvalidRequest("member", f"must be a string of 1 to {MAX_MEMBER_CHARS} characters")
    # A member id alone cannot tell a session that expired from a new one of the same id;
    # the lease can. Without it (clients of the earlier API) the fence is the id only.
    member_lease = _int(doc, "member_lease", "", required=False, minimum=1)
    if member_lease is not None and member is None:
        raise InvalidRequest("member", "is required with member_lease")
    return CommitRequest(
        group, tuple(out), reset, _int(doc, "epoch", "", required=False, minimum=1), member, member_lease
    )


def parse_offsets_query(params: list[tuple[str, str]]) -> OffsetsQuery:
    """``GET /offsets`` query parameters: ``group`` (required) and ``topic``."""
    got = _query(params, required=("group",), optional=("topic",))
    group = _group(got)
    return OffsetsQuery(group, None if "topic" not in got else _topic(got, ""))


def parse_blob_query(params: list[tuple[str, str]]) -> BlobQuery:
    """``GET /blobs`` query parameters: ``key``, ``offset`` (>= 0) and ``length`` (>= 1),
    all required."""
    got = _query(params, required=("key", "offset", "length"), optional=())
    return BlobQuery(got["key"], _query_int(got, "offset", 0), _query_int(got, "length", 1))


def _query(params: list[tuple[str, str]], *, required: tuple[str, ...], optional: tuple[str, ...]) -> dict[str, str]:
    """Query parameters by name: each at most once, none unknown, the ``required`` ones
    present."""
    got: dict[str, str] = {}
    for name, value in params:
        if name not in required and name not in optional:
            raise InvalidRequest(name, "unknown query parameter")
        if name in got:
            raise InvalidRequest(name, "given more than once")
        got[name] = value
    for name in required:
        if name not in got:
            raise InvalidRequest(name, "is required")
    return got


def _query_int(got: dict[str, str], name: str, minimum: int) -> int:
    raw = got[name]
    try:
        v = int(raw)
    except ValueError:
        raise InvalidRequest(name, f"must be an integer, got {raw!r}") from None
    if v < minimum:
        raise InvalidRequest(name, f"must be >= {minimum}, got {v}")
    return v


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


def _objects(doc: dict[str, Any], name: str, allowed: set[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(field name, item)`` of the body's array ``name``, each item an object with
    only ``allowed`` fields."""
    for i, item in enumerate(_list(doc, name, "")):
        where = f"{name}[{i}]"
        if not isinstance(item, dict):
            raise InvalidRequest(where, f"must be an object, got {_kind(item)}")
        _only(item, where, allowed)
        yield where, item


def _topic(tp: dict[str, Any], where: str) -> str:
    topic = tp.get("topic")
    try:
        return check_topic(topic)
    except InvalidTopicName as exc:
        raise InvalidRequest(f"{where}.topic" if where else "topic", str(exc)) from None


def _group(doc: dict[str, Any]) -> str:
    try:
        return check_group(doc.get("group"))
    except InvalidInput as exc:
        raise InvalidRequest("group", str(exc)) from None


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


def _record(r: object, tp_where: str, j: int) -> Record:
    """Record ``j`` of the topic-partition at ``tp_where``: a value alone (string or
    ``{"base64": …}``) or ``{"value", "key", "headers"}``. The field name is built only
    for an error (this runs once per produced record)."""
    if isinstance(r, str):
        try:
            return Record(r.encode("utf-8"))
        except UnicodeEncodeError:
            raise InvalidRequest(f"{tp_where}.records[{j}]", "string is not valid UTF-8 (lone surrogate)") from None
    where = f"{tp_where}.records[{j}]"
    if isinstance(r, dict) and "base64" in r:
        return Record(_bytes(r, where))
    if not isinstance(r, dict):
        raise InvalidRequest(where, f'must be a string, {{"base64": ...}} or {{"value": ...}}, got {_kind(r)}')
    _only(r, where, {"value", "key", "headers"})
    if "value" not in r:
        raise InvalidRequest(f"{where}.value", "is required")
    key = r.get("key")
    return Record(
        _bytes(r["value"], f"{where}.value"),
        None if key is None else _bytes(key, f"{where}.key"),
        headers=_headers(r["headers"], f"{where}.headers") if "headers" in r else (),
    )


def _bytes(v: object, where: str) -> bytes:
    """A string (its UTF-8 bytes) or ``{"base64": "<string>"}``."""
    if isinstance(v, str):
        try:
            return v.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidRequest(where, "string is not valid UTF-8 (lone surrogate)") from None
    if not isinstance(v, dict) or set(v) != {"base64"} or not isinstance(v["base64"], str):
        raise InvalidRequest(where, 'must be a string or {"base64": "<string>"}')
    try:
        return base64.b64decode(v["base64"], validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest(f"{where}.base64", "not valid base64") from None


def _headers(v: object, where: str) -> tuple[tuple[str, bytes], ...]:
    """``[[name, value], …]`` as consume returns them: names are strings, values bytes."""
    if not isinstance(v, list):
        raise InvalidRequest(where, f"must be an array of [name, value] pairs, got {_kind(v)}")
    out = []
    for i, h in enumerate(v):
        if not isinstance(h, list) or len(h) != 2 or not isinstance(h[0], str):
            raise InvalidRequest(f"{where}[{i}]", "must be a [name, value] pair with a string name")
        try:
            h[0].encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidRequest(f"{where}[{i}][0]", "string is not valid UTF-8 (lone surrogate)") from None
        out.append((h[0], _bytes(h[1], f"{where}[{i}][1]")))
    return tuple(out)


_BYTES = {"oneOf": [{"type": "string"}, {
    "type": "object", "required": ["base64"], "additionalProperties": False,
    "properties": {"base64": {"type": "string", "format": "byte"}},
}]}
# Null through the string branch: "nullable" next to a oneOf does not admit null in OpenAPI 3.0.
_KEY = {"oneOf": [{"type": "string", "nullable": True}, _BYTES["oneOf"][1]]}
_HEADERS = {"type": "array", "description": "[name, value] pairs: the name a string, the value bytes as above",
            "items": {"type": "array", "minItems": 2, "maxItems": 2, "items": _BYTES}}
_RECORD_IN = {"oneOf": [*_BYTES["oneOf"], {
    "type": "object", "required": ["value"], "additionalProperties": False,
    "properties": {"value": _BYTES, "key": _KEY, "headers": _HEADERS},
}]}
_ERROR = {"type": "object", "required": ["error", "error_type"], "properties": {
    "error": {"type": "string"}, "error_type": {"type": "string"}, "field": {"type": "string"},
}}
_NAME_PATTERN = f"^{TOPIC_NAME_PATTERN}$"  # topics, groups and producer ids share one rule
_TP = {"topic": {"type": "string", "pattern": _NAME_PATTERN},
       "partition": {"type": "integer", "minimum": 0}}
_GROUP = {"type": "string", "pattern": _NAME_PATTERN}


_RETRY_AFTER = {"Retry-After": {"description": "seconds to wait before sending the request again",
                                 "schema": {"type": "integer"}}}
_UNAVAILABLE = ("every partition failed for an outage (etcd or the object store unreachable), back-pressure or "
                "an expired writer session; "
                "nothing was written: send the same request again after Retry-After")


def _errors(*codes: str) -> dict[str, Any]:
    return {c: {"description": "error", "content": {"application/json": {"schema": _ERROR}},
                **({"headers": _RETRY_AFTER} if c == "503" else {})} for c in codes}


def _unavailable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"503": {"description": _UNAVAILABLE, "headers": _RETRY_AFTER, **_json(schema)}}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": schema}}}


def openapi_document() -> dict[str, Any]:
    """The broker's OpenAPI 3 document (``GET /openapi.json``), one path per route."""
    return {
        "openapi": "3.0.3",
        "info": {"title": "llog broker", "version": "1"},
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}],
        "paths": {
            "/produce": _produce_path(),
            "/consume": _consume_path(),
            "/commit": _commit_path(),
            "/offsets": _offsets_path(),
            **_meta_paths(),
        },
    }


def _produce_path() -> dict[str, Any]:
    produce_req = {"type": "object", "required": ["topic_partitions"], "additionalProperties": False, "properties": {
        "topic_partitions": {"type": "array", "minItems": 1, "maxItems": MAX_TOPIC_PARTITIONS, "items": {
            "type": "object", "required": ["topic", "partition", "records"], "additionalProperties": False,
            "properties": {**_TP, "records": {"type": "array", "minItems": 1, "items": _RECORD_IN},
                           "producer_id": {"type": "string", "pattern": _NAME_PATTERN},
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
    return {"post": {
        "summary": "Append records to topic-partitions (coalesced with other requests)",
        "requestBody": {"required": True, **_json(produce_req)},
        "responses": {"200": {"description": "every partition appended", **_json(produce_res)},
                      "409": {"description": "some partition failed", **_json(produce_res)},
                      **_unavailable(produce_res),
                      "504": {"description": "every partition failed and some commit's outcome is unknown "
                                             "(AmbiguousCommit): resend with the same producer_id/sequence",
                              **_json(produce_res)},
                      **_errors("400", "401", "413")},
    }}


def _consume_path() -> dict[str, Any]:
    consume_req = {"type": "object", "required": ["topic_partitions"], "additionalProperties": False, "properties": {
        "topic_partitions": {"type": "array", "minItems": 1, "maxItems": MAX_TOPIC_PARTITIONS, "items": {
            "type": "object", "required": ["topic", "partition"], "additionalProperties": False,
            "properties": {**_TP, "fetch_offset": {
                "type": "integer", "minimum": 0,
                "description": "required without group; with group, omitted means the committed offset"},
                           "partition_max_bytes": {"type": "integer", "minimum": 1}},
        }},
        "group": _GROUP,
        "auto_offset_reset": {"type": "string", "enum": list(AUTO_OFFSET_RESETS), "default": "earliest",
                              "description": "with group: start of a partition the group never committed"},
        "max_wait_ms": {"type": "integer", "minimum": 0, "maximum": MAX_WAIT_MS, "default": 500},
        "min_bytes": {"type": "integer", "minimum": 0, "default": 1},
        "max_bytes": {"type": "integer", "minimum": 1, "default": DEFAULT_MAX_BYTES},
    }}
    record = {"type": "object", "properties": {
        "offset": {"type": "integer"}, "timestamp": {"type": "integer"},
        "key": _KEY, "value": _BYTES, "headers": _HEADERS,
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
    return {"post": {
        "summary": "Fetch records; long-polls until min_bytes or max_wait_ms",
        "requestBody": {"required": True, **_json(consume_req)},
        "responses": {"200": {"description": "records", **_json(consume_res)},
                      "409": {"description": "some partition failed", **_json(consume_res)},
                      **_unavailable(consume_res),
                      **_errors("400", "401", "413")},
    }}


def _commit_path() -> dict[str, Any]:
    commit_req = {"type": "object", "required": ["group", "offsets"], "additionalProperties": False, "properties": {
        "group": _GROUP,
        "offsets": {"type": "array", "minItems": 1, "maxItems": MAX_TOPIC_PARTITIONS, "items": {
            "type": "object", "required": ["topic", "partition", "offset"], "additionalProperties": False,
            "properties": {**_TP, "offset": {"type": "integer", "minimum": 0,
                                             "description": "the next offset to consume"}},
        }},
        "reset": {"type": "boolean", "default": False, "description": "allow moving backwards"},
        "epoch": {"type": "integer", "minimum": 1, "description": "fence: the group's current exclusive epoch"},
        "member": {"type": "string", "minLength": 1, "maxLength": MAX_MEMBER_CHARS,
                   "description": "fence: the member that must own every partition (with member_lease: that session)"},
        "member_lease": {"type": "integer", "minimum": 1,
                         "description": "fence: the etcd lease of that member's session (requires member)"},
    }}
    commit_res = {"type": "object", "properties": {
        "group": {"type": "string"},
        "results": {"type": "array", "items": {"type": "object", "properties": {
            **_TP, "ok": {"type": "boolean"}, "offset": {"type": "integer"}, "epoch": {"type": "integer"},
            "member": {"type": "string"}, "updated_at_ms": {"type": "integer"},
            "error_type": {"type": "string"}, "error": {"type": "string"},
        }}},
        "success_count": {"type": "integer"}, "error_count": {"type": "integer"},
    }}
    return {"post": {
        "summary": "Commit a consumer group's offsets (monotonic unless reset; optionally fenced)",
        "requestBody": {"required": True, **_json(commit_req)},
        "responses": {"200": {"description": "every offset committed", **_json(commit_res)},
                      "409": {"description": "some commit refused; those offsets are unchanged",
                              **_json(commit_res)},
                      **_unavailable(commit_res),
                      **_errors("400", "401", "413")},
    }}


def _offsets_path() -> dict[str, Any]:
    nullable_int = {"type": "integer", "nullable": True}
    offsets_res = {"type": "object", "properties": {
        "group": {"type": "string"}, "members": {"type": "array", "items": {"type": "string"}},
        "epoch": nullable_int, "epoch_owner": {"type": "string", "nullable": True},
        "partitions": {"type": "array", "items": {"type": "object", "properties": {
            **_TP, "committed": nullable_int, "log_start_offset": {"type": "integer"},
            "next_offset": {"type": "integer"}, "lag": {"type": "integer"},
            "owner": {"type": "string", "nullable": True},
        }}},
        "total_lag": {"type": "integer"},
    }}
    return {"get": {
        "summary": "A group's committed offsets with next offset and lag per partition",
        "parameters": [
            {"name": "group", "in": "query", "required": True, "schema": _GROUP},
            {"name": "topic", "in": "query", "required": False, "schema": _TP["topic"],
             "description": "only this topic; lists its partitions with no commit too"},
        ],
        "responses": {"200": {"description": "the group", **_json(offsets_res)},
                      **_errors("400", "401", "404", "503")},
    }}


def _meta_paths() -> dict[str, Any]:
    plain = {"200": {"description": "ok", **_json({"type": "object"})}}
    health_res = {"type": "object", "required": ["status", "broker_id", "host", "port", "started_at_ms"],
                  "properties": {
                      "status": {"type": "string", "enum": ["ok"]},
                      "broker_id": {"type": "string", "description": "new each time the broker starts"},
                      "host": {"type": "string"}, "port": {"type": "integer"},
                      "started_at_ms": {"type": "integer"}}}
    check = {"type": "object", "required": ["ok"], "properties": {
        "ok": {"type": "boolean"}, "latency_ms": {"type": "number"}, "error": {"type": "string"}}}
    ready_res = {"type": "object", "required": ["status", "broker_id", "checks"], "properties": {
        "status": {"type": "string", "enum": ["ready", "unavailable"]},
        "broker_id": {"type": "string"},
        "checks": {"type": "object", "properties": {"etcd": check, "object_store": check}}}}
    return {
        "/health": {"get": {
            "summary": "Liveness: answers while the process serves requests", "security": [],
            "responses": {"200": {"description": "this broker", **_json(health_res)}},
        }},
        "/ready": {"get": {
            "summary": "Readiness: etcd and the object store answer (checked at most once a second)",
            "security": [],
            "responses": {"200": {"description": "ready", **_json(ready_res)},
                          "503": {"description": "etcd or the object store is unreachable",
                                  "headers": _RETRY_AFTER, **_json(ready_res)}},
        }},
        "/metrics": {"get": {"responses": plain}},
        "/metrics/prometheus": {"get": {"responses": {"200": {"description": "Prometheus text format"}}}},
        "/openapi.json": {"get": {"security": [], "responses": plain}},
        "/blobs": {"get": {
            "summary": "Bytes of a WAL blob this broker wrote, from memory (other brokers' peer reads)",
            "parameters": [
                {"name": "key", "in": "query", "required": True, "schema": {"type": "string"}},
                {"name": "offset", "in": "query", "required": True, "schema": {"type": "integer", "minimum": 0}},
                {"name": "length", "in": "query", "required": True, "schema": {"type": "integer", "minimum": 1}},
            ],
            "responses": {"200": {"description": "up to length bytes (fewer where the blob ends)",
                                  "content": {"application/octet-stream": {}}},
                          "404": {"description": "not held in memory: read the object store"},
                          **_errors("400", "401")},
        }},
    }
