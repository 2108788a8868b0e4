"""Confluent's Schema Registry REST API on the broker (spec §14): ``/subjects``,
``/schemas``, ``/config``, ``/compatibility``, ``/mode``, ``/contexts``, so
confluent-kafka's ``SchemaRegistryClient`` (``schema.registry.url`` = the broker's URL)
and its serializers work unchanged. Errors answer as the registry does:
``{"error_code": 40401, "message": ...}`` with the HTTP status of the code's first
three digits.

With the authorizer on, reading needs only an authenticated caller; registering under
a subject named for a topic (``{topic}-key``, ``{topic}-value``) needs Write on the
topic, deleting it Delete on the topic, and under any other subject Alter on the
cluster; changing a compatibility level or mode needs AlterConfigs on the cluster."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

import anyio
import anyio.to_thread
from starlette.requests import Request
from starlette.responses import Response

from llog.auth.acls import Operation, ResourceType
from llog.broker.http_auth import Access
from llog.broker.request_body import RequestTimeout, RequestTooLarge, read_body
from llog.broker.state import Broker, broker_of
from llog.errors import InvalidSchema, LlogError, NotAuthorized, SchemaNotFound, SchemaRegistryError
from llog.registry import Compatibility, Reference, SchemaRegistry
from llog.registry.model import AVRO, SCHEMA_TYPES

#: The first path segments the registry answers.
ROOTS = frozenset({"subjects", "schemas", "config", "compatibility", "mode", "contexts"})
MEDIA_TYPE = "application/vnd.schemaregistry.v1+json"
#: Bytes a registry request body may hold (a schema and its references).
MAX_BODY_BYTES = 1024 * 1024
#: Registry requests at once on threads (parsing, protoc): the rest wait, and fetches,
#: authentication and the other routes keep the shared thread pool.
MAX_CONCURRENT = 4

Query = dict[str, str]


def answer(value: object, status: int = 200) -> Response:
    return Response(json.dumps(value, separators=(",", ":")).encode(), status, media_type=MEDIA_TYPE)


def _error(status: int, code: int, message: str) -> Response:
    return answer({"error_code": code, "message": message}, status)


def _flag(query: Query, name: str) -> bool:
    return query.get(name, "false").lower() == "true"


def _not_found() -> Response:
    return _error(404, 404, "HTTP 404 Not Found")


def _subject_or_none(parts: list[str]) -> str | None:
    """``/config/{s}``, ``/mode/{s}``: the subject, or ``None`` for the registry's."""
    return parts[1] if len(parts) > 1 else None


def _limit(b: Broker) -> anyio.CapacityLimiter:
    """The broker's limiter of registry threads (made on its event loop, on first use)."""
    if b.registry_limiter is None:
        b.registry_limiter = anyio.CapacityLimiter(MAX_CONCURRENT)
    return b.registry_limiter


async def registry(request: Request) -> Response:
    """Answer one registry request (any method, any of :data:`ROOTS`)."""
    b = broker_of(request)
    raw = request.scope.get("raw_path") or request.url.path.encode()
    parts = [unquote(p) for p in raw.decode("latin-1").split("?")[0].strip("/").split("/")]
    try:
        body: Any = None
        if request.method in ("POST", "PUT"):
            data = await read_body(request, MAX_BODY_BYTES, b.config.broker_body_timeout_s)
            try:
                body = json.loads(data) if data else {}
            except (ValueError, RecursionError):
                return _error(400, 400, "request body is not JSON")
        access = Access(request, b)
        query = dict(request.query_params)
        result = await anyio.to_thread.run_sync(
            lambda: _route(b.registry, access, request.method, parts, query, body), limiter=_limit(b))
        return result if isinstance(result, Response) else answer(result)
    except SchemaRegistryError as exc:
        return _error(exc.http_status, exc.error_code, str(exc))
    except NotAuthorized as exc:
        return _error(403, 40301, str(exc))
    except RequestTooLarge as exc:
        return _error(413, 413, str(exc))
    except RequestTimeout as exc:
        return _error(408, 408, str(exc))
    except LlogError as exc:
        return _error(500, 50001, f"{type(exc).__name__}: {exc}")


def _route(reg: SchemaRegistry, access: Access, method: str, parts: list[str], query: Query, body: Any) -> object:
    handler = ROUTE_TABLE.get(("GET" if method == "HEAD" else method, parts[0], len(parts)))
    if handler is None:
        return _error(404, 404, f"HTTP 404 Not Found: {method} /{'/'.join(parts)}")
    return handler(reg, access, parts, query, body)


# -- subjects ------------------------------------------------------------------------

