"""DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554;
``kafka-configs.sh --entity-type users``, admin clients): the SCRAM users of ``llog
users`` (:class:`~llog.auth.users.Users`). An upsertion carries the salted password, never
the password, from which the stored credential is derived as ``llog users`` derives it.
Describing takes Describe on the cluster, altering takes Alter."""

from __future__ import annotations

from collections import Counter
from typing import Any

from kafka.protocol.admin import AlterUserScramCredentialsResponse, DescribeUserScramCredentialsResponse

from llog.auth.acls import Operation, ResourceType
from llog.auth.scram import MAX_ITERATIONS, MIN_ITERATIONS, ScramCredential, from_salted_password
from llog.auth.users import Users
from llog.errors import InvalidInput, LlogError, UnknownUser
from llog.kafka.context import Context
from llog.kafka.errors import ErrorCode, error_code

#: Kafka's ScramMechanism codes.
MECHANISM_CODES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
_BY_CODE = {code: name for name, code in MECHANISM_CODES.items()}


def _may(ctx: Context, op: Operation) -> bool:
    """``op`` (Describe, Alter) on the cluster; without the authorizer, for the broker
    token's holders only (a user may not read others' names or reset their passwords),
    and describing for anyone on a broker that authenticates nobody, as Kafka without an
    authorizer answers (``kafka-configs.sh --describe --entity-type users`` asks it
    along with the users' quotas)."""
    if ctx.broker.authorizer is None:
        cfg = ctx.broker.config
        if op is Operation.DESCRIBE and cfg.broker_token is None and not cfg.auth_users:
            return True
        return ctx.caller is not None and ctx.caller.token
    return ctx.allows(op, ResourceType.CLUSTER)


def describe_user_scram_credentials(ctx: Context, req: Any) -> DescribeUserScramCredentialsResponse:
    R = DescribeUserScramCredentialsResponse
    Result = R.DescribeUserScramCredentialsResult
    if not _may(ctx, Operation.DESCRIBE):
        return _describe_error(req, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Describe on the cluster is not allowed")
    try:
        known = {u.name: u.mechanisms for u in Users(ctx.broker.conn).list()}
    except LlogError as exc:
        return _describe_error(req, error_code(exc), str(exc))
    asked = [u.name for u in req.users] if req.users else sorted(known)
    counts = Counter(asked)
    results = []
    for name in dict.fromkeys(asked):
        code, message, infos = ErrorCode.NONE, None, []
        if counts[name] > 1:
            code, message = ErrorCode.DUPLICATE_RESOURCE, f"user {name!r} asked for more than once"
        elif name not in known:
            code, message = ErrorCode.RESOURCE_NOT_FOUND, f"no credential of user {name!r}"
        else:
            infos = [Result.CredentialInfo(mechanism=MECHANISM_CODES[m], iterations=i) for m, i in known[name].items()]
        results.append(Result(user=name, error_code=code, error_message=message, credential_infos=infos))
    return R[req.API_VERSION](throttle_time_ms=0, error_code=0, error_message=None, results=results)


def _describe_error(req: Any, code: int, message: str) -> DescribeUserScramCredentialsResponse:
    """A refusal of the whole request, repeated in each user's result, as Kafka answers
    (clients match results to the users they asked for)."""
    R = DescribeUserScramCredentialsResponse
    return R[req.API_VERSION](throttle_time_ms=0, error_code=code, error_message=message, results=[
        R.DescribeUserScramCredentialsResult(user=u.name, error_code=code, error_message=message, credential_infos=[])
        for u in req.users or ()])


def alter_user_scram_credentials(ctx: Context, req: Any) -> AlterUserScramCredentialsResponse:
    """Each user's changes checked together and applied together (one compare-and-swap),
    or none of them, as Kafka does."""
    R = AlterUserScramCredentialsResponse
    by_user: dict[str, list[tuple[int, Any]]] = {}
    for d in req.deletions:
        by_user.setdefault(d.name, []).append((d.mechanism, None))
    for u in req.upsertions:
        by_user.setdefault(u.name, []).append((u.mechanism, u))
    allowed = _may(ctx, Operation.ALTER)
    users = Users(ctx.broker.conn)
    results = []
    for name, changes in by_user.items():
        code, message = (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Alter on the cluster is not allowed") \
            if not allowed else _alter(users, name, changes)
        results.append(R.AlterUserScramCredentialsResult(user=name, error_code=code, error_message=message))
    return R[req.API_VERSION](throttle_time_ms=0, results=results)


def _alter(users: Users, name: str, changes: list[tuple[int, Any]]) -> tuple[int, str | None]:
    upserts: dict[str, ScramCredential] = {}
    deletes: list[str] = []
    if not name:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "the user name is empty"
    if len({code for code, _ in changes}) < len(changes):
        return ErrorCode.DUPLICATE_RESOURCE, f"a mechanism of user {name!r} is changed more than once"
    for code, upsertion in changes:
        mechanism = _BY_CODE.get(code)
        if mechanism is None:
            return ErrorCode.UNSUPPORTED_SASL_MECHANISM, f"unknown SCRAM mechanism {code}"
        if upsertion is None:
            deletes.append(mechanism)
        elif not MIN_ITERATIONS <= upsertion.iterations <= MAX_ITERATIONS:
            return ErrorCode.UNACCEPTABLE_CREDENTIAL, (
                f"iterations {upsertion.iterations} not in {MIN_ITERATIONS}..{MAX_ITERATIONS}")
        else:
            upserts[mechanism] = from_salted_password(mechanism, bytes(upsertion.salt), upsertion.iterations,
                                                      bytes(upsertion.salted_password))
    try:
        users.change_credentials(name, upserts, deletes)
    except UnknownUser:
        return ErrorCode.RESOURCE_NOT_FOUND, f"user {name!r} has no credential to delete for {', '.join(deletes)}"
    except InvalidInput as exc:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, str(exc)
    except LlogError as exc:
        return error_code(exc), str(exc)
    return ErrorCode.NONE, None
