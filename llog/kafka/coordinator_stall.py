"""What a group coordinator does after its broker was paused or starved of CPU: it
judges nobody by its own clock, and keeps what etcd still backs."""

from __future__ import annotations

import asyncio
import logging
import time

from llog.connection import Connection
from llog.groups.epoch import current_epoch
from llog.kafka.errors import ErrorCode
from llog.kafka.group_state import Group, drop

log = logging.getLogger(__name__)


async def check_after_stall(conn: Connection, groups: dict[str, Group], late_s: float) -> None:
    """The coordinator was paused or starved of CPU for ``late_s`` seconds, so its
    members could not reach it: a group whose epoch in etcd is still the one it
    holds is kept, every member and pending member id judged from now (as a
    coordinator taking over does), with its joins and syncs still waiting; a group
    another coordinator moved on meanwhile is let go (its members find that one).
    If etcd cannot tell, every group is let go and read back from etcd when its
    members ask (:meth:`llog.kafka.coordinator.Coordinator.carry_on`). Forgetting
    what etcd still backs made a stall of a few seconds under load a rebalance, or an
    ``UNKNOWN_MEMBER_ID`` for a member half-way through joining."""
    held = {gid: g.epoch for gid, g in groups.items()}
    metrics = conn.metrics
    try:
        current = await asyncio.to_thread(lambda: {gid: current_epoch(conn, gid) for gid in held})
    except Exception as exc:  # etcd unreachable or a bad value: nothing to keep a group by
        log.warning("Kafka coordinator was paused or stalled for %.1f s and cannot read its groups' epochs "
                    "(%s): letting %d group(s) go, read back from etcd when their members ask", late_s, exc,
                    len(groups))
        metrics.kafka_coordinator_stall_groups.labels("let_go").inc(len(groups))
        for dropped in groups.values():
            drop(dropped, ErrorCode.NOT_COORDINATOR)
        groups.clear()
        metrics.kafka_coordinator_stalls.inc()
        return
    now, kept, let_go = time.monotonic(), 0, 0
    for gid, epoch in current.items():
        g = groups.get(gid)
        if g is None or g.epoch != held[gid]:  # gone, or a rebalance here completed meanwhile: current
            continue
        if epoch != g.epoch:
            log.info("group %s: moved on to epoch %s while this coordinator was stalled: let go", gid,
                     None if epoch is None else epoch.epoch)
            drop(g, ErrorCode.NOT_COORDINATOR)
            del groups[gid]
            let_go += 1
            continue
        for m in g.members.values():
            m.last_seen = now
        g.pending = {mid: until + late_s for mid, until in g.pending.items()}
        kept += 1
    log.warning("Kafka coordinator was paused or stalled for %.1f s: kept %d group(s) etcd still backs, let "
                "%d go", late_s, kept, let_go)
    metrics.kafka_coordinator_stall_groups.labels("kept").inc(kept)
    metrics.kafka_coordinator_stall_groups.labels("let_go").inc(let_go)
    metrics.kafka_coordinator_stalls.inc()

