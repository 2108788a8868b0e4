"""Group membership on etcd leases, with exclusive partition ownership.

Each member holds a lease and a member key bound to it. The desired assignment is a
pure function of the sorted live member ids and the sorted partitions
(:func:`range_assign`), so every member computes the same one. Ownership itself is an
``owners/{topic}/{partition}`` key holding the member id, bound to the owner's lease
and created only if absent: a partition moves only after its old owner deletes the key
(after committing) or its lease expires, so two live members never own one partition
at once. A member session is its id *and* its lease (:class:`~llog.groups.owner.Owner`):
every ownership check compares both, so a session that expired owns nothing even when a
new session of the same member id took its partitions again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence

from llog.connection import Connection
from llog.errors import CoordinationError
from llog.etcd.operations import Delete, Put, absent, lease_is, value_is
from llog.groups.owner import Owner
from llog.names import TopicPartition
from llog.state.keys import prefix_range_end

log = logging.getLogger(__name__)


def range_assign(
    members: Sequence[str], partitions: Iterable[TopicPartition]
) -> dict[str, set[TopicPartition]]:
    """Kafka's range assignment: per topic, contiguous runs of partitions go to the
    members in sorted order, the first ``n % m`` members taking one extra."""
    ms = sorted(members)
    out: dict[str, set[TopicPartition]] = {m: set() for m in ms}
    if not ms:
        return out
    by_topic: dict[str, list[int]] = {}
    for t, p in partitions:
        by_topic.setdefault(t, []).append(p)
    for t, ps in by_topic.items():
        ps.sort()
        per, extra = divmod(len(ps), len(ms))
        i = 0
        for k, m in enumerate(ms):
            take = per + (1 if k < extra else 0)
            out[m].update((t, p) for p in ps[i : i + take])
            i += take
    return out


class Membership:
    """One member of a group: join, keep the lease alive, own partitions, leave."""

    def __init__(self, conn: Connection, group: str, member_id: str, *, ttl_s: int = 10) -> None:
        self.conn = conn
        self.group = group
        self.member_id = member_id
        self.ttl_s = max(2, int(ttl_s))
        self.lease = 0
        self.owned: set[TopicPartition] = set()
        self._stop = threading.Event()
        self._lost = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def lost(self) -> bool:
        """The lease expired (e.g. a long pause): every ownership is gone; rejoin."""
        return self._lost.is_set()

    @property
    def token(self) -> Owner:
        """This session's ownership token: what a commit must prove (the lease is 0
        before :meth:`join` and after :meth:`leave`, and owns nothing)."""
        return Owner(self.member_id, self.lease)

    def join(self) -> None:
        keys = self.conn.keys
        self.lease = self.conn.etcd.grant_lease(self.ttl_s)
        self.conn.etcd.put(keys.group_member(self.group, self.member_id), b"", lease=self.lease)
        self._lost.clear()
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._keepalive, name=f"llog-member-{self.member_id}", daemon=True
        )
        self._thread.start()

    def _keepalive(self) -> None:
        interval = self.ttl_s / 3
        while not self._stop.wait(interval):
            try:
                if self.conn.etcd.refresh_lease(self.lease) <= 0:
                    log.warning("member %s of %s lost its lease", self.member_id, self.group)
                    self._lost.set()
                    return
            except CoordinationError as exc:
                log.warning("lease keep-alive for %s failed: %s", self.member_id, exc)

    def members(self) -> list[str]:
        prefix = self.conn.keys.group_member_prefix(self.group)
        return sorted(
            k[len(prefix) :] for k in self.conn.etcd.keys(prefix, prefix_range_end(prefix))
        )

    def sync(
        self,
        partitions: Iterable[TopicPartition],
        on_revoke: Callable[[set[TopicPartition]], None],
    ) -> set[TopicPartition]:
        """Move toward this member's share of ``partitions``: hand back what is no
        longer ours (``on_revoke`` first, to commit), take what is free. Returns what
        this member owns now."""
        keys, etcd = self.conn.keys, self.conn.etcd
        desired = range_assign(self.members(), partitions).get(self.member_id, set())
        # Drop what we believe we own but do not (lease expired, key deleted by hand).
        token = self.token
        prefix = keys.group_owner_prefix(self.group)
        held = {kv.key for kv in etcd.scan(prefix, prefix_range_end(prefix)) if token.holds(kv)}
        self.owned = {tp for tp in self.owned if keys.group_owner(self.group, *tp) in held}
        release = self.owned - desired
        if release:
            on_revoke(release)
            for tp in release:
                key = keys.group_owner(self.group, *tp)
                etcd.txn([value_is(key, self.member_id.encode()), lease_is(key, self.lease)], [Delete(key)])
            self.owned -= release
        for tp in sorted(desired - self.owned):
            key = keys.group_owner(self.group, *tp)
            r = etcd.txn([absent(key)], [Put(key, self.member_id.encode(), lease=self.lease)])
            if r.succeeded:
                self.owned.add(tp)
        return set(self.owned)

    def leave(self, on_revoke: Callable[[set[TopicPartition]], None] | None = None) -> None:
        """Commit (via ``on_revoke``), release ownership and the lease, stop the thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        try:
            if on_revoke is not None and self.owned:
                on_revoke(set(self.owned))
        finally:
            self.owned.clear()
            if self.lease:
                # Revoking deletes the member key and every owner key bound to it.
                self.conn.etcd.revoke_lease(self.lease)
                self.lease = 0
