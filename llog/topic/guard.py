"""The topic guard (protocol/README.md §4.5, "Deletion"): a topic's name is its key
prefix, so a topic deleted and created again reuses every key of the old one. A
transaction that writes under a topic's partitions therefore compares the topic
record's ``create_revision`` with the one its writer read: after a deletion the record
is absent (0), after a re-creation it has another revision, and the write fails
instead of putting a key under a topic that is gone or into its successor."""

from __future__ import annotations

from dataclasses import dataclass

from llog.connection import Connection
from llog.errors import UnknownTopic
from llog.etcd.operations import KV, Compare, Get


@dataclass(frozen=True)
class TopicGuard:
    """The incarnation of ``topic`` a writer validated against."""

    topic: str
    key: str
    revision: int

    @classmethod
    def of(cls, conn: Connection, topic: str) -> TopicGuard:
        """The guard for the topic as ``conn`` knows it (its cached definition)."""
        meta = conn.topic(topic)
        return cls(topic, conn.keys.topic_meta(topic), meta.revision)

    def compare(self) -> Compare:
        return Compare(self.key, "create", "=", self.revision)

    def read(self) -> Get:
        """The failure branch's read that tells whether the guard broke."""
        return Get(self.key)

    def check(self, conn: Connection, got: list[KV]) -> None:
        """After a failed transaction: raise :class:`UnknownTopic` (and forget the
        cached definition) if the failure read ``got`` shows the topic deleted or
        created again."""
        if not got or got[0].create_revision != self.revision:
            conn.forget_topic(self.topic)
            raise UnknownTopic(self.topic)
