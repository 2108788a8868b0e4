"""Finding the partitions there is something to compact in.

A partition has data once its ``meta/control`` key exists. Instead of scanning every
key (index keys run into the millions), discovery skips from topic to topic
(:meth:`llog.topic.admin.Topics.list`) and, inside a topic, from partition to partition:
one ceiling lookup per topic and per partition that has keys.
"""

from __future__ import annotations

from dataclasses import dataclass

from llog.connection import Connection
from llog.names import TopicPartition
from llog.state.keys import prefix_range_end
from llog.topic.admin import Topics


def partitions_with_data(conn: Connection, topic: str, partitions: int) -> list[int]:
    """Partitions ``< partitions`` of ``topic`` that have a ``meta/control`` key."""
    etcd, keys = conn.etcd, conn.keys
    base = f"{keys.topic_prefix(topic)}partitions/"
    end = prefix_range_end(base)
    found: list[int] = []
    cursor = base
    while True:
        got = etcd.keys(cursor, end, limit=1)
        if not got:
            return sorted(found)
        head = got[0][len(base) :].split("/", 1)[0]
        try:
            p = int(head)
        except ValueError:  # not a partition directory: skip past it
            cursor = prefix_range_end(f"{base}{head}/")
            continue
        if p < partitions and etcd.get(keys.control(topic, p)) is not None:
            found.append(p)
        cursor = prefix_range_end(keys.partition_prefix(topic, p))


@dataclass(frozen=True)
class Discovery:
    """What one discovery scan found: every topic (name → partition count) and the
    ``(topic, partition)`` pairs with data."""

    topics: dict[str, int]
    partitions: set[TopicPartition]


def discover(conn: Connection) -> Discovery:
    """Scan every topic for partitions with data."""
    topics: dict[str, int] = {}
    found: set[TopicPartition] = set()
    for meta in Topics(conn).list():
        topics[meta.name] = meta.partitions
        found.update((meta.name, p) for p in partitions_with_data(conn, meta.name, meta.partitions))
    return Discovery(topics, found)
