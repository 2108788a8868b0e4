"""How llog names a partition, and the naming rules checked at every entry point."""

from __future__ import annotations

import re

from llog.errors import InvalidInput, InvalidPartition, InvalidTopicName

#: One partition of one topic: ``(topic, partition)``, the key of every per-partition map.
TopicPartition = tuple[str, int]

#: The topic-name rule, as a pattern (for JSON schemas) and as a compiled expression.
TOPIC_NAME_PATTERN = "[A-Za-z0-9._-]{1,249}"
TOPIC_NAME_RE = re.compile(TOPIC_NAME_PATTERN)
#: Names that would collide with llog's own object-key or etcd-key prefixes.
RESERVED_TOPICS = frozenset({".", "..", "wal-shared", "_groups", "_maintenance", "_sessions", "_brokers"})
#: Upper bound on partitions per topic; keeps a typo from creating a million keys.
MAX_PARTITIONS = 100_000


def check_topic(topic: object) -> str:
    """Return ``topic`` if it is a valid topic name, else raise :class:`InvalidTopicName`."""
    if not isinstance(topic, str) or TOPIC_NAME_RE.fullmatch(topic) is None:
        raise InvalidTopicName(topic)
    if topic in RESERVED_TOPICS:
        raise InvalidTopicName(topic)
    return topic


GROUP_NAME_RE = TOPIC_NAME_RE


def check_group(group: object) -> str:
    """Consumer group names follow the topic naming rule."""
    if not isinstance(group, str) or GROUP_NAME_RE.fullmatch(group) is None or group in (".", ".."):
        raise InvalidInput(f"invalid group name {group!r}: must match {TOPIC_NAME_PATTERN}")
    return group


def check_partition(topic: str, partition: object) -> int:
    """Return ``partition`` if it is an int >= 0, else raise :class:`InvalidPartition`."""
    if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
        raise InvalidPartition(topic, partition)
    if partition >= MAX_PARTITIONS:
        raise InvalidPartition(topic, partition)
    return partition
