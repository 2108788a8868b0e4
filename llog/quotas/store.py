"""Client quotas in etcd (protocol/README.md §3: ``{root}/_quotas/...``), one key per
entity laid out as Kafka kept them in ZooKeeper (``users/alice``,
``users/alice/clients/etl``, ``users/<default>``, ``clients/<default>``; names
percent-encoded, so a name never reads as ``<default>``), its value the quotas set on it
as JSON ``{kind: value}``. Every broker holds them all through a watch (:mod:`.cache`)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from urllib.parse import quote, unquote

from llog.connection import Connection
from llog.errors import CorruptMetadata, InvalidInput
from llog.etcd.operations import KV, Delete, Put
from llog.quotas.entities import DEFAULT, KINDS, Name, QuotaEntity
from llog.state.keys import prefix_range_end

_DEFAULT_PART = "<default>"


def entity_path(entity: QuotaEntity) -> str:
    """``users/{user}[/clients/{client}]`` or ``clients/{client}``."""
    def part(name: Name) -> str:
        return _DEFAULT_PART if name is DEFAULT else quote(str(name), safe="")

    parts = []
    if entity.user is not None:
        parts += ["users", part(entity.user)]
    if entity.client_id is not None:
        parts += ["clients", part(entity.client_id)]
    return "/".join(parts)


def parse_entity_path(path: str) -> QuotaEntity:
    """The entity :func:`entity_path` names; :class:`ValueError` for anything else."""
    def name(part: str) -> Name:
        return DEFAULT if part == _DEFAULT_PART else unquote(part)

    parts = path.split("/")
    if len(parts) == 2 and parts[0] == "users":
        return QuotaEntity(name(parts[1]), None)
    if len(parts) == 2 and parts[0] == "clients":
        return QuotaEntity(None, name(parts[1]))
    if len(parts) == 4 and parts[0] == "users" and parts[2] == "clients":
        return QuotaEntity(name(parts[1]), name(parts[3]))
    raise ValueError(f"not a quota entity: {path!r}")


def check_value(kind: str, value: float) -> float:
    """A quota's value as stored: a finite number > 0 (a byte rate, or a percentage of
    one request-handling thread's time); :class:`InvalidInput` otherwise."""
    if kind not in KINDS:
        raise InvalidInput(f"unknown quota {kind!r}: one of {', '.join(KINDS)}")
    if isinstance(value, bool) or not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise InvalidInput(f"quota {kind} must be a number > 0, got {value!r}")
    return float(value)


class QuotaStore:
    """The client quotas of one deployment (its root prefix)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def alter(self, changes: Iterable[tuple[QuotaEntity, Mapping[str, float | None]]]) -> None:
        """Set (a value) or remove (``None``) quotas of each entity, all in one etcd
        transaction (each checked first: nothing changes if one is invalid); an entity
        left with no quota is deleted."""
        current, _ = self.read_all()
        planned: dict[QuotaEntity, dict[str, float]] = {}
        for entity, values in changes:
            target = planned.setdefault(entity, dict(current.get(entity, {})))
            for kind, value in values.items():
                if value is None:
                    check_value(kind, 1.0)
                    target.pop(kind, None)
                else:
                    target[kind] = check_value(kind, value)
        ops: list[Put | Delete] = []
        for entity, values in planned.items():
            key = self.conn.keys.quota(entity_path(entity))
            ops.append(Put(key, json.dumps(values, sort_keys=True).encode()) if values else Delete(key))
        if ops:
            self.conn.etcd.txn([], ops)

    def read_all(self) -> tuple[dict[QuotaEntity, dict[str, float]], list[str]]:
        """Every entity's quotas, and the keys under the prefix that do not hold any."""
        out, corrupt = {}, []
        for kv in self._scan():
            try:
                entity, values = decode(self.conn.keys.quotas_prefix(), kv)
            except CorruptMetadata:
                corrupt.append(kv.key)
                continue
            out[entity] = values
        return out, corrupt

    def _scan(self) -> Iterable[KV]:
        prefix = self.conn.keys.quotas_prefix()
        return self.conn.etcd.scan(prefix, prefix_range_end(prefix))


def decode(prefix: str, kv: KV) -> tuple[QuotaEntity, dict[str, float]]:
    try:
        entity = parse_entity_path(kv.key[len(prefix):])
        values = {str(k): check_value(str(k), v) for k, v in json.loads(kv.value).items()}
    except (ValueError, TypeError, AttributeError, InvalidInput) as exc:
        raise CorruptMetadata(kv.key, f"not client quotas: {exc}") from exc
    return entity, values
