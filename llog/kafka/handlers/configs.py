"""AlterConfigs and IncrementalAlterConfigs (``kafka-configs.sh --alter``, admin
clients): a topic's ``retention.ms``, ``retention.bytes`` and ``cleanup.policy``, the
configs llog keeps per topic, changed through :meth:`llog.topics.Topics.set_retention`
and :meth:`~llog.topics.Topics.set_cleanup_policy`. The other topic
configs DescribeConfigs shows are llog's fixed policies, and a broker's are its
``LLOG_*`` settings: altering them, or a config llog does not know, is refused with
``INVALID_CONFIG`` (broker resources with ``INVALID_REQUEST``), and nothing changes.

AlterConfigs replaces a topic's whole configuration, as in Kafka (a retention it does
not name goes back to none); IncrementalAlterConfigs changes what it names: SET,
DELETE (back to none, or ``delete`` for the policy), and APPEND/SUBTRACT refused
(``cleanup.policy`` is a list in Kafka, but of two words: SET it whole)."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import AlterConfigsResponse, IncrementalAlterConfigsResponse

from llog.auth.acls import Operation, ResourceType
from llog.errors import InvalidInput, LlogError
from llog.kafka.context import Context
from llog.kafka.errors import ErrorCode, error_code
from llog.kafka.handlers.admin import (
    ALTERABLE,
    BROKER_RESOURCE,
    CLEANUP_POLICY,
    DURATIONS,
    RETENTION,
    TOPIC_RESOURCE,
    parse_duration,
    topic_configs,
)
from llog.topics import Topics, parse_cleanup_policy

SET, DELETE = 0, 1  # IncrementalAlterConfigs operations (APPEND 2, SUBTRACT 3)


class ConfigRefused(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def alter_configs(ctx: Context, req: Any) -> AlterConfigsResponse:
    return _answer(AlterConfigsResponse, ctx, req, incremental=False)


def incremental_alter_configs(ctx: Context, req: Any) -> IncrementalAlterConfigsResponse:
    return _answer(IncrementalAlterConfigsResponse, ctx, req, incremental=True)


def _answer(R: Any, ctx: Context, req: Any, *, incremental: bool) -> Any:
    """Both APIs' responses have the same shape: one result per resource."""
    out = [R.AlterConfigsResourceResponse(error_code=code, error_message=message, resource_type=res.resource_type,
                                          resource_name=res.resource_name)
           for res in req.resources
           for code, message in [_alter(ctx, res, req.validate_only, incremental=incremental)]]
    return R[req.API_VERSION](throttle_time_ms=0, responses=out)


def _alter(ctx: Context, res: Any, validate_only: bool, *, incremental: bool) -> tuple[int, str | None]:
    if res.resource_type == BROKER_RESOURCE:
        if not ctx.allows(Operation.ALTER_CONFIGS, ResourceType.CLUSTER):
            return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "AlterConfigs on the cluster is not allowed"
        return ErrorCode.INVALID_REQUEST, "broker configs are llog's LLOG_* settings, read at start"
    if res.resource_type != TOPIC_RESOURCE:
        return ErrorCode.INVALID_REQUEST, f"resource type {res.resource_type} has no configs in llog"
    try:
        ctx.check(Operation.ALTER_CONFIGS, ResourceType.TOPIC, res.resource_name)
        ctx.broker.topic(res.resource_name, create=False, refresh=True)  # UNKNOWN_TOPIC_OR_PARTITION first
        # AlterConfigs replaces the whole configuration: a setting it leaves out goes
        # back to its default (no retention limit, cleanup.policy delete).
        changes: dict[str, int | str | None] = {} if incremental else dict.fromkeys(
            (*RETENTION.values(), "cleanup_policy", *DURATIONS.values()))
        fixed = {name: value for name, value, _, _ in topic_configs(ctx, None) if name not in ALTERABLE}
        for c in res.configs:
            op = c.config_operation if incremental else SET
            if op not in (SET, DELETE):
                raise ConfigRefused(ErrorCode.INVALID_CONFIG,
                                    f"{c.name}: APPEND and SUBTRACT are not supported; SET the whole value")
            value = c.value if op == SET else None
            if c.name in RETENTION:
                changes[RETENTION[c.name]] = _limit(c.name, value)
            elif c.name in DURATIONS:
                try:
                    changes[DURATIONS[c.name]] = None if value is None else parse_duration(c.name, value)
                except InvalidInput as exc:
                    raise ConfigRefused(ErrorCode.INVALID_CONFIG, str(exc)) from None
            elif c.name == CLEANUP_POLICY:
                try:
                    changes["cleanup_policy"] = parse_cleanup_policy(value)
                except InvalidInput as exc:
                    raise ConfigRefused(ErrorCode.INVALID_CONFIG, f"{CLEANUP_POLICY}={value!r}: {exc}") from None
            elif c.name not in fixed:
                raise ConfigRefused(ErrorCode.INVALID_CONFIG, f"unknown topic config {c.name!r}")
            elif op == DELETE or c.value != fixed[c.name]:
                raise ConfigRefused(ErrorCode.INVALID_CONFIG,
                                    f"{c.name} is {fixed[c.name]} for every llog topic (only "
                                    f"{', '.join(ALTERABLE)} are set per topic)")
        if not validate_only:
            _apply(Topics(ctx.broker.conn), res.resource_name, changes)
    except ConfigRefused as exc:
        return exc.code, str(exc)
    except LlogError as exc:
        return error_code(exc), str(exc)
    return ErrorCode.NONE, None


def _apply(topics: Topics, name: str, changes: dict[str, Any]) -> None:
    if changes:  # one change of the topic's definition
        topics.configure(name, **changes)


def _limit(name: str, value: str | None) -> int | None:
    """A retention limit: a positive integer, or none for ``-1`` or no value."""
    if value is None:
        return None
    try:
        v = int(value)
    except ValueError:
        raise ConfigRefused(ErrorCode.INVALID_CONFIG, f"{name}={value!r} is not an integer") from None
    if v == 0 or v < -1:
        raise ConfigRefused(ErrorCode.INVALID_CONFIG, f"{name}={value}: give a positive limit, or -1 for none")
    return None if v == -1 else v
