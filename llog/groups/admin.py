"""Operator views of a group: describe (members, epoch, committed offsets and lag per
partition, owners) and reset (move committed offsets, e.g. to replay)."""

from __future__ import annotations

from dataclasses import dataclass

from llog.connection import Connection
from llog.errors import GroupNotEmpty, InvalidInput
from llog.groups.epoch import current_epoch
from llog.groups.offsets import Committed, GroupOffsets
from llog.names import TopicPartition, check_group
from llog.reader import Reader
from llog.state.control import read_control
from llog.state.keys import prefix_range_end
from llog.topic.time_lookup import offset_for_timestamp


@dataclass(frozen=True)
class PartitionLag:
    topic: str
    partition: int
    committed: int | None
    log_start_offset: int
    next_offset: int
    owner: str | None

    @property
    def lag(self) -> int:
        """Records not yet committed by the group (from the log start when nothing is)."""
        base = self.log_start_offset if self.committed is None else max(self.committed, self.log_start_offset)
        return max(0, self.next_offset - base)


@dataclass(frozen=True)
class GroupDescription:
    group: str
    members: tuple[str, ...]
    epoch: int | None
    epoch_owner: str | None
    partitions: tuple[PartitionLag, ...]

    @property
    def total_lag(self) -> int:
        return sum(p.lag for p in self.partitions)


def describe_group(conn: Connection, group: str, topics: list[str] | None = None) -> GroupDescription:
    """The group's state. ``topics`` adds partitions with nothing committed yet."""
    group = check_group(group)
    keys, etcd = conn.keys, conn.etcd
    committed = {(c.topic, c.partition): c for c in GroupOffsets(conn, group).all()}
    owner_prefix = keys.group_owner_prefix(group)
    owners: dict[TopicPartition, str] = {}
    for kv in etcd.scan(owner_prefix, prefix_range_end(owner_prefix)):
        topic, _, part = kv.key[len(owner_prefix) :].rpartition("/")
        owners[(topic, int(part))] = kv.value.decode()
    members = live_members(conn, group)
    tps = set(committed) | set(owners)
    for t in topics or ():
        tps.update((t, p) for p in range(conn.topic(t).partitions))
    rows = []
    for topic, partition in sorted(tps):
        ctl = read_control(conn, topic, partition).control
        c = committed.get((topic, partition))
        rows.append(PartitionLag(
            topic, partition, None if c is None else c.offset, ctl.log_start_offset, ctl.next_offset,
            owners.get((topic, partition)),
        ))
    epoch = current_epoch(conn, group)
    return GroupDescription(
        group, members, None if epoch is None else epoch.epoch, None if epoch is None else epoch.owner, tuple(rows)
    )


def reset_offsets(
    conn: Connection,
    group: str,
    topic: str,
    *,
    to: str,
    partitions: list[int] | None = None,
) -> list[Committed]:
    """Move the group's committed offsets for ``topic`` to ``earliest``, ``latest``, an
    offset (``"42"``) or a timestamp (``"ts:1700000000000"``): an explicit reset, so
    moving backwards is allowed. Running members keep their in-memory positions; stop
    them first."""
    offsets = GroupOffsets(conn, group)
    count = conn.topic(topic).partitions
    out = []
    with Reader(conn) as reader:
        for p in partitions if partitions is not None else range(count):
            low, high = reader.high_watermark(topic, p)
            if to == "earliest":
                target = low
            elif to == "latest":
                target = high
            elif to.startswith("ts:"):
                try:
                    ts = int(to[3:])
                except ValueError:
                    raise InvalidInput(f"bad timestamp in {to!r}") from None
                found = offset_for_timestamp(reader, topic, p, ts)
                target = high if found is None else found
            else:
                try:
                    target = int(to)
                except ValueError:
                    raise InvalidInput(
                        f"reset target must be earliest, latest, an offset or ts:MS, got {to!r}"
                    ) from None
            out.append(offsets.commit(topic, p, target, member="reset", reset=True))
    return out


def live_members(conn: Connection, group: str) -> tuple[str, ...]:
    """The ids of the group's members whose session is alive (SDK consumers; a Kafka
    group's members live in its coordinator, which refuses its own deletions)."""
    prefix = conn.keys.group_member_prefix(check_group(group))
    return tuple(sorted(k[len(prefix):] for k in conn.etcd.keys(prefix, prefix_range_end(prefix))))


def delete_group(conn: Connection, group: str) -> int:
    """Forget the group (Kafka's DeleteGroups): its offsets, epoch and ownerships; the
    number of keys deleted (0: there was no such group). :class:`GroupNotEmpty` while
    it has live members."""
    _refuse_if_live(conn, group)
    return GroupOffsets(conn, group).delete()


def delete_offsets(conn: Connection, group: str, topic: str, partitions: list[int] | None = None) -> list[int]:
    """Forget the group's committed offsets for ``topic`` (Kafka's OffsetDelete), all its
    partitions or ``partitions``; the partitions that had one. :class:`GroupNotEmpty`
    while the group has live members."""
    _refuse_if_live(conn, group)
    offsets = GroupOffsets(conn, group)
    count = conn.topic(topic).partitions
    for p in partitions or ():
        conn.check_partition(topic, p)
    return [p for p in (partitions if partitions is not None else range(count)) if offsets.delete_offset(topic, p)]


def _refuse_if_live(conn: Connection, group: str) -> None:
    members = live_members(conn, group)
    if members:
        raise GroupNotEmpty(group, members)
