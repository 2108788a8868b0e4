"""What every Kafka request handler reaches: the broker, the live-broker registry, the
group coordinator and the produce batch checker."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from llog.kafka.batch_checks import BatchChecker
from llog.kafka.coordinator import Coordinator
from llog.kafka.registry import BrokerNode, BrokerRegistry, rendezvous

if TYPE_CHECKING:
    from llog.broker.state import Broker


@dataclass(frozen=True)
class Context:
    broker: Broker
    registry: BrokerRegistry
    coordinator: Coordinator
    checks: BatchChecker
    #: Set when the broker begins to stop: it leads nothing from then on
    #: (:meth:`KafkaListener.begin_drain`).
    draining: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def cluster_id(self) -> str:
        """Stable per llog root: every broker of one deployment reports the same."""
        return f"llog-{self.broker.conn.keys.root}"

    def topic_id(self, topic: str) -> uuid.UUID:
        """A stable id per topic name (llog topics have none of their own)."""
        return uuid.uuid5(uuid.NAMESPACE_URL, f"llog://{self.broker.conn.keys.root}/{topic}")


def leader_of(nodes: list[BrokerNode], topic: str, partition: int) -> BrokerNode:
    """The broker a partition's clients are sent to. Any broker can serve any
    partition; spreading partitions over the live brokers spreads the clients. By
    rendezvous hashing, so every broker computes the same answer from the same live
    list, and a broker leaving moves only its own partitions (clients of the others
    keep their connections and their in-flight requests)."""
    return rendezvous(nodes, f"{topic}\0{partition}")

