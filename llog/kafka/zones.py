"""Which broker a Kafka client is sent to for a partition, and which zone the client is in.

Any broker can serve any partition; a partition's "leader" is the live broker that
rendezvous hashing picks for it (:func:`leader_of`). A client is in the zone of the zone
listener it connected to (a broker's Kafka port for the clients of one zone, given to it
again for every broker: :meth:`BrokerNode.port_for`), or names its zone by
``llog_zone=<zone>`` anywhere in its ``client.id`` (WarpStream's ``ws_az=`` and Aiven's
``diskless_az=`` are read the same, so configurations carry over): its leaders are then
picked among the live brokers of its zone (a broker's loss moves only its own
partitions), and among all brokers when its zone has none alive (a lost zone stops
nobody, and a client in it reaches another zone). A consumer that names only
``client.rack`` (Fetch's ``rack_id``, KIP-392) is answered with a
``preferred_read_replica`` in its zone. docs/zones.md.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from llog.kafka.registry import BrokerNode, rendezvous
from llog.name_rules import ZONE_PATTERN

if TYPE_CHECKING:
    from llog.kafka.context import Context

#: The markers of a zone in a ``client.id``: llog's own, WarpStream's and Aiven's.
ZONE_MARKERS = ("llog_zone", "ws_az", "diskless_az")
_IN_CLIENT_ID = re.compile(rf"(?:^|[^A-Za-z0-9_])(?:{'|'.join(ZONE_MARKERS)})=({ZONE_PATTERN})")


def leader_of(nodes: list[BrokerNode], topic: str, partition: int) -> BrokerNode:
    """The broker of ``nodes`` a partition's clients are sent to. Spreading partitions
    over the live brokers spreads the clients. By rendezvous hashing, so every broker
    computes the same answer from the same live list, and a broker leaving moves only
    its own partitions (clients of the others keep their connections and their
    in-flight requests)."""
    return rendezvous(nodes, f"{topic}\0{partition}")


def leader_share(nodes: list[BrokerNode], me: int, topics: Iterable[tuple[str, int]]) -> float:
    """The part of a client's quota broker ``me`` holds it to (docs/security.md,
    "Quotas"): the share of ``topics``' partitions (name, partition count) it leads among
    ``nodes``, the live brokers serving the client, and never less than one over their
    number. A client that spreads its records over a topic's partitions, as the default
    partitioners do, then gets its whole quota across the brokers however unevenly
    rendezvous hashing has them lead the topic; one that writes to a few partitions gets
    at least a broker's even share of it."""
    ids = tuple(sorted(n.node_id for n in nodes))
    led = total = 0
    for topic, count in topics:
        led += _led(ids, me, topic, count)
        total += count
    floor = 1.0 / max(1, len(ids))
    return max(led / total, floor) if total else floor


@functools.lru_cache(maxsize=4096)
def _led(ids: tuple[int, ...], me: int, topic: str, count: int) -> int:
    """How many of ``topic``'s ``count`` partitions :func:`leader_of` gives to ``me``
    among the brokers ``ids`` (cached: the live list changes rarely)."""
    nodes = [BrokerNode(i, "", 0) for i in ids]  # rendezvous reads only the node ids
    return sum(1 for p in range(count) if leader_of(nodes, topic, p).node_id == me) if me in ids else 0


def zone_in_client_id(client_id: str | None) -> str | None:
    """The zone a ``client.id`` names (``app-1,llog_zone=us-east-1a``), or ``None``."""
    if not client_id:
        return None
    found = _IN_CLIENT_ID.search(client_id)
    return found.group(1) if found else None


def client_zone(ctx: Context, req: Any) -> str | None:
    """The zone of the client that sent a Kafka request: that of the zone listener it
    connected to, else the one its client id names, else ``None``."""
    return ctx.listener_zone or zone_in_client_id(getattr(req.header, "client_id", None))


def replicas(nodes: list[BrokerNode], leader: BrokerNode, topic: str, partition: int) -> list[int]:
    """Metadata's replicas of a partition: its leader, then for every other zone of
    ``nodes`` the broker :func:`preferred_replica` names there. The Java client follows
    a ``preferred_read_replica`` only to a broker Metadata lists as a replica; without
    zones the list is the leader alone, as before."""
    zones = sorted({n.zone for n in nodes if n.zone is not None and n.zone != leader.zone})
    return [leader.node_id, *(leader_of([n for n in nodes if n.zone == z], topic, partition).node_id for z in zones)]


def preferred_replica(nodes: list[BrokerNode], me: BrokerNode, zone: str, topic: str, partition: int) -> int:
    """KIP-392's ``preferred_read_replica`` for a consumer of ``zone`` fetching from
    ``me``: a live broker of its zone for the partition, or -1 (stay: ``me`` is in it,
    or the zone has no broker alive)."""
    if me.zone == zone:
        return -1
    near = [n for n in nodes if n.zone == zone]
    return leader_of(near, topic, partition).node_id if near else -1
