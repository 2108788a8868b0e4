"""The broker's OpenAPI 3.1 document (``GET /openapi.json``): every body's schema is
generated from its type in :mod:`llog.broker.api_types`, so what is published and what
is parsed cannot drift apart; this module adds the routes, statuses and query
parameters around them."""

from __future__ import annotations

from typing import Any

import msgspec

from llog.broker.api_types import (
    BlobQuery,
    CommitRequest,
    CommitResponse,
    ConsumeRequest,
    ConsumeResponse,
    ErrorBody,
    Health,
    OffsetsQuery,
    OffsetsResponse,
    ProduceRequest,
    ProduceResponse,
    Readiness,
)

_REF = "#/components/schemas/{name}"

#: Rules a struct cannot state on its own, added to its generated schema.
_AMEND: dict[str, dict[str, Any]] = {
    # One struct decodes both object shapes of a produced record; the schema keeps them apart.
    "RecordIn": {"oneOf": [
        {"required": ["base64"], "maxProperties": 1},
        {"required": ["value"], "not": {"required": ["base64"]}},
    ]},
    "ProduceTopicPartition": {"dependentRequired": {"producer_id": ["sequence"], "sequence": ["producer_id"]}},
    "CommitRequest": {"dependentRequired": {"member_lease": ["member"]}},
    "ConsumeRequest": {
        "dependentRequired": {"auto_offset_reset": ["group"]},
        "if": {"not": {"required": ["group"]}},
        "then": {"properties": {"topic_partitions": {"items": {"required": ["fetch_offset"]}}}},
    },
}

_RETRY_AFTER = {"Retry-After": {"description": "seconds to wait before sending the request again",
                                 "schema": {"type": "integer"}}}
_UNAVAILABLE = ("every partition failed for an outage (etcd or the object store unreachable), back-pressure or "
                "an expired writer session; "
                "nothing was written: send the same request again after Retry-After")


def openapi_document() -> dict[str, Any]:
    """The whole document, one path per route."""
    _, components = msgspec.json.schema_components(
        [ProduceRequest, ProduceResponse, ConsumeRequest, ConsumeResponse, CommitRequest, CommitResponse,
         OffsetsResponse, ErrorBody, Health, Readiness],
        ref_template=_REF,
    )
    for name, extra in _AMEND.items():
        components[name].update(extra)
    return {
        "openapi": "3.1.0",
        "info": {"title": "llog broker", "version": "1"},
        "components": {"schemas": components,
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}],
        "paths": {
            "/produce": _produce_path(),
            "/consume": _consume_path(),
            "/commit": _commit_path(),
            "/offsets": _offsets_path(),
            **_meta_paths(),
        },
    }


def standalone_schema(doc: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` (taken from ``doc``) as one JSON Schema 2020-12 document that a
    validator can use alone: the components its references point at travel with it."""
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema, "components": doc["components"]}


def query_parameters(cls: type[msgspec.Struct]) -> list[dict[str, Any]]:
    """A query struct's fields as OpenAPI parameters."""
    _, components = msgspec.json.schema_components([cls], ref_template=_REF)
    doc = components[cls.__name__]
    required = set(doc.get("required", ()))
    out = []
    for name, prop in doc["properties"].items():
        prop = dict(prop)
        prop.pop("default", None)
        # An optional parameter is absent, not null: the schema of its value alone.
        variants = [v for v in prop.get("anyOf", ()) if v != {"type": "null"}]
        if len(variants) == 1:
            prop = dict(variants[0])
        description = prop.pop("description", None)
        out.append({"name": name, "in": "query", "required": name in required, "schema": prop,
                    **({"description": description} if description else {})})
    return out


def _ref(cls: type[msgspec.Struct]) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": {"$ref": _REF.format(name=cls.__name__)}}}}


def _errors(*codes: str) -> dict[str, Any]:
    return {c: {"description": "error", **_ref(ErrorBody), **({"headers": _RETRY_AFTER} if c == "503" else {})}
            for c in codes}


def _unavailable(cls: type[msgspec.Struct]) -> dict[str, Any]:
    return {"503": {"description": _UNAVAILABLE, "headers": _RETRY_AFTER, **_ref(cls)}}


def _produce_path() -> dict[str, Any]:
    return {"post": {
        "summary": "Append records to topic-partitions (coalesced with other requests)",
        "requestBody": {"required": True, **_ref(ProduceRequest)},
        "responses": {"200": {"description": "every partition appended", **_ref(ProduceResponse)},
                      "409": {"description": "some partition failed", **_ref(ProduceResponse)},
                      **_unavailable(ProduceResponse),
                      "504": {"description": "every partition failed and some commit's outcome is unknown "
                                             "(AmbiguousCommit): resend with the same producer_id/sequence",
                              **_ref(ProduceResponse)},
                      **_errors("400", "401", "408", "413")},
    }}


def _consume_path() -> dict[str, Any]:
    return {"post": {
        "summary": "Fetch records; long-polls until min_bytes or max_wait_ms",
        "requestBody": {"required": True, **_ref(ConsumeRequest)},
        "responses": {"200": {"description": "records", **_ref(ConsumeResponse)},
                      "409": {"description": "some partition failed", **_ref(ConsumeResponse)},
                      **_unavailable(ConsumeResponse),
                      **_errors("400", "401", "408", "413")},
    }}


def _commit_path() -> dict[str, Any]:
    return {"post": {
        "summary": "Commit a consumer group's offsets (monotonic unless reset; optionally fenced)",
        "requestBody": {"required": True, **_ref(CommitRequest)},
        "responses": {"200": {"description": "every offset committed", **_ref(CommitResponse)},
                      "409": {"description": "some commit refused; those offsets are unchanged",
                              **_ref(CommitResponse)},
                      **_unavailable(CommitResponse),
                      **_errors("400", "401", "408", "413")},
    }}


def _offsets_path() -> dict[str, Any]:
    return {"get": {
        "summary": "A group's committed offsets with next offset and lag per partition",
        "parameters": query_parameters(OffsetsQuery),
        "responses": {"200": {"description": "the group", **_ref(OffsetsResponse)},
                      **_errors("400", "401", "404", "503")},
    }}


def _meta_paths() -> dict[str, Any]:
    plain = {"200": {"description": "ok", "content": {"application/json": {"schema": {"type": "object"}}}}}
    return {
        "/health": {"get": {
            "summary": "Liveness: answers while the process serves requests", "security": [],
            "responses": {"200": {"description": "this broker", **_ref(Health)}},
        }},
        "/ready": {"get": {
            "summary": "Readiness: etcd and the object store answer (checked at most once a second)",
            "security": [],
            "responses": {"200": {"description": "ready", **_ref(Readiness)},
                          "503": {"description": "etcd or the object store is unreachable",
                                  "headers": _RETRY_AFTER, **_ref(Readiness)}},
        }},
        "/metrics": {"get": {"responses": plain}},
        "/metrics/prometheus": {"get": {"responses": {"200": {"description": "Prometheus text format"}}}},
        "/openapi.json": {"get": {"security": [], "responses": plain}},
        "/blobs": {"get": {
            "summary": "Bytes of a WAL blob this broker wrote, from memory (other brokers' peer reads)",
            "parameters": query_parameters(BlobQuery),
            "responses": {"200": {"description": "up to length bytes (fewer where the blob ends)",
                                  "content": {"application/octet-stream": {}}},
                          "404": {"description": "not held in memory: read the object store"},
                          **_errors("400", "401")},
        }},
    }
