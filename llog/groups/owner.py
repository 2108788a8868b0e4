"""The ownership token of a member session: the member id and the etcd lease of the
session. Partition ownership (``owners/{topic}/{partition}``) belongs to a session, not
to a member id: a member that rejoins under the same id after its session expired is a
new session, and the old one's token owns nothing."""

from __future__ import annotations

from dataclasses import dataclass

from llog.etcd.operations import KV


@dataclass(frozen=True)
class Owner:
    """One member session: the member id and the etcd lease its ownerships are bound
    to. A rejoin of the same member id is a new session (a new lease)."""

    member: str
    #: ``None`` only for HTTP clients of the earlier API that name the member alone: any
    #: session of that member id then passes (the weaker, id-only fence).
    lease: int | None

    def holds(self, kv: KV | None) -> bool:
        """Whether ``kv`` (an owner key, or ``None`` when absent) is this session's."""
        return (kv is not None and kv.value == self.member.encode()
                and (self.lease is None or kv.lease == self.lease))

    def __str__(self) -> str:
        return f"{self.member!r}" if self.lease is None else f"{self.member!r} (lease {self.lease:x})"


def describe_owner(kv: KV | None) -> str:
    """Who holds an owner key, for error messages."""
    return "nobody" if kv is None else str(Owner(kv.value.decode(), kv.lease))
