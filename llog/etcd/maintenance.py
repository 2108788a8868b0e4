"""etcd maintenance over an :class:`~llog.etcd.client.Etcd` connection: history compaction and
whether a revision is still readable, defragmentation, alarms, per-member status.

Kept apart from :class:`~llog.etcd.client.Etcd` (the data path: reads, transactions, leases,
watches); it sends its RPCs through the same connection, metrics and failover.
"""

from __future__ import annotations

import functools
from typing import Any

from etcd3 import etcdrpc

from llog.errors import HistoryCompacted
from llog.etcd.client import Etcd
from llog.etcd.operations import range_request

#: Defragmenting rewrites a member's whole database file: give it longer than an RPC.
_MIN_DEFRAG_TIMEOUT_S = 120.0


class EtcdMaintenance:
    """Maintenance operations on the cluster behind ``etcd``."""

    def __init__(self, etcd: Etcd) -> None:
        self.etcd = etcd

    def readable_at(self, revision: int) -> bool:
        """Whether etcd still holds its history at ``revision`` (a read there works)."""
        etcd = self.etcd
        req = range_request("\0", None, 1, revision=revision, count_only=True)
        try:
            etcd._call(
                "range_at", lambda c, t: c.kvstub.Range(req, t, metadata=c.metadata),
                retry=True, revision=revision,
            )
        except HistoryCompacted:
            return False
        return True

    def compact(self, revision: int) -> bool:
        """Drop the history before ``revision`` (cluster-wide; returns once the member
        has applied it to its database). ``False``: history was already compacted at or
        past ``revision``."""
        etcd = self.etcd
        req = etcdrpc.CompactionRequest(revision=revision, physical=True)
        try:
            etcd._call(
                "compact", lambda c, t: c.kvstub.Compact(req, t, metadata=c.metadata),
                retry=False, revision=revision,
            )
        except HistoryCompacted:
            return False
        return True

    def member_statuses(self) -> list[dict[str, int | str]]:
        """Per configured endpoint: its revision, DB size, member id, leader and
        version (a member that does not answer raises :class:`CoordinationError`)."""
        etcd = self.etcd
        out: list[dict[str, int | str]] = []
        for ep in etcd.endpoints:
            resp = etcd.on_member(
                ep, "status",
                lambda c: c.maintenancestub.Status(etcdrpc.StatusRequest(), etcd.timeout, metadata=c.metadata),
            )
            out.append({
                "endpoint": ep, "revision": int(resp.header.revision), "db_size": int(resp.dbSize),
                "member_id": int(resp.header.member_id), "leader": int(resp.leader), "version": resp.version,
            })
        return out

    def defragment(self) -> list[str]:
        """Defragment the member behind each configured endpoint, one after the other
        (a member serves nothing while it rewrites its database, so never all at
        once). This is what returns compacted space to the file system and lowers the
        DB size the space quota counts. Returns the endpoints done."""
        etcd = self.etcd
        timeout = max(etcd.timeout, _MIN_DEFRAG_TIMEOUT_S)
        for ep in etcd.endpoints:
            etcd.on_member(
                ep, "defragment",
                lambda c: c.maintenancestub.Defragment(etcdrpc.DefragmentRequest(), timeout, metadata=c.metadata),
            )
        return list(etcd.endpoints)

    def alarms(self) -> list[tuple[int, str]]:
        """The cluster's raised alarms: ``(member id, "NOSPACE" | "CORRUPT" | ...)``."""
        req = etcdrpc.AlarmRequest(action=etcdrpc.AlarmRequest.GET, memberID=0, alarm=etcdrpc.NONE)
        resp = self.etcd._call("alarm", functools.partial(self._alarm, req), retry=True)
        return [(int(a.memberID), etcdrpc.AlarmType.Name(a.alarm)) for a in resp.alarms]

    def disarm(self) -> list[tuple[int, str]]:
        """Clear every raised alarm (after freeing space: a NOSPACE alarm stays raised,
        and refuses writes, until disarmed). Returns the alarms cleared."""
        raised = self.alarms()
        for member, name in raised:
            req = etcdrpc.AlarmRequest(
                action=etcdrpc.AlarmRequest.DEACTIVATE, memberID=member, alarm=etcdrpc.AlarmType.Value(name)
            )
            self.etcd._call("alarm", functools.partial(self._alarm, req), retry=False)
        return raised

    @staticmethod
    def _alarm(req: Any, c: Any, deadline: float) -> Any:
        return c.maintenancestub.Alarm(req, deadline, metadata=c.metadata)
