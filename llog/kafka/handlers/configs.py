"""AlterConfigs and IncrementalAlterConfigs (``kafka-configs.sh --alter``, admin
clients): a topic's ``retention.ms`` and ``retention.bytes``, the configs llog keeps
per topic, changed through :meth:`llog.topics.Topics.set_retention`. The other topic
configs DescribeConfigs shows are llog's fixed policies, and a broker's are its
``LLOG_*`` settings: altering them, or a config llog does not know, is refused with
``INVALID_CONFIG`` (broker resources with ``INVALID_REQUEST``), and nothing changes.

AlterConfigs replaces a topic's whole configuration, as in Kafka (a retention it does
not name goes back to none); IncrementalAlterConfigs changes what it names: SET,
DELETE (back to none), and APPEND/SUBTRACT refused (no llog topic config is a list)."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import AlterConfigsResponse, IncrementalAlterConfigsResponse

from llog.errors import LlogError
from llog.kafka.context import Context
from llog.kafka.errors import ErrorCode, error_code
from llog.kafka.handlers.admin import ALTERABLE as RETENTION
from llog.kafka.handlers.admin import BROKER_RESOURCE, TOPIC_RESOURCE, topic_configs
from llog.topics import UNCHANGED, Topics

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
        return ErrorCode.INVALID_REQUEST, "broker configs are llog's LLOG_* settings, read at start"
    if res.resource_type != TOPIC_RESOURCE:
        return ErrorCode.INVALID_REQUEST, f"resource type {res.resource_type} has no configs in llog"
    try:
        ctx.broker.topic(res.resource_name, create=False, refresh=True)  # UNKNOWN_TOPIC_OR_PARTITION first
        # AlterConfigs replaces the whole configuration: a retention it leaves out is none.
        changes: dict[str, int | None] = {} if incremental else dict.fromkeys(RETENTION.values())
        fixed = {name: value for name, value, _, _ in topic_configs(ctx, None, None) if name not in RETENTION}
        for c in res.configs:
            op = c.config_operation if incremental else SET
            if op not in (SET, DELETE):
                raise ConfigRefused(ErrorCode.INVALID_CONFIG,
                                    f"{c.name}: APPEND and SUBTRACT apply to list configs, and llog has none")
            if c.name in RETENTION:
                changes[RETENTION[c.name]] = _limit(c.name, c.value if op == SET else None)
            elif c.name not in fixed:
                raise ConfigRefused(ErrorCode.INVALID_CONFIG, f"unknown topic config {c.name!r}")
            elif op == DELETE or c.value != fixed[c.name]:
                raise ConfigRefused(ErrorCode.INVALID_CONFIG,
                                    f"{c.name} is {fixed[c.name]} for every llog topic (only retention.ms and "
                                    "retention.bytes are set per topic)")
        if not validate_only and changes:
            Topics(ctx.broker.conn).set_retention(res.resource_name,
                                                  retention_ms=changes.get("retention_ms", UNCHANGED),
                                                  retention_bytes=changes.get("retention_bytes", UNCHANGED))
    except ConfigRefused as exc:
        return exc.code, str(exc)
    except LlogError as exc:
        return error_code(exc), str(exc)
    return ErrorCode.NONE, None


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
