"""AlterConfigs and IncrementalAlterConfigs (``kafka-configs.sh --alter``, admin
clients): a topic's ``retention.ms``, ``retention.bytes``, ``cleanup.policy`` and key
compaction durations, the configs llog keeps per topic, changed in one change of its
definition (:meth:`llog.topic.admin.Topics.configure`). The rest follow
:mod:`llog.kafka.topic_settings`, as CreateTopics does: a reset of a policy llog fixes,
or its own value, succeeds and changes nothing, another value is refused
(``INVALID_CONFIG``), Kafka's local-log tuning is accepted without effect, a config
llog does not know is refused; a refusal leaves the resource unchanged. A broker's
configs are its ``LLOG_*`` settings: altering them is refused with ``INVALID_REQUEST``.

AlterConfigs replaces a topic's whole configuration, as in Kafka (a retention it does
not name goes back to none); IncrementalAlterConfigs changes what it names: SET,
DELETE (back to the default), and APPEND/SUBTRACT refused (``cleanup.policy`` is a
list in Kafka, but of two words: SET it whole)."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import AlterConfigsResponse, IncrementalAlterConfigsResponse

from llog.auth.acls import Operation, ResourceType
from llog.errors import InvalidInput, LlogError
from llog.kafka.context import Context
from llog.kafka.errors import ErrorCode, error_code
from llog.kafka.handlers.admin import ALTERABLE, BROKER_RESOURCE, TOPIC_RESOURCE
from llog.kafka.topic_settings import topic_settings
from llog.topic.admin import Topics

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
        named: list[tuple[str, str | None]] = []
        for c in res.configs:
            op = c.config_operation if incremental else SET
            if op not in (SET, DELETE):
                raise ConfigRefused(ErrorCode.INVALID_CONFIG,
                                    f"{c.name}: APPEND and SUBTRACT are not supported; SET the whole value")
            named.append((c.name, c.value if op == SET else None))
        if not incremental:
            # AlterConfigs replaces the whole configuration: a setting it leaves out goes
            # back to its default (no retention limit, cleanup.policy delete).
            given = {name for name, _ in named}
            named += [(name, None) for name in ALTERABLE if name not in given]
        try:
            changes = topic_settings(ctx, named)
        except InvalidInput as exc:
            raise ConfigRefused(ErrorCode.INVALID_CONFIG, str(exc)) from None
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

