"""CreateAcls, DescribeAcls and DeleteAcls (``kafka-acls.sh``, admin clients) on the
ACLs in etcd (:class:`~llog.auth.acl_store.AclStore`). Describing takes Describe on
the cluster, changing takes Alter; without the authorizer (``LLOG_AUTH_ACLS`` off) every
call is answered ``SECURITY_DISABLED``, as Kafka answers without an authorizer (``llog
acls`` manages them either way, so they can be in place before it is turned on)."""

from __future__ import annotations

from enum import IntEnum
from typing import Any, TypeVar

from kafka.protocol.admin import CreateAclsResponse, DeleteAclsResponse, DescribeAclsResponse

from llog.auth.acl_store import AclStore
from llog.auth.acls import AclBinding, AclFilter, Operation, PatternType, Permission, ResourceType
from llog.errors import LlogError
from llog.kafka.context import Context
from llog.kafka.errors import ErrorCode, error_code

E = TypeVar("E", bound=IntEnum)

_DISABLED = "no authorizer: the broker runs without LLOG_AUTH_ACLS"


def _refusal(ctx: Context, op: Operation) -> tuple[int, str] | None:
    """Why the caller may not read (Describe) or change (Alter) ACLs, if it may not."""
    if ctx.broker.authorizer is None:
        return ErrorCode.SECURITY_DISABLED, _DISABLED
    if not ctx.allows(op, ResourceType.CLUSTER):
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, f"{op.name.title()} on the cluster is not allowed"
    return None


def _enum(kind: type[E], value: int) -> E:
    try:
        return kind(value)
    except ValueError:
        return kind(0)  # UNKNOWN: refused by the binding's or filter's check


def _filter(f: Any) -> AclFilter:
    return AclFilter(
        _enum(ResourceType, f.resource_type_filter), f.resource_name_filter,
        _enum(PatternType, f.pattern_type_filter), f.principal_filter, f.host_filter,
        _enum(Operation, f.operation), _enum(Permission, f.permission_type)).check()


def create_acls(ctx: Context, req: Any) -> CreateAclsResponse:
    R = CreateAclsResponse
    refused = _refusal(ctx, Operation.ALTER)
    results = []
    for c in req.creations:
        code, message = refused or (ErrorCode.NONE, None)
        if refused is None:
            try:
                AclStore(ctx.broker.conn).add([AclBinding(
                    _enum(ResourceType, c.resource_type), c.resource_name,
                    _enum(PatternType, c.resource_pattern_type), c.principal, c.host,
                    _enum(Operation, c.operation), _enum(Permission, c.permission_type))])
            except LlogError as exc:
                code, message = error_code(exc), str(exc)
        results.append(R.AclCreationResult(error_code=code, error_message=message))
    return R[req.API_VERSION](throttle_time_ms=0, results=results)


def describe_acls(ctx: Context, req: Any) -> DescribeAclsResponse:
    R = DescribeAclsResponse
    refused = _refusal(ctx, Operation.DESCRIBE)
    found: list[AclBinding] = []
    try:
        if refused is None:
            found = AclStore(ctx.broker.conn).list(_filter(req))
    except LlogError as exc:
        refused = (error_code(exc), str(exc))
    by_resource: dict[tuple[int, str, int], list[Any]] = {}
    for b in found:
        by_resource.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(
            R.DescribeAclsResource.AclDescription(principal=b.principal, host=b.host, operation=b.operation,
                                                  permission_type=b.permission))
    code, message = refused or (ErrorCode.NONE, None)
    return R[req.API_VERSION](throttle_time_ms=0, error_code=code, error_message=message, resources=[
        R.DescribeAclsResource(resource_type=rtype, resource_name=name, pattern_type=ptype, acls=acls)
        for (rtype, name, ptype), acls in by_resource.items()])


def delete_acls(ctx: Context, req: Any) -> DeleteAclsResponse:
    R = DeleteAclsResponse
    M = R.DeleteAclsFilterResult.DeleteAclsMatchingAcl
    refused = _refusal(ctx, Operation.ALTER)
    results = []
    for f in req.filters:
        code, message = refused or (ErrorCode.NONE, None)
        removed: list[AclBinding] = []
        if refused is None:
            try:
                removed = AclStore(ctx.broker.conn).remove(_filter(f))
            except LlogError as exc:
                code, message = error_code(exc), str(exc)
        results.append(R.DeleteAclsFilterResult(error_code=code, error_message=message, matching_acls=[
            M(error_code=0, error_message=None, resource_type=b.resource_type, resource_name=b.resource_name,
              pattern_type=b.pattern_type, principal=b.principal, host=b.host, operation=b.operation,
              permission_type=b.permission) for b in removed]))
    return R[req.API_VERSION](throttle_time_ms=0, filter_results=results)
