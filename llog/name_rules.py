"""The naming rules as data: what a topic (or group, or producer id) name may be, which
names are reserved, how many partitions a topic may have. :mod:`llog.names` checks them;
:mod:`llog.errors` quotes them, so both import this, and neither the other."""

from __future__ import annotations

import re

#: Kafka's name rule: groups, producer ids and (with one exception) topics.
NAME_PATTERN = "[A-Za-z0-9._-]{1,249}"
NAME_RE = re.compile(NAME_PATTERN)
#: The topic-name rule, as a pattern (for JSON schemas) and as a compiled expression:
#: Kafka's, and a dead-letter topic's ``~dlq`` suffix (which Kafka's names cannot hold,
#: so it never meets a name of the user's).
TOPIC_NAME_PATTERN = "(?:[A-Za-z0-9._-]{1,245}(?:~dlq)?|[A-Za-z0-9._-]{246,249})"
TOPIC_NAME_RE = re.compile(TOPIC_NAME_PATTERN)
#: Names that would collide with llog's own object-key or etcd-key prefixes.
RESERVED_TOPICS = frozenset({".", "..", "wal-shared", "_groups", "_maintenance", "_sessions", "_brokers", "_users",
                             "_acls", "_quotas", "_schemas", "_transactions", "_sinks"})
#: A zone's name (an availability zone or its id, a rack: ``us-east-1a``, ``use1-az1``).
ZONE_PATTERN = "[A-Za-z0-9][A-Za-z0-9._-]{0,63}"
ZONE_RE = re.compile(ZONE_PATTERN)
#: Upper bound on partitions per topic; keeps a typo from creating a million keys.
MAX_PARTITIONS = 100_000
