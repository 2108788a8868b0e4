"""Client quotas through Kafka's admin API (KIP-546): DescribeClientQuotas and
AlterClientQuotas, so ``kafka-configs.sh --entity-type users --add-config
producer_byte_rate=...`` and the admin clients set and read them. Entities are of type
``user`` and ``client-id`` (a null name: the default); ``ip`` quotas are not served.
Reading needs DescribeConfigs on the cluster, changing AlterConfigs, as in Kafka."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import AlterClientQuotasResponse, DescribeClientQuotasResponse

from llog.auth.acls import Operation, ResourceType
from llog.errors import InvalidInput
from llog.kafka.context import Context
from llog.kafka.errors import ErrorCode
from llog.quotas.entities import DEFAULT, Name, QuotaEntity
from llog.quotas.store import QuotaStore, check_value

USER, CLIENT_ID = "user", "client-id"
#: DescribeClientQuotas match types: a name, the default, any given name.
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


def entity_of(parts: list[tuple[str, str | None]]) -> QuotaEntity:
    """An entity from the protocol's (type, name) pairs; :class:`InvalidInput` for an
    unknown or repeated type, or an ``ip`` entity."""
    names: dict[str, Name] = {}
    for kind, name in parts:
        if kind not in (USER, CLIENT_ID):
            raise InvalidInput(f"quota entity type {kind!r} is not served: user and client-id only")
        if kind in names:
            raise InvalidInput(f"quota entity type {kind!r} given twice")
        names[kind] = DEFAULT if name is None else name
    if not names:
        raise InvalidInput("a quota entity names a user, a client id or both")
    return QuotaEntity(names.get(USER), names.get(CLIENT_ID))


def entity_parts(entity: QuotaEntity) -> list[tuple[str, str | None]]:
    """The protocol's (type, name) pairs of ``entity`` (the default: a null name)."""
    out: list[tuple[str, str | None]] = []
    for kind, name in ((USER, entity.user), (CLIENT_ID, entity.client_id)):
        if name is not None:
            out.append((kind, None if name is DEFAULT else str(name)))
    return out


def matches(entity: QuotaEntity, components: list[tuple[str, int, str | None]], strict: bool) -> bool:
    """Kafka's ClientQuotaFilter: every component matches (a name, the default, any
    given name), and with ``strict`` the entity has no other part."""
    have: dict[str, Name] = dict((k, n) for k, n in ((USER, entity.user), (CLIENT_ID, entity.client_id))
                                 if n is not None)
    for kind, match_type, match in components:
        name = have.get(kind)
        if name is None:
            return False
        if match_type == MATCH_EXACT and not (name is not DEFAULT and name == match):
            return False
        if match_type == MATCH_DEFAULT and name is not DEFAULT:
            return False
        if match_type == MATCH_SPECIFIED and name is DEFAULT:
            return False
    return not strict or set(have) == {k for k, _, _ in components}


def describe_client_quotas(ctx: Context, req: Any) -> DescribeClientQuotasResponse:
    R = DescribeClientQuotasResponse[req.API_VERSION]
    if not ctx.allows(Operation.DESCRIBE_CONFIGS, ResourceType.CLUSTER):
        return R(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                 error_message="DescribeConfigs on the cluster is not allowed", entries=None)
    components = [(c.entity_type, c.match_type, c.match) for c in req.components]
    for kind, match_type, match in components:
        if kind not in (USER, CLIENT_ID) or match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED) \
                or (match_type == MATCH_EXACT and match is None):
            return R(throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST,
                     error_message=f"not a quota filter component: {kind!r}, match type {match_type}, {match!r}",
                     entries=None)
    held, _ = QuotaStore(ctx.broker.conn).read_all()
    entries = [
        R.EntryData(entity=[R.EntryData.EntityData(entity_type=k, entity_name=n) for k, n in entity_parts(e)],
                    values=[R.EntryData.ValueData(key=k, value=v) for k, v in sorted(values.items())])
        for e, values in held.items() if matches(e, components, req.strict)
    ]
    return R(throttle_time_ms=0, error_code=0, error_message=None, entries=entries)


def alter_client_quotas(ctx: Context, req: Any) -> AlterClientQuotasResponse:
    R = AlterClientQuotasResponse[req.API_VERSION]
    allowed = ctx.allows(Operation.ALTER_CONFIGS, ResourceType.CLUSTER)
    results: list[tuple[Any, int, str | None]] = []
    changes: list[tuple[QuotaEntity, dict[str, float | None]]] = []
    for entry in req.entries:
        code, message = ErrorCode.NONE, None
        try:
            if not allowed:
                raise PermissionError("AlterConfigs on the cluster is not allowed")
            entity = entity_of([(e.entity_type, e.entity_name) for e in entry.entity])
            ops: dict[str, float | None] = {}
            for op in entry.ops:
                ops[op.key] = None if op.remove else check_value(op.key, op.value)
                if op.remove:
                    check_value(op.key, 1.0)
            changes.append((entity, ops))
        except PermissionError as exc:
            code, message = ErrorCode.CLUSTER_AUTHORIZATION_FAILED, str(exc)
        except InvalidInput as exc:
            code, message = ErrorCode.INVALID_REQUEST, str(exc)
        results.append((entry, code, message))
    if changes and not req.validate_only:
        QuotaStore(ctx.broker.conn).alter(changes)  # the valid entries, in one etcd transaction
    return R(throttle_time_ms=0, entries=[
        R.EntryData(error_code=code, error_message=message,
                    entity=[R.EntryData.EntityData(entity_type=e.entity_type, entity_name=e.entity_name)
                            for e in entry.entity])
        for entry, code, message in results])
