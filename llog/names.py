"""How llog names a partition, and the naming rules (:mod:`llog.name_rules`) checked at
every entry point."""

from __future__ import annotations

from llog.errors import InvalidInput, InvalidPartition, InvalidTopicName
from llog.name_rules import MAX_PARTITIONS, NAME_PATTERN, NAME_RE, RESERVED_TOPICS, TOPIC_NAME_PATTERN, TOPIC_NAME_RE

__all__ = [
    "MAX_PARTITIONS",
    "NAME_PATTERN",
    "NAME_RE",
    "RESERVED_TOPICS",
    "TOPIC_NAME_PATTERN",
    "TOPIC_NAME_RE",
    "TopicPartition",
    "check_group",
    "check_partition",
    "check_topic",
]

#: One partition of one topic: ``(topic, partition)``, the key of every per-partition map.
TopicPartition = tuple[str, int]


def check_topic(topic: object) -> str:
    """Return ``topic`` if it is a valid topic name, else raise :class:`InvalidTopicName`."""
    if not isinstance(topic, str) or TOPIC_NAME_RE.fullmatch(topic) is None:
        raise InvalidTopicName(topic)
    if topic in RESERVED_TOPICS:
        raise InvalidTopicName(topic)
    return topic


GROUP_NAME_RE = NAME_RE


def check_group(group: object) -> str:
    """Consumer group names follow the topic naming rule."""
    if not isinstance(group, str) or GROUP_NAME_RE.fullmatch(group) is None or group in (".", ".."):
        raise InvalidInput(f"invalid group name {group!r}: must match {NAME_PATTERN}")
    return group


def check_partition(topic: str, partition: object) -> int:
    """Return ``partition`` if it is an int >= 0, else raise :class:`InvalidPartition`."""
    if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
        raise InvalidPartition(topic, partition)
    if partition >= MAX_PARTITIONS:
        raise InvalidPartition(topic, partition)
    return partition