def _schema_args(body: Any) -> tuple[str, str, tuple[Reference, ...]]:
    if not isinstance(body, dict) or not isinstance(body.get("schema"), str):
        raise InvalidSchema("Invalid schema: the body must be an object with a string 'schema'")
    kind = body.get("schemaType") or AVRO
    if kind not in SCHEMA_TYPES:
        raise InvalidSchema(f"Invalid schema type {kind!r}: one of {', '.join(SCHEMA_TYPES)}")
    refs = body.get("references") or []
    if not isinstance(refs, list):
        raise InvalidSchema("Invalid schema: 'references' must be a list")
    return body["schema"], kind, tuple(Reference.from_json(r) for r in refs)


def _subject_resource(subject: str) -> tuple[ResourceType, str] | None:
    """The topic a subject is named for (TopicNameStrategy), if it is."""
    for suffix in ("-key", "-value"):
        if subject.endswith(suffix) and len(subject) > len(suffix):
            return ResourceType.TOPIC, subject[: -len(suffix)]
    return None


def _check_subject(access: Access, subject: str, op: Operation) -> None:
    topic = _subject_resource(subject)
    if topic is not None and access.allows(op, *topic, audit=False):
        return
    access.check(Operation.ALTER, ResourceType.CLUSTER)


def _list_subjects(reg: SchemaRegistry, access: Access, parts: list[str], query: Query, body: Any) -> object:
    return reg.subjects(deleted=_flag(query, "deleted"), prefix=query.get("subjectPrefix", ""))


def _lookup(reg: SchemaRegistry, access: Access, parts: list[str], query: Query, body: Any) -> object:
    rs = reg.lookup(parts[1], *_schema_args(body), deleted=_flag(query, "deleted"))
    return rs.to_api()


def _delete_subject(reg: SchemaRegistry, access: Access, parts: list[str], query: Query, body: Any) -> object:
    _check_subject(access, parts[1], Operation.DELETE)
    return reg.delete_subject(parts[1], permanent=_flag(query, "permanent"))


def _list_versions(reg: SchemaRegistry, access: Access, parts: list[str], query: Query, body: Any) -> object:
    if parts[2] != "versions":
        return _not_found()
    return reg.versions(parts[1], deleted=_flag(query, "deleted"))


def _register(reg: SchemaRegistry, access: Access, parts: list[str], query: Query, body: Any) -> object:
    if parts[2] != "versions":
        return _not_found()
    _check_subject(access, parts[1], Operation.WRITE)
    rs = reg.register(parts[1], *_schema_args(body))
    return {"id": rs.schema_id}


def _get_version(reg: SchemaRegistry, access: Access, parts: list[str], query: Query, body: Any) -> object:
    if parts[2] != "versions":
        return _not_found()
    return reg.version(parts[1], parts[3], deleted=_flag(query, "deleted")).to_api(query.get("format"))


def _delete_version(reg: SchemaRegistry, access: Access, parts: list[str], query: Query, body: Any) -> object:
    if parts[2] != "versions":
        return _not_found()
    _check_subject(access, parts[1], Operation.DELETE)
    return reg.delete_version(parts[1], parts[3], permanent=_flag(query, "permanent"))


def _raw(schema_text: str) -> Response:
    """A schema as ``.../schema`` answers it: the schema itself, not wrapped."""
    return Response(schema_text.encode(), media_type=MEDIA_TYPE)


def _version_detail(reg: SchemaRegistry, access: Access, parts: list[str], query: Query, body: Any) -> object:
    if parts[2] != "versions" or parts[4] not in ("schema", "referencedby"):
        return _not_found()
    rs = reg.version(parts[1], parts[3], deleted=_flag(query, "deleted"))
    if parts[4] == "schema":
        return _raw(rs.schema.text)
    return reg.referenced_by(rs.subject, rs.version)


# -- schemas by id -------------------------------------------------------------------

def _schema_id(value: str) -> int:
    if not (value.isascii() and value.isdigit()):
        raise SchemaNotFound(f"Schema {value} not found")
    return int(value)


def _schema_types(reg: SchemaRegistry, access: Access, parts: list[str], query: Query, body: Any) -> object:
    if parts[1] != "types":
        return _not_found()
    return list(SCHEMA_TYPES)


def _list_schemas(reg: SchemaRegistry, access: Access, parts: list[str], query: Query, body: Any) -> object:
    """``GET /schemas``: every subject version (``deleted``, ``subjectPrefix``, ``latestOnly``)."""
    prefix, deleted = query.get("subjectPrefix", ""), _flag(query, "deleted")
    out = []
    for subject in reg.subjects(deleted=deleted, prefix=prefix):
        versions = reg.versions(subject, deleted=deleted)
        for v in versions[-1:] if _flag(query, "latestOnly") else versions:
            out.append(reg.version(subject, v, deleted=deleted).to_api())
    return out


