"""Committed offsets per (group, topic, partition), written with compare-and-swap.

A commit is refused (and changes nothing) when it would move the offset backwards
without ``reset=True`` (:class:`BackwardsCommit`), point past the partition's next
offset (:class:`CommitOutOfRange`), carry a stale exclusive-consumer epoch
(:class:`StaleEpoch`) or come from a member session that does not own the partition
(:class:`NotAssigned`). Ownership is proved by the member id *and* the lease of the
session that took the partition: the owner key must hold the id and be bound to that
lease, so a session that expired cannot commit even after a new session of the same
member id took the partition again. The guards ride in the same etcd transaction as
the write.
"""

from __future__ import annotations

from dataclasses import dataclass

from llog.codec.etcd_values.groups import GroupEpoch, GroupOffset
from llog.codec.etcd_values.maps import MetaFormatError
from llog.connection import Connection
from llog.errors import (
    BackwardsCommit,
    CasConflict,
    CommitOutOfRange,
    CorruptMetadata,
    InvalidInput,
    NotAssigned,
    StaleEpoch,
)
from llog.etcd.operations import KV, Compare, Get, Put, lease_is, mod_revision_is, value_is
from llog.groups.owner import Owner, describe_owner
from llog.names import check_group, check_partition, check_topic
from llog.state.control import now_ms, read_control
from llog.state.keys import prefix_range_end
from llog.topic.guard import TopicGuard


@dataclass(frozen=True)
class Committed:
    topic: str
    partition: int
    offset: int
    epoch: int
    member: str
    updated_at_ms: int


def _decode_offset(kv: KV) -> GroupOffset:
    try:
        return GroupOffset.decode(kv.value)
    except MetaFormatError as exc:
        raise CorruptMetadata(kv.key, str(exc)) from exc


def decode_epoch(kv: KV) -> GroupEpoch:
    try:
        return GroupEpoch.decode(kv.value)
    except MetaFormatError as exc:
        raise CorruptMetadata(kv.key, str(exc)) from exc


@dataclass(frozen=True)
class Fence:
    """What a commit must prove: the exclusive epoch it runs under (the exact bytes of
    the epoch key) and/or the member session that must own the partition."""

    epoch: GroupEpoch | None = None
    owner: Owner | None = None


def _fence_guards(fence: Fence, epoch_key: str, owner_key: str) -> list[Compare]:
    """The compares that make a commit transaction fail unless ``fence`` still holds."""
    guards: list[Compare] = []
    if fence.epoch is not None:
        guards.append(value_is(epoch_key, fence.epoch.encode()))
    if fence.owner is not None:
        guards.append(value_is(owner_key, fence.owner.member.encode()))
        if fence.owner.lease is not None:
            guards.append(lease_is(owner_key, fence.owner.lease))
    return guards


