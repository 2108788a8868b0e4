"""The Kafka brokers' registry in etcd (llog/kafka/registry.py) through a clean stop: a
draining broker leads and coordinates nothing, here and on the others, yet stays in the
broker list Metadata sends, after it stops too, until its lease runs out or a restart
takes its registration over (librdkafka retires a broker gone from that list, and can
wait forever on a group coordinator it knew there). Real etcd, registries in one
process."""

from __future__ import annotations

import json

from llog.connection import Connection
from llog.kafka.registry import BrokerRegistry, scan_brokers
from llog.local_ports import free_port


def _draining(conn: Connection) -> dict[int, bool]:
    return {n.node_id: n.draining for n, _kv in scan_brokers(conn)}


def test_a_draining_broker_leads_nothing_anywhere_but_stays_listed_after_it_stops(conn: Connection) -> None:
    port = free_port()
    a = BrokerRegistry(conn, "127.0.0.1", port, ttl_s=10)
    b = BrokerRegistry(conn, "127.0.0.1", free_port(), ttl_s=10)
    a_id, b_id = a.start(), b.start()
    again = BrokerRegistry(conn, "127.0.0.1", port, ttl_s=10)
    try:
        assert [n.node_id for n in b.live(max_age_s=0)] == sorted([a_id, b_id])
        a.stop_leading()
        assert [n.node_id for n in a.live(max_age_s=0)] == [b_id]  # at once, before etcd says so
        a.drain()
        assert _draining(conn) == {a_id: True, b_id: False}
        # The other broker leaves it out of leaders and coordinators, still lists it.
        assert [n.node_id for n in b.live(max_age_s=0)] == [b_id]
        assert [n.node_id for n in b.registered(max_age_s=0)] == sorted([a_id, b_id])
        assert all(b.coordinator(f"group-{i}").node_id == b_id for i in range(20))
        # Stopped, it is still listed, draining, until its lease runs out ...
        a.close()
        assert _draining(conn) == {a_id: True, b_id: False}
        assert [n.node_id for n in b.registered(max_age_s=0)] == sorted([a_id, b_id])
        # ... or its restart on the same address takes the same id back, leading again.
        assert again.start() == a_id
        assert _draining(conn) == {a_id: False, b_id: False}
        assert [n.node_id for n in b.live(max_age_s=0)] == sorted([a_id, b_id])
        # With every other one draining, a draining broker answers for itself rather
        # than for nobody.
        again.stop_leading()
        again.drain()
        b.stop_leading()
        assert [n.node_id for n in b.live(max_age_s=0)] == [b_id]
    finally:
        for r in (a, b, again):
            r.close()


def test_among_peers_of_an_earlier_release_a_draining_broker_deregisters_at_once(conn: Connection) -> None:
    """A 0.2.0 broker reads no ``draining`` mark and would go on naming a draining peer
    a leader: among such peers the registration goes at once, as 0.2.0's own did."""
    old = conn.keys.broker(60)
    conn.etcd.put(old, json.dumps({"host": "127.0.0.1", "port": free_port(), "version": "0.2.0"}).encode())
    a = BrokerRegistry(conn, "127.0.0.1", free_port(), ttl_s=10)
    try:
        a.start()
        assert not a.peers_read_draining()
        a.stop_leading()
        a.drain()
        assert _draining(conn) == {60: False}
    finally:
        a.close()
        conn.etcd.delete_range(old)
