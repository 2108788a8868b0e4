"""Which Kafka APIs llog serves, at which versions, by which handler.

The versions are those whose messages name topics (not topic ids, which llog does not
have) and that kafka-python's codecs cover; a client negotiates the highest one both
sides know through ApiVersions. An API or version outside this table is answered with
``UNSUPPORTED_VERSION`` where the response has an error code, and never by dropping the
connection while a well-formed answer exists.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from kafka.protocol.admin import CreateTopicsRequest, CreateTopicsResponse
from kafka.protocol.api_header import ResponseClassRegistry
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse, ProduceRequest, ProduceResponse
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from llog.kafka.context import Context
from llog.kafka.errors import ErrorCode
from llog.kafka.handlers import fetch, groups, metadata, offsets, produce, producers, topics

__all__ = ["API_BY_KEY", "SASL_AUTHENTICATE", "SASL_HANDSHAKE", "Api", "Context", "unsupported_response"]

SASL_HANDSHAKE = SaslHandshakeRequest.API_KEY
SASL_AUTHENTICATE = SaslAuthenticateRequest.API_KEY


@dataclass(frozen=True)
class Api:
    request: type[ApiMessage]
    response: type[ApiMessage]
    min_version: int
    max_version: int
    #: ``handler(context, request)``: the response (``None``: none is sent, acks=0);
    #: ``None``: the listener answers it (SASL: the connection's own state).
    handler: Callable[[Context, Any], Awaitable[Any]] | None
    #: The handler's own await runs before the next request of the connection is read,
    #: and returns an awaitable of the response (produce: appends keep arrival order).
    ordered: bool = False


def _api_versions(ctx: Context, req: Any) -> Awaitable[ApiMessage]:
    return metadata.api_versions(ctx, req, API_BY_KEY.values())


API_BY_KEY: dict[int, Api] = {api.request.API_KEY: api for api in (
    Api(ProduceRequest, ProduceResponse, 3, 12, produce.produce, ordered=True),
    Api(FetchRequest, FetchResponse, 4, 12, fetch.fetch),
    Api(ListOffsetsRequest, ListOffsetsResponse, 1, 9, offsets.list_offsets),
    Api(MetadataRequest, MetadataResponse, 1, 12, metadata.metadata),
    Api(ApiVersionsRequest, ApiVersionsResponse, 0, 3, _api_versions),
    Api(CreateTopicsRequest, CreateTopicsResponse, 2, 6, topics.create_topics),
    Api(InitProducerIdRequest, InitProducerIdResponse, 0, 4, producers.init_producer_id),
    Api(FindCoordinatorRequest, FindCoordinatorResponse, 0, 4, groups.find_coordinator),
    Api(JoinGroupRequest, JoinGroupResponse, 0, 9, groups.join_group),
    Api(SyncGroupRequest, SyncGroupResponse, 0, 5, groups.sync_group),
    Api(HeartbeatRequest, HeartbeatResponse, 0, 4, groups.heartbeat),
    Api(LeaveGroupRequest, LeaveGroupResponse, 0, 5, groups.leave_group),
    Api(OffsetCommitRequest, OffsetCommitResponse, 2, 8, groups.offset_commit),
    Api(OffsetFetchRequest, OffsetFetchResponse, 1, 7, groups.offset_fetch),
    Api(SaslHandshakeRequest, SaslHandshakeResponse, 1, 1, None),  # v0: raw tokens, not served
    Api(SaslAuthenticateRequest, SaslAuthenticateResponse, 0, 2, None),
)}


def unsupported_response(api_key: int, version: int) -> ApiMessage | None:
    """The answer to an API or version llog does not serve: for ApiVersions, a v0
    response with ``UNSUPPORTED_VERSION`` and the versions it does serve (the client
    retries with one of them); for another API known to the codec, its response at
    that version with every top-level error code set; ``None`` when no such response
    can be built (the connection is then closed)."""
    if api_key == ApiVersionsRequest.API_KEY:
        resp = metadata.versions_response(0, API_BY_KEY.values())
        resp.error_code = ErrorCode.UNSUPPORTED_VERSION
        return resp
    cls = ResponseClassRegistry._response_class_registry.get(api_key)
    if cls is None or not 0 <= version <= cls.max_version:
        return None
    resp = cls[version]()
    if hasattr(resp, "error_code"):
        resp.error_code = ErrorCode.UNSUPPORTED_VERSION
    return resp
