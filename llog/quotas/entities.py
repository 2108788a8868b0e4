"""Which quota applies to a client: Kafka's entities and their order of precedence.

A quota is set on an entity: a user, a client id, or a (user, client id) pair, each
name either a given one or the *default* (``<default>`` in Kafka's tools: every user
or client id without a quota of its own). For a client authenticated as user U with
client id C, each quota kind is looked up in this order, the first entity that sets
it winning (Kafka's ``DefaultQuotaCallback``):

1. (U, C)          2. (U, default)      3. U
4. (default, C)    5. (default, default) 6. default user
7. C               8. default client id

A client that did not authenticate is user ``ANONYMOUS``, as in Kafka.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

#: The quota kinds, as ``kafka-configs.sh --add-config`` names them.
PRODUCER_BYTE_RATE: Final = "producer_byte_rate"
CONSUMER_BYTE_RATE: Final = "consumer_byte_rate"
REQUEST_PERCENTAGE: Final = "request_percentage"
QuotaKind = Literal["producer_byte_rate", "consumer_byte_rate", "request_percentage"]
KINDS: Final[tuple[QuotaKind, ...]] = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE)

#: Kafka's principal for a client that did not authenticate.
ANONYMOUS: Final = "ANONYMOUS"


class _Default:
    """The default entity name (Kafka: ``<default>``, a null name in the protocol)."""

    _instance: _Default | None = None

    def __new__(cls) -> _Default:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "<default>"

    def __reduce__(self) -> str:
        return "DEFAULT"


DEFAULT: Final = _Default()
Name = str | _Default


@dataclass(frozen=True)
class QuotaEntity:
    """A user, a client id, or both; each a name or :data:`DEFAULT`; ``None``: not part
    of the entity. At least one of the two is given."""

    user: Name | None = None
    client_id: Name | None = None

    def __post_init__(self) -> None:
        if self.user is None and self.client_id is None:
            raise ValueError("a quota entity names a user, a client id or both")

    def __str__(self) -> str:
        parts = [f"user {self.user!r}" if isinstance(self.user, str) else "the default user"
                 if self.user is not None else "",
                 f"client id {self.client_id!r}" if isinstance(self.client_id, str) else "the default client id"
                 if self.client_id is not None else ""]
        return ", ".join(p for p in parts if p)


def precedence(user: str | None, client_id: str) -> tuple[QuotaEntity, ...]:
    """The entities that may set a quota for ``user`` (``None``: not authenticated) with
    ``client_id``, most specific first."""
    u = user if user is not None else ANONYMOUS
    return (
        QuotaEntity(u, client_id), QuotaEntity(u, DEFAULT), QuotaEntity(u, None),
        QuotaEntity(DEFAULT, client_id), QuotaEntity(DEFAULT, DEFAULT), QuotaEntity(DEFAULT, None),
        QuotaEntity(None, client_id), QuotaEntity(None, DEFAULT),
    )


def resolve(quotas: Mapping[QuotaEntity, Mapping[str, float]], user: str | None, client_id: str,
            kind: QuotaKind) -> tuple[QuotaEntity, float] | None:
    """The quota of ``kind`` for a client, and the entity it is set on; ``None`` when
    no entity that applies sets one."""
    for entity in precedence(user, client_id):
        value = quotas.get(entity, {}).get(kind)
        if value is not None:
            return entity, value
    return None
