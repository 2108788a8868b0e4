"""What every Kafka request handler reaches: the broker, the live-broker registry, the
group coordinator and the produce batch checker."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from llog.auth.acls import CLUSTER_NAME, Operation, ResourceType, camel
from llog.auth.authorizer import Caller
from llog.codec.etcd_values.topic import TopicMeta
from llog.errors import NotAuthorized
from llog.kafka.batch_checks import BatchChecker
from llog.kafka.coordinator import Coordinator
from llog.kafka.registry import BrokerRegistry
from llog.kafka.sasl import SaslState

if TYPE_CHECKING:
    from llog.broker.state import Broker

#: How long :meth:`Context.abandoned` waits for a close on its way behind a request.
ABANDONED_GRACE_S = 0.002

#: The id Kafka gives no topic (a topic in error, a request naming topics by name).
ZERO_TOPIC_ID = uuid.UUID(int=0)


@dataclass(frozen=True)
class Context:
    broker: Broker
    registry: BrokerRegistry
    coordinator: Coordinator
    checks: BatchChecker
    #: Set when the broker begins to stop: it leads nothing from then on
    #: (:meth:`KafkaListener.begin_drain`).
    draining: asyncio.Event = field(default_factory=asyncio.Event)
    #: The connection's authentication, whose caller the authorizer judges (each
    #: connection has its own context: ``replace(listener_context, sasl=...)``).
    sasl: SaslState | None = None
    #: Whether the client has closed the connection (``None``: the listener's own context).
    gone: Callable[[], bool] | None = None
    #: The zone whose listener the connection came to (docs/zones.md), if it did.
    listener_zone: str | None = None

    async def abandoned(self) -> bool:
        """Whether the client closed this connection, looked at a moment after the
        request came: a request held back by a paused broker or a network partition
        arrives just before the close its client made when it gave up on it."""
        if self.gone is None:
            return False
        await asyncio.sleep(ABANDONED_GRACE_S)
        return self.gone()

    def allows(self, op: Operation, rtype: ResourceType, name: str = CLUSTER_NAME, *, audit: bool = True) -> bool:
        """Whether the connection's caller may ``op`` the resource (always, with no
        authorizer); a refusal is logged and counted unless ``audit`` is off."""
        authz = self.broker.authorizer
        if authz is None:
            return True
        # No connection (the listener's own context): nothing is allowed.
        return self.sasl is not None and authz.allows(self.sasl.caller, op, rtype, name, audit=audit)

    def check(self, op: Operation, rtype: ResourceType, name: str = CLUSTER_NAME) -> None:
        """:class:`NotAuthorized` unless :meth:`allows`."""
        if not self.allows(op, rtype, name):
            caller = self.sasl.caller if self.sasl is not None else None
            raise NotAuthorized(caller.principal if caller else "?", camel(op), camel(rtype), name)

    def allows_any(self, op: Operation, rtype: ResourceType) -> bool:
        """Whether some resource of ``rtype`` lets the caller ``op`` (not audited)."""
        authz = self.broker.authorizer
        if authz is None:
            return True
        return self.sasl is not None and authz.allows_any(self.sasl.caller, op, rtype)

    def may_create(self, topic: str, *, audit: bool = False) -> bool:
        """What creating ``topic`` takes (:meth:`Authorizer.may_create`); auto-creation
        does not audit a refusal: a client that may not create an unknown topic is told so."""
        authz = self.broker.authorizer
        if authz is None:
            return True
        return self.sasl is not None and authz.may_create(self.sasl.caller, topic, audit=audit)

    @property
    def caller(self) -> Caller | None:
        return None if self.sasl is None else self.sasl.caller

    @property
    def cluster_id(self) -> str:
        """Stable per llog root: every broker of one deployment reports the same."""
        return f"llog-{self.broker.conn.keys.root}"

    def topic_id(self, meta: TopicMeta) -> uuid.UUID:
        """The topic's Kafka id: derived from its name and its record's create revision,
        so every broker reports the same id, and a topic deleted and created again
        under the same name gets a new one (as in Kafka, where clients read the change
        as a new topic)."""
        return uuid.uuid5(uuid.NAMESPACE_URL, f"llog://{self.broker.conn.keys.root}/{meta.name}@{meta.revision}")

