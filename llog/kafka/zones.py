"""Which zone a Kafka client is in, and the brokers that serve it there.

A client names its zone, in order of precedence, by the zone listener it connected to
(a broker's listener for one zone), by ``llog_zone=<zone>`` anywhere in its
``client.id`` (WarpStream's ``ws_az=`` and Aiven's ``diskless_az=`` are read the same,
so configurations carry over), or, for a consumer, by ``client.rack`` (Fetch's
``rack_id``, KIP-392: answered with a ``preferred_read_replica`` in its zone). Any
broker can serve any partition, so a client's "leaders" are chosen among the live
brokers of its zone (rendezvous hashing within the zone: a broker's loss moves only its
own partitions), and among all brokers when its zone has none alive (a lost zone stops
nobody, and a client in it reaches another zone). docs/zones.md.
"""

from __future__ import annotations

import re

from llog.kafka.registry import BrokerNode, rendezvous
from llog.name_rules import ZONE_PATTERN

#: The markers of a zone in a ``client.id``: llog's own, WarpStream's and Aiven's.
ZONE_MARKERS = ("llog_zone", "ws_az", "diskless_az")
_IN_CLIENT_ID = re.compile(rf"(?:^|[^A-Za-z0-9_])(?:{'|'.join(ZONE_MARKERS)})=({ZONE_PATTERN})")


def zone_in_client_id(client_id: str | None) -> str | None:
    """The zone a ``client.id`` names (``app-1,llog_zone=us-east-1a``), or ``None``."""
    if not client_id:
        return None
    found = _IN_CLIENT_ID.search(client_id)
    return found.group(1) if found else None


def client_zone(listener_zone: str | None, client_id: str | None) -> str | None:
    """A client's zone: its listener's, else its ``client.id``'s (``None``: unknown)."""
    return listener_zone or zone_in_client_id(client_id)


def serving(nodes: list[BrokerNode], zone: str | None) -> list[BrokerNode]:
    """The brokers of ``nodes`` that serve a client of ``zone``: those in it, or every
    one when it has none (or the client's zone is unknown)."""
    if zone is None:
        return nodes
    return [n for n in nodes if n.zone == zone] or nodes


def replicas(nodes: list[BrokerNode], leader: BrokerNode, topic: str, partition: int) -> list[int]:
    """Metadata's replicas of a partition: its leader, then for every other zone of
    ``nodes`` the broker :func:`preferred_replica` names there. The Java client follows
    a ``preferred_read_replica`` only to a broker Metadata lists as a replica; without
    zones the list is the leader alone, as before."""
    key = f"{topic}\0{partition}"
    zones = sorted({n.zone for n in nodes if n.zone is not None and n.zone != leader.zone})
    return [leader.node_id, *(rendezvous([n for n in nodes if n.zone == z], key).node_id for z in zones)]


def preferred_replica(nodes: list[BrokerNode], me: BrokerNode, zone: str, topic: str, partition: int) -> int:
    """KIP-392's ``preferred_read_replica`` for a consumer of ``zone`` fetching from
    ``me``: a live broker of its zone for the partition, or -1 (stay: ``me`` is in it,
    or the zone has no broker alive)."""
    if me.zone == zone:
        return -1
    near = [n for n in nodes if n.zone == zone]
    return rendezvous(near, f"{topic}\0{partition}").node_id if near else -1
