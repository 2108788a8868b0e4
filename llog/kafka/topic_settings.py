"""One rule for the topic configs that CreateTopics, AlterConfigs and
IncrementalAlterConfigs name, each with a value, or none for its default (a DELETE,
or a config that AlterConfigs' whole set leaves out):

- ``retention.ms``, ``retention.bytes``, ``cleanup.policy``, ``min.compaction.lag.ms``
  and ``delete.retention.ms`` are llog's per-topic settings: fields of its topic
  definition;
- a policy llog fixes for every topic (``compression.type=producer``, the rest of
  DescribeConfigs' read-only configs) accepts its own value or a reset, which change
  nothing; another value is refused, naming the setting;
- Kafka's tuning of a broker's local log, replication and tiered storage
  (:data:`NO_EFFECT`) has nothing to tune in llog: any value is accepted and changes
  nothing;
- any other name is refused.

Mirroring tools (MirrorMaker 2) send every config of the source topic, resetting the
ones at their default there, so a reset of what llog fixes must succeed."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from llog.errors import InvalidInput
from llog.kafka.context import Context
from llog.kafka.handlers.admin import ALTERABLE, CLEANUP_POLICY, DURATIONS, RETENTION, parse_duration, topic_configs
from llog.topic.admin import parse_cleanup_policy

#: Kafka's topic configs (4.1's, and those of earlier versions a mirroring tool may
#: still send) for a broker's local log segments, flushing, cleaning, replication and
#: tiered storage: the object store and llog's compactor do that work, every broker
#: serves every partition.
NO_EFFECT = frozenset({
    "segment.bytes", "segment.ms", "segment.jitter.ms", "segment.index.bytes", "index.interval.bytes",
    "flush.messages", "flush.ms", "file.delete.delay.ms", "preallocate",
    "min.cleanable.dirty.ratio", "max.compaction.lag.ms",
    "compression.gzip.level", "compression.lz4.level", "compression.zstd.level",
    "message.timestamp.before.max.ms", "message.timestamp.after.max.ms", "message.timestamp.difference.max.ms",
    "message.format.version", "message.downconversion.enable",
    "unclean.leader.election.enable", "leader.replication.throttled.replicas",
    "follower.replication.throttled.replicas",
    "local.retention.ms", "local.retention.bytes", "remote.storage.enable", "remote.log.copy.disable",
    "remote.log.delete.on.disable",
})


def topic_settings(ctx: Context, configs: Iterable[tuple[str, str | None]]) -> dict[str, Any]:
    """The fields of llog's topic definition that ``configs`` (``(name, value)``;
    value None: the default) set, by this module's rule; :class:`InvalidInput`, naming
    the config, for one the rule refuses."""
    fixed = {name: value for name, value, _, _ in topic_configs(ctx, None) if name not in ALTERABLE}
    fields: dict[str, Any] = {}
    for name, value in configs:
        if name in RETENTION:
            fields[RETENTION[name]] = _limit(name, value)
        elif name in DURATIONS:
            fields[DURATIONS[name]] = None if value is None else parse_duration(name, value)
        elif name == CLEANUP_POLICY:
            try:
                fields["cleanup_policy"] = parse_cleanup_policy(value)
            except InvalidInput as exc:
                raise InvalidInput(f"{CLEANUP_POLICY}={value!r}: {exc}") from None
        elif name in fixed:
            if value is not None and value != fixed[name]:
                raise InvalidInput(f"{name}={value!r}: {name} is {fixed[name]} for every llog topic (only "
                                   f"{', '.join(ALTERABLE)} are set per topic)")
        elif name not in NO_EFFECT:
            raise InvalidInput(f"unknown topic config {name!r}")
    return fields


def _limit(name: str, value: str | None) -> int | None:
    """A retention limit: a positive integer, or none for ``-1`` or no value."""
    if value is None:
        return None
    try:
        v = int(value)
    except ValueError:
        raise InvalidInput(f"{name}={value!r} is not an integer") from None
    if v == 0 or v < -1:
        raise InvalidInput(f"{name}={value}: give a positive limit, or -1 for none")
    return None if v == -1 else v