def _get_schema(reg: SchemaRegistry, access: Access, parts: list[str], query: Query, body: Any) -> object:
    if parts[1] != "ids":
        return _not_found()
    return reg.schema(_schema_id(parts[2])).to_api(query.get("format"))


def _schema_detail(reg: SchemaRegistry, access: Access, parts: list[str], query: Query, body: Any) -> object:
    if parts[1] != "ids":
        return _not_found()
    schema_id = _schema_id(parts[2])
    if parts[3] == "schema":
        s = reg.schema(schema_id)
        return _raw(s.text)
    deleted = _flag(query, "deleted")
    if parts[3] == "subjects":
        return sorted({v.subject for v in reg.subjects_of(schema_id, deleted=deleted)})
    if parts[3] == "versions":
        return [{"subject": v.subject, "version": v.version} for v in reg.subjects_of(schema_id, deleted=deleted)]
    return _not_found()


# -- compatibility levels, checks and modes ------------------------------------------

def _get_config(reg: SchemaRegistry, access: Access, parts: list[str], query: Query, body: Any) -> object:
    level = reg.compatibility(_subject_or_none(parts), fallback=_flag(query, "defaultToGlobal"))
    return {"compatibilityLevel": level.value}


def _put_config(reg: SchemaRegistry, access: Access, parts: list[str], query: Query, body: Any) -> object:
    access.check(Operation.ALTER_CONFIGS, ResourceType.CLUSTER)
    d = body if isinstance(body, dict) else {}
    # ``compatibility`` (the API's name) or ``compatibilityLevel`` (what newer clients send)
    level = Compatibility.parse(d.get("compatibility", d.get("compatibilityLevel")))
    return {"compatibility": reg.set_compatibility(level, _subject_or_none(parts)).value}


def _delete_config(reg: SchemaRegistry, access: Access, parts: list[str], query: Query, body: Any) -> object:
    access.check(Operation.ALTER_CONFIGS, ResourceType.CLUSTER)
    return {"compatibilityLevel": reg.delete_compatibility(_subject_or_none(parts)).value}


def _check(reg: SchemaRegistry, access: Access, parts: list[str], query: Query, body: Any) -> object:
    if parts[1] != "subjects" or parts[3] != "versions":
        return _not_found()
    version = parts[4] if len(parts) > 4 else None
    messages = reg.check(parts[2], *_schema_args(body), version=version)
    out: dict[str, object] = {"is_compatible": not messages}
    if _flag(query, "verbose"):
        out["messages"] = messages
    return out


def _get_mode(reg: SchemaRegistry, access: Access, parts: list[str], query: Query, body: Any) -> object:
    return {"mode": "READWRITE"}


def _put_mode(reg: SchemaRegistry, access: Access, parts: list[str], query: Query, body: Any) -> object:
    access.check(Operation.ALTER_CONFIGS, ResourceType.CLUSTER)
    mode = body.get("mode") if isinstance(body, dict) else None
    if mode != "READWRITE":
        return _error(422, 42204, f"Invalid mode {mode!r}: llog's registry is always READWRITE")
    return {"mode": mode}


def _delete_mode(reg: SchemaRegistry, access: Access, parts: list[str], query: Query, body: Any) -> object:
    access.check(Operation.ALTER_CONFIGS, ResourceType.CLUSTER)
    return {"mode": "READWRITE"}


Handler = Callable[[SchemaRegistry, Access, list[str], Query, Any], object]

#: (method, first path segment, segments) → handler.
ROUTE_TABLE: dict[tuple[str, str, int], Handler] = {
    ("GET", "subjects", 1): _list_subjects,
    ("POST", "subjects", 2): _lookup,
    ("DELETE", "subjects", 2): _delete_subject,
    ("GET", "subjects", 3): _list_versions,
    ("POST", "subjects", 3): _register,
    ("GET", "subjects", 4): _get_version,
    ("DELETE", "subjects", 4): _delete_version,
    ("GET", "subjects", 5): _version_detail,
    ("GET", "schemas", 1): _list_schemas,
    ("GET", "schemas", 2): _schema_types,
    ("GET", "schemas", 3): _get_schema,
    ("GET", "schemas", 4): _schema_detail,
    ("GET", "config", 1): _get_config,
    ("GET", "config", 2): _get_config,
    ("PUT", "config", 1): _put_config,
    ("PUT", "config", 2): _put_config,
    ("DELETE", "config", 1): _delete_config,
    ("DELETE", "config", 2): _delete_config,
    ("POST", "compatibility", 4): _check,
    ("POST", "compatibility", 5): _check,
    ("GET", "mode", 1): _get_mode,
    ("GET", "mode", 2): _get_mode,
    ("PUT", "mode", 1): _put_mode,
    ("PUT", "mode", 2): _put_mode,
    ("DELETE", "mode", 2): _delete_mode,
    ("GET", "contexts", 1): lambda *_: ["."],
}
