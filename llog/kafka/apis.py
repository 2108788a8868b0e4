"""Which Kafka APIs llog serves, at which versions, by which handler.

The versions are those whose messages name topics by name (llog derives a topic's id
from its name and creation, for Metadata and DeleteTopics v6, but keeps no index by id)
and that kafka-python's codecs cover; a client negotiates the highest one both
sides know through ApiVersions. An API or version outside this table is answered with
``UNSUPPORTED_VERSION`` where the response has an error code, and never by dropping the
connection while a well-formed answer exists.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    AlterConfigsRequest,
    AlterUserScramCredentialsRequest,
    CreateAclsRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteAclsRequest,
    DeleteGroupsRequest,
    DeleteRecordsRequest,
    DeleteTopicsRequest,
    DescribeAclsRequest,
    DescribeClientQuotasRequest,
    DescribeClusterRequest,
    DescribeConfigsRequest,
    DescribeGroupsRequest,
    DescribeProducersRequest,
    DescribeTransactionsRequest,
    DescribeUserScramCredentialsRequest,
    IncrementalAlterConfigsRequest,
    ListGroupsRequest,
    ListTransactionsRequest,
)
from kafka.protocol.api_header import ResponseClassRegistry
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer import (
    FetchRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListOffsetsRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    FindCoordinatorRequest,
    MetadataRequest,
)
from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest
from kafka.protocol.producer.transaction import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    TxnOffsetCommitRequest,
)
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
)

from llog.kafka.api_spec import Api
from llog.kafka.context import Context
from llog.kafka.errors import ErrorCode
from llog.kafka.handlers import (
    acls,
    admin,
    configs,
    fetch,
    group_admin,
    groups,
    metadata,
    offsets,
    produce,
    producers,
    quotas,
    scram_users,
    topics,
    transactions,
)

__all__ = ["API_BY_KEY", "SASL_AUTHENTICATE", "SASL_HANDSHAKE", "Api", "Context", "unsupported_response"]

PRODUCE = ProduceRequest.API_KEY
FETCH = FetchRequest.API_KEY
SASL_HANDSHAKE = SaslHandshakeRequest.API_KEY
SASL_AUTHENTICATE = SaslAuthenticateRequest.API_KEY


def _api_versions(ctx: Context, req: Any) -> Awaitable[ApiMessage]:
    return metadata.api_versions(ctx, req, API_BY_KEY.values())


API_BY_KEY: dict[int, Api] = {api.request.API_KEY: api for api in (
    Api(ProduceRequest, 3, 12, produce.produce, runs="ordered"),
    Api(FetchRequest, 4, 12, fetch.fetch),
    Api(ListOffsetsRequest, 1, 9, offsets.list_offsets, runs="blocking"),
    Api(MetadataRequest, 1, 12, metadata.metadata, runs="blocking"),
    Api(ApiVersionsRequest, 0, 3, _api_versions),
    Api(CreateTopicsRequest, 2, 6, topics.create_topics, runs="blocking"),
    Api(CreatePartitionsRequest, 0, 3, topics.create_partitions, runs="blocking"),
    Api(DeleteTopicsRequest, 0, 6, topics.delete_topics, runs="blocking"),
    Api(DeleteRecordsRequest, 0, 2, topics.delete_records, runs="blocking"),
    Api(InitProducerIdRequest, 0, 4, producers.init_producer_id, runs="blocking"),
    Api(DescribeProducersRequest, 0, 0, producers.describe_producers, runs="blocking"),
    # Clients use AddPartitionsToTxn up to v3 (v4+ is Kafka's broker-to-broker check);
    # the v5s of EndTxn and TxnOffsetCommit are KIP-890's second part (implicit adds, an
    # epoch per transaction), not served yet: llog's commits are atomic, and its late-end
    # guards (spec §15.2) stand in for the per-transaction epoch.
    Api(AddPartitionsToTxnRequest, 0, 3, transactions.add_partitions_to_txn, runs="blocking"),
    Api(AddOffsetsToTxnRequest, 0, 4, transactions.add_offsets_to_txn, runs="blocking"),
    Api(TxnOffsetCommitRequest, 0, 4, transactions.txn_offset_commit),
    Api(EndTxnRequest, 0, 4, transactions.end_txn),
    Api(DescribeTransactionsRequest, 0, 0, transactions.describe_transactions, runs="blocking"),
    Api(ListTransactionsRequest, 0, 1, transactions.list_transactions, runs="blocking"),
    Api(FindCoordinatorRequest, 0, 4, groups.find_coordinator),
    Api(JoinGroupRequest, 0, 9, groups.join_group),
    Api(SyncGroupRequest, 0, 5, groups.sync_group),
    Api(HeartbeatRequest, 0, 4, groups.heartbeat),
    Api(LeaveGroupRequest, 0, 5, groups.leave_group),
    Api(OffsetCommitRequest, 2, 8, groups.offset_commit),
    Api(OffsetFetchRequest, 1, 7, groups.offset_fetch, runs="blocking"),
    Api(DescribeConfigsRequest, 1, 4, admin.describe_configs, runs="blocking"),
    Api(AlterConfigsRequest, 0, 2, configs.alter_configs, runs="blocking"),
    Api(IncrementalAlterConfigsRequest, 0, 1, configs.incremental_alter_configs, runs="blocking"),
    Api(DescribeClusterRequest, 0, 2, admin.describe_cluster),
    Api(DescribeClientQuotasRequest, 0, 1, quotas.describe_client_quotas, runs="blocking"),
    Api(AlterClientQuotasRequest, 0, 1, quotas.alter_client_quotas, runs="blocking"),
    Api(ListGroupsRequest, 0, 5, admin.list_groups),
    Api(DescribeGroupsRequest, 0, 6, admin.describe_groups),
    Api(DeleteGroupsRequest, 0, 2, group_admin.delete_groups),
    Api(OffsetDeleteRequest, 0, 0, group_admin.offset_delete),
    Api(DescribeAclsRequest, 0, 3, acls.describe_acls, runs="blocking"),
    Api(CreateAclsRequest, 0, 3, acls.create_acls, runs="blocking"),
    Api(DeleteAclsRequest, 0, 3, acls.delete_acls, runs="blocking"),
    Api(DescribeUserScramCredentialsRequest, 0, 0, scram_users.describe_user_scram_credentials, runs="blocking"),
    Api(AlterUserScramCredentialsRequest, 0, 0, scram_users.alter_user_scram_credentials, runs="blocking"),
    Api(SaslHandshakeRequest, 1, 1, None),  # v0: raw tokens, not served
    Api(SaslAuthenticateRequest, 0, 2, None),
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