class GroupOffsets:
    """Read and commit one group's offsets."""

    def __init__(self, conn: Connection, group: str) -> None:
        self.conn = conn
        self.group = check_group(group)

    def get(self, topic: str, partition: int) -> Committed | None:
        kv = self.conn.etcd.get(self.conn.keys.group_offset(self.group, topic, partition))
        return None if kv is None else self._committed(topic, partition, kv)

    def all(self) -> list[Committed]:
        keys = self.conn.keys
        prefix = keys.group_offset_prefix(self.group)
        out = []
        for kv in self.conn.etcd.scan(prefix, prefix_range_end(prefix)):
            topic, _, part = kv.key[len(prefix) :].rpartition("/")
            out.append(self._committed(topic, int(part), kv))
        return out

    def _committed(self, topic: str, partition: int, kv: KV) -> Committed:
        g = _decode_offset(kv)
        return Committed(topic, partition, g.offset, g.epoch, g.member, g.updated_at_ms)

    def commit(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        fence: Fence = Fence(),
        member: str = "",
        reset: bool = False,
    ) -> Committed:
        """Set the committed offset (the next offset to consume) to ``offset``."""
        self._check_commit(topic, partition, offset, reset)
        keys, etcd = self.conn.keys, self.conn.etcd
        key = keys.group_offset(self.group, topic, partition)
        epoch_key = keys.group_epoch(self.group)
        owner_key = keys.group_owner(self.group, topic, partition)
        guards = _fence_guards(fence, epoch_key, owner_key)
        topic_guard = TopicGuard.of(self.conn, topic)  # no offset outlives its topic (spec §4.5)
        kv = etcd.get(key)
        for _ in range(self.conn.config.commit_max_attempts):
            current = None if kv is None else _decode_offset(kv)
            if current is not None and offset < current.offset and not reset:
                raise BackwardsCommit(
                    self.group, topic, partition, offset,
                    f"below the committed offset {current.offset} (use reset to move back)",
                )
            value = GroupOffset(
                offset,
                fence.epoch.epoch if fence.epoch else 0,
                member or (fence.owner.member if fence.owner else ""),
                now_ms(),
            )
            r = etcd.txn(
                [mod_revision_is(key, 0 if kv is None else kv.mod_revision), *guards, topic_guard.compare()],
                [Put(key, value.encode())],
                [Get(key), Get(epoch_key), Get(owner_key), topic_guard.read()],
            )
            if r.succeeded:
                return Committed(topic, partition, value.offset, value.epoch, value.member, value.updated_at_ms)
            got_offset, got_epoch, got_owner, got_topic = r.responses
            assert isinstance(got_offset, list) and isinstance(got_epoch, list)
            assert isinstance(got_owner, list) and isinstance(got_topic, list)
            topic_guard.check(self.conn, got_topic)
            self._raise_if_fenced(fence, topic, partition, offset, got_epoch, got_owner)
            kv = got_offset[0] if got_offset else None
        raise CasConflict(key, self.conn.config.commit_max_attempts)

    def _check_commit(self, topic: str, partition: int, offset: int, reset: bool) -> None:
        """Refuse a malformed offset or one outside the partition's log range."""
        check_topic(topic)
        check_partition(topic, partition)
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise InvalidInput(f"offset must be an int >= 0, got {offset!r}")
        self.conn.check_partition(topic, partition)
        ctl = read_control(self.conn, topic, partition).control
        if offset > ctl.next_offset:
            raise CommitOutOfRange(
                self.group, topic, partition, offset,
                f"past the partition's next offset {ctl.next_offset}",
            )
        if offset < ctl.log_start_offset and not reset:
            raise CommitOutOfRange(
                self.group, topic, partition, offset,
                f"below the partition's log start offset {ctl.log_start_offset}",
            )

    def _raise_if_fenced(
        self,
        fence: Fence,
        topic: str,
        partition: int,
        offset: int,
        got_epoch: list[KV],
        got_owner: list[KV],
    ) -> None:
        """Name the fence a failed commit transaction broke (stale epoch first, then
        ownership); return if neither did, i.e. only the offset CAS lost."""
        if fence.epoch is not None and (not got_epoch or got_epoch[0].value != fence.epoch.encode()):
            now = decode_epoch(got_epoch[0]).epoch if got_epoch else 0
            raise StaleEpoch(
                self.group, topic, partition, offset,
                f"epoch {fence.epoch.epoch} is stale (current epoch {now})",
            )
        owner_kv = got_owner[0] if got_owner else None
        if fence.owner is not None and not fence.owner.holds(owner_kv):
            raise NotAssigned(
                self.group, topic, partition, offset,
                f"member {fence.owner} does not own it (owner: {describe_owner(owner_kv)})",
            )

    def delete_offset(self, topic: str, partition: int) -> bool:
        """Forget the committed offset of ``topic/partition``; whether there was one."""
        return self.conn.etcd.delete_range(self.conn.keys.group_offset(self.group, topic, partition)) > 0

    def delete(self) -> int:
        """Forget the whole group (offsets, epoch, members, owners)."""
        prefix = self.conn.keys.group_prefix(self.group)
        return self.conn.etcd.delete_range(prefix, prefix_range_end(prefix))
