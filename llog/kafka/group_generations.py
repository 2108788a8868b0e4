"""A Kafka consumer group's completed generation, kept in etcd so coordination can
move without a rebalance.

A coordinator keeps its groups in memory. When it stops answering, FindCoordinator
names another broker, and every member would have to join again there: a rebalance in
which every member gives up its partitions, at whatever moment each member notices.
Instead the coordinator writes each generation it completes to
``{root}/_groups/{group}/kafka-generation`` (:class:`GroupGeneration`), and the next
coordinator, asked by a member it does not know (a heartbeat or a commit of that
generation), carries the generation on as long as it is still the group's epoch: the
members keep their partitions. A member that really died leaves after its session
timeout, as it would have with the old coordinator. A coordinator that was paused
itself keeps only the groups whose epoch is unchanged (:mod:`llog.kafka.coordinator_stall`)
and reads the others back the same way, since they moved on without it.
"""

from __future__ import annotations

import logging

from llog.codec.etcd_values.groups import GroupEpoch, GroupGeneration, GroupMember
from llog.connection import Connection
from llog.groups.epoch import current_epoch

log = logging.getLogger(__name__)

#: A generation larger than this is not written (etcd's request limit is 1.5 MiB):
#: that group rebalances when its coordinator moves, as before.
MAX_BYTES = 512 * 1024


def save(conn: Connection, group_id: str, generation: GroupGeneration) -> None:
    """Write ``generation`` (best effort: a coordinator that cannot is still right,
    only a later move costs a rebalance)."""
    data = generation.encode()
    if len(data) > MAX_BYTES:
        log.info("group %s: generation %d is %d bytes, not kept in etcd", group_id, generation.epoch, len(data))
        return
    try:
        conn.etcd.put(conn.keys.group_generation(group_id), data)
    except Exception as exc:  # etcd unreachable: only the carry-over is lost
        log.warning("group %s: could not keep generation %d in etcd: %s", group_id, generation.epoch, exc)


def load(conn: Connection, group_id: str, generation: int,
         member_id: str) -> tuple[GroupGeneration, GroupEpoch] | None:
    """The kept generation and the group's epoch (commits are fenced with its exact
    bytes), if the generation is ``generation``, still the group's epoch, and has
    ``member_id``."""
    kv = conn.etcd.get(conn.keys.group_generation(group_id))
    if kv is None:
        return None
    kept = GroupGeneration.decode(kv.value)
    epoch = current_epoch(conn, group_id)
    if kept.epoch != generation or epoch is None or epoch.epoch != kept.epoch:
        return None
    return (kept, epoch) if any(m.member_id == member_id for m in kept.members) else None


def member_record(member_id: str, group_instance_id: str | None, client_id: str, session_timeout_s: float,
                  rebalance_timeout_s: float, protocols: list[tuple[str, bytes]], assignment: bytes) -> GroupMember:
    return GroupMember(member_id, group_instance_id, client_id, round(session_timeout_s * 1000),
                       round(rebalance_timeout_s * 1000), tuple(protocols), assignment)
