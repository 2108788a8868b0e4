"""The broker's OpenAPI 3.1 document (``GET /openapi.json``): every body's schema is
generated from its type in :mod:`llog.broker.api_types`, so what is published and what
is parsed cannot drift apart; this module adds the routes, statuses and query
parameters around them."""

from __future__ import annotations

from typing import Any

import msgspec

from llog.broker.api_types import (
    BlobQuery,
    Brokers,
    BrokersQuery,
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
from llog.name_rules import ZONE_PATTERN

_REF = "#/components/schemas/{name}"


def _given(field: str) -> dict[str, Any]:
    """``field`` is in the object and not null: the parser takes a null as absent."""
    return {"required": [field], "properties": {field: {"not": {"type": "null"}}}}


def _needs(field: str, *others: str) -> dict[str, Any]:
    """``field`` given needs each of ``others`` given (``dependentRequired`` would
    count an explicit null as given)."""
    return {"if": _given(field), "then": {"allOf": [_given(o) for o in others]}}


#: Rules a struct cannot state on its own, added to its generated schema.
_AMEND: dict[str, dict[str, Any]] = {
    # One struct decodes both object shapes of a produced record; the schema keeps them apart.
    "RecordIn": {"oneOf": [
        {"required": ["base64"], "maxProperties": 1},
        {"required": ["value"], "not": {"required": ["base64"]}},
    ]},
    "ProduceTopicPartition": {"allOf": [
        _needs("producer_id", "sequence"), _needs("sequence", "producer_id"),
        _needs("producer_epoch", "producer_id", "sequence"),
    ]},
    "CommitRequest": _needs("member_lease", "member"),
    "ConsumeRequest": {"allOf": [
        _needs("auto_offset_reset", "group"),
        {"if": {"not": _given("group")},
         "then": {"properties": {"topic_partitions": {"items": _given("fetch_offset")}}}},
    ]},
}

_RETRY_AFTER = {"Retry-After": {"description": "seconds to wait before sending the request again", "required": True,
                                 "schema": {"type": "integer"}}}
_WWW_AUTHENTICATE = {"WWW-Authenticate": {"description": "Bearer, or Basic when users are configured",
                                          "required": True, "schema": {"type": "string"}}}

#: What each status means on every route that can answer it (llog/broker/statuses.py,
#: exception_handlers.py and the auth check in app.py).
_MEANING = {
    "400": "malformed body or query (`field` names the part at fault); nothing was written",
    "401": "credentials missing or wrong (LLOG_BROKER_TOKEN or LLOG_AUTH_USERS is set); nothing was written",
    "403": "the authorizer (LLOG_AUTH_ACLS) refused the caller",
    "408": "the body did not arrive whole within LLOG_BROKER_BODY_TIMEOUT_S",
    "413": "the body is larger than LLOG_BROKER_MAX_REQUEST_BYTES",
    "500": "the broker's own failure (a bug, or corrupt metadata in etcd), logged",
    "503": "etcd unreachable; nothing was written: send the same request again after Retry-After",
    "429": "the client (its user and Llog-Client-Id) is over its quota; nothing was done: send the same request "
           "again after Retry-After",
}
_UNAVAILABLE = ("every partition failed for an outage (etcd or the object store unreachable), back-pressure or "
                "an expired writer session, or the request as a whole met an outage; "
                "nothing was written: send the same request again after Retry-After")
_REFUSED = ("the authorizer (LLOG_AUTH_ACLS) refused the caller: the request as a whole (an error body), or every "
            "partition (the results)")


def openapi_document() -> dict[str, Any]:
    """The whole document, one path per route."""
    _, components = msgspec.json.schema_components(
        [ProduceRequest, ProduceResponse, ConsumeRequest, ConsumeResponse, CommitRequest, CommitResponse,
         OffsetsResponse, ErrorBody, Health, Readiness, Brokers],
        ref_template=_REF,
    )
    for name, extra in _AMEND.items():
        components[name].update(extra)
    return {
        "openapi": "3.1.0",
        "info": {"title": "llog broker", "version": "1"},
        "components": {"schemas": components,
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"},
                                           "basic": {"type": "http", "scheme": "basic"}}},
        # Either: the broker token, or a user's password (LLOG_AUTH_USERS).
        "security": [{"bearer": []}, {"basic": []}],
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
    """Whole-request refusals (an :class:`ErrorBody`), each with its usual meaning."""
    return {c: {"description": _MEANING[c], **_ref(ErrorBody),
                **({"headers": _RETRY_AFTER} if c in ("429", "503") else {}),
                **({"headers": _WWW_AUTHENTICATE} if c == "401" else {})}
            for c in codes}


def _results_or_error(cls: type[msgspec.Struct]) -> dict[str, Any]:
    """The per-partition results, or an :class:`ErrorBody` where the request failed as a
    whole (exception_handlers.py answers an llog error raised outside the partitions)."""
    refs = [{"$ref": _REF.format(name=c.__name__)} for c in (cls, ErrorBody)]
    return {"content": {"application/json": {"schema": {"anyOf": refs}}}}


def _results_route(summary: str, request: type[msgspec.Struct], response: type[msgspec.Struct],
                   ok: str, conflict: str, *, quota: bool = False, **more: dict[str, Any]) -> dict[str, Any]:
    """``POST`` of a JSON body answered with one result per partition (statuses.py)."""
    return {"post": {
        "summary": summary,
        **({"parameters": [_CLIENT_ID]} if quota else {}),
        "requestBody": {"required": True, **_ref(request)},
        "responses": {"200": {"description": ok, **_ref(response)},
                      "403": {"description": _REFUSED, **_results_or_error(response)},
                      "409": {"description": conflict, **_ref(response)},
                      "503": {"description": _UNAVAILABLE, "headers": _RETRY_AFTER, **_results_or_error(response)},
                      **more,
                      **_errors("400", "401", "408", "413", "500", *(("429",) if quota else ()))},
    }}


#: The client id a quota knows an HTTP client by (llog/broker/quota_check.py).
_CLIENT_ID = {"name": "Llog-Client-Id", "in": "header", "required": False, "schema": {"type": "string"},
              "description": "the client id its quotas name (none: the empty one)"}


def _produce_path() -> dict[str, Any]:
    return _results_route(
        "Append records to topic-partitions (coalesced with other requests)", ProduceRequest, ProduceResponse,
        "every partition appended", "some partition failed (its result says why); the others were appended",
        quota=True,
        **{"504": {"description": "every partition failed and some commit's outcome is unknown (AmbiguousCommit): "
                                  "resend with the same producer_id/sequence", **_ref(ProduceResponse)}},
    )


def _consume_path() -> dict[str, Any]:
    return _results_route(
        "Fetch records; long-polls until min_bytes or max_wait_ms", ConsumeRequest, ConsumeResponse,
        "records", "some partition failed (its result says why)", quota=True,
    )


def _commit_path() -> dict[str, Any]:
    return _results_route(
        "Commit a consumer group's offsets (monotonic unless reset; optionally fenced)", CommitRequest,
        CommitResponse, "every offset committed",
        "some commit refused (a partition named twice is refused too); those offsets are unchanged",
    )


def _offsets_path() -> dict[str, Any]:
    return {"get": {
        "summary": "A group's committed offsets with next offset and lag per partition",
        "parameters": query_parameters(OffsetsQuery),
        "responses": {"200": {"description": "the group", **_ref(OffsetsResponse)},
                      "404": {"description": "unknown topic", **_ref(ErrorBody)},
                      **_errors("400", "401", "403", "500", "503")},
    }}


def _meta_paths() -> dict[str, Any]:
    plain = {"200": {"description": "ok", "content": {"application/json": {"schema": {"type": "object"}}}}}
    scope = {"name": "scope", "in": "query", "required": False, "schema": {"type": "string"},
             "description": "worker: the answering worker's own metrics only (llog broker --workers); "
                            "any other value or none: every worker's"}
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
        "/metrics": {"get": {
            "summary": "The metrics as JSON: each name's samples with their labels",
            "parameters": [scope],
            "responses": {**plain, **_errors("401")},
        }},
        "/metrics/prometheus": {"get": {
            "summary": "The metrics in the Prometheus text format",
            "parameters": [scope],
            "responses": {"200": {"description": "Prometheus text format",
                                  "content": {"text/plain": {"schema": {"type": "string"}}}},
                          **_errors("401")},
        }},
        "/openapi.json": {"get": {"summary": "This document", "security": [], "responses": plain}},
        "/brokers": {"get": {
            "summary": "The live brokers a client of a zone is to use: those of its zone, or every one when its zone "
                       "has none alive or it names none (docs/zones.md)",
            "parameters": [{"name": "Llog-Zone", "in": "header", "required": False,
                            "schema": {"type": "string", "pattern": f"^{ZONE_PATTERN}$"},
                            "description": "the caller's zone (wins over the zone query parameter)"},
                           *query_parameters(BrokersQuery)],
            "responses": {"200": {"description": "the brokers", **_ref(Brokers)}, **_errors("400", "401", "503")},
        }},
        "/blobs": {"get": {
            "summary": "Bytes of a WAL blob this broker wrote, from memory (other brokers' peer reads)",
            "parameters": query_parameters(BlobQuery),
            "responses": {"200": {"description": "up to length bytes (fewer where the blob ends)",
                                  "content": {"application/octet-stream": {}}},
                          "404": {"description": "not held in memory: read the object store"},
                          **_errors("400", "401", "403")},
        }},
    }
