"""A consumer group as its coordinator holds it in memory: its state, generation,
members (each with the JoinGroup or SyncGroup it is waiting on) and the member ids
handed out and not joined yet; the error a group request is refused with."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from enum import Enum

from llog.codec.etcd_values.groups import GroupEpoch
from llog.kafka.errors import ErrorCode


class GroupError(Exception):
    """A group request refused with ``code``."""

    def __init__(self, code: ErrorCode, member_id: str = "") -> None:
        super().__init__(code.name)
        self.code = code
        self.member_id = member_id


class State(Enum):
    EMPTY = "Empty"
    PREPARING = "PreparingRebalance"
    COMPLETING = "CompletingRebalance"
    STABLE = "Stable"


@dataclass(frozen=True)
class JoinResult:
    generation: int
    protocol: str
    protocol_type: str
    leader: str
    member_id: str
    #: ``(member id, group instance id, metadata)`` for the leader; empty for the others.
    members: list[tuple[str, str | None, bytes]]


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    session_timeout_s: float
    rebalance_timeout_s: float
    protocols: list[tuple[str, bytes]]
    last_seen: float = field(default_factory=time.monotonic)
    joining: asyncio.Future[JoinResult] | None = None
    syncing: asyncio.Future[bytes] | None = None
    assignment: bytes = b""
    client_id: str = ""


@dataclass
class Group:
    group_id: str
    state: State = State.EMPTY
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    epoch: GroupEpoch | None = None  # the generation's epoch in etcd
    members: dict[str, Member] = field(default_factory=dict)
    completion: asyncio.Task[None] | None = None
    #: The rebalance under way is the first of an empty group: it waits its delay.
    initial: bool = False
    #: Member ids handed out with MEMBER_ID_REQUIRED, not joined yet, and until when
    #: (monotonic) a join with one is accepted.
    pending: dict[str, float] = field(default_factory=dict)

    @property
    def generation(self) -> int:
        return -1 if self.epoch is None else self.epoch.epoch




def fail_waits(m: Member, code: ErrorCode) -> None:
    """Answer ``m``'s JoinGroup or SyncGroup still waiting with ``code``."""
    for fut in (m.joining, m.syncing):
        if fut is not None and not fut.done():
            fut.set_exception(GroupError(code))


def drop(g: Group, code: ErrorCode) -> None:
    """Fail whatever ``g``'s members wait for: its coordinator lets it go."""
    if g.completion is not None:
        g.completion.cancel()
    for m in g.members.values():
        fail_waits(m, code)
