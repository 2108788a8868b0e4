"""The classic consumer-group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup):
one broker coordinates a group (FindCoordinator names it by rendezvous hashing over
the live brokers) and keeps its members, generation and assignments in memory; the
clients run their own assignors, as with Apache Kafka.

What survives the coordinator is in etcd: each completed rebalance bumps the group's
epoch (llog's exclusive-consumer epoch, :mod:`llog.groups.epoch`) and the epoch is the
generation id, so a commit carries its generation as a fence; and the completed
generation itself is kept (:mod:`llog.kafka.group_generations`). When the coordinator
dies or pauses, the members find the next one, which carries the generation on while
it is still the epoch; a rebalance there bumps the epoch again, and every commit of an
older generation (a member that missed the rebalance, or the old coordinator waking
from a pause) is refused by etcd, not by anyone's clock.

All state is touched on the event loop only; etcd is reached on worker threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid

from llog.codec.etcd_values.groups import GroupEpoch, GroupGeneration
from llog.connection import Connection
from llog.groups.epoch import bump_epoch
from llog.kafka import group_generations
from llog.kafka.coordinator_stall import check_after_stall
from llog.kafka.errors import ErrorCode
from llog.kafka.group_state import Group, GroupError, JoinResult, Member, State, drop, fail_waits

log = logging.getLogger(__name__)

#: How long the first rebalance of an empty group waits for more members to join,
#: so members starting together get one rebalance, not one each (Kafka's
#: ``group.initial.rebalance.delay.ms``, shorter).
INITIAL_REBALANCE_DELAY_S = 0.5
#: The member-expiry tick; a tick this much later than due means this broker was
#: paused or starved of CPU: it checks its groups against etcd (:mod:`llog.kafka.coordinator_stall`).
EXPIRY_TICK_S = 0.5
PAUSED_S = 3.0
MIN_SESSION_TIMEOUT_MS = 1_000
MAX_SESSION_TIMEOUT_MS = 300_000


class Coordinator:
    """The groups this broker coordinates."""

    def __init__(self, conn: Connection, owner: str) -> None:
        self._conn = conn
        self._owner = owner  # written into the epoch key: who started the generation
        self._groups: dict[str, Group] = {}
        self._expiry: asyncio.Task[None] | None = None
        self._saving: set[asyncio.Future[None]] = set()

    def start(self) -> None:
        self._expiry = asyncio.create_task(self._expire_members())

    async def close(self) -> None:
        tasks = [g.completion for g in self._groups.values() if g.completion is not None]
        if self._expiry is not None:
            tasks.append(self._expiry)
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t

    def group(self, group_id: str) -> Group | None:
        return self._groups.get(group_id)

    def groups(self) -> list[Group]:
        """Every group this broker coordinates, by id."""
        return [self._groups[k] for k in sorted(self._groups)]

    async def join(
        self, group_id: str, member_id: str, group_instance_id: str | None, protocol_type: str,
        protocols: list[tuple[str, bytes]], session_timeout_ms: int, rebalance_timeout_ms: int,
        client_id: str, require_known_member_id: bool,
    ) -> JoinResult:
        if not MIN_SESSION_TIMEOUT_MS <= session_timeout_ms <= MAX_SESSION_TIMEOUT_MS:
            raise GroupError(ErrorCode.INVALID_SESSION_TIMEOUT)
        g = self._groups.setdefault(group_id, Group(group_id))
        if g.protocol_type is not None and g.members and protocol_type != g.protocol_type:
            raise GroupError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if not protocols:
            raise GroupError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if not member_id:
            member_id = f"{client_id or 'member'}-{uuid.uuid4()}"
            if require_known_member_id:  # KIP-394: the client joins again with this id
                g.pending[member_id] = time.monotonic() + session_timeout_ms / 1000
                raise GroupError(ErrorCode.MEMBER_ID_REQUIRED, member_id)
        elif member_id not in g.members and g.pending.pop(member_id, None) is None:
            raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID)
        rebalance_s = (rebalance_timeout_ms if rebalance_timeout_ms > 0 else session_timeout_ms) / 1000
        m = g.members.get(member_id)
        if m is None:
            m = Member(member_id, group_instance_id, session_timeout_ms / 1000, rebalance_s, protocols,
                       client_id=client_id)
            g.members[member_id] = m
        else:
            m.protocols, m.session_timeout_s, m.rebalance_timeout_s = protocols, session_timeout_ms / 1000, rebalance_s
        m.last_seen = time.monotonic()
        g.protocol_type = protocol_type
        if m.joining is not None and not m.joining.done():  # a rejoin replaces the earlier request
            m.joining.set_exception(GroupError(ErrorCode.REBALANCE_IN_PROGRESS))
        m.joining = asyncio.get_running_loop().create_future()
        self._prepare(g)
        self._maybe_complete(g)
        return await m.joining

    async def sync(self, group_id: str, member_id: str, generation: int, assignments: dict[str, bytes]) -> bytes:
        g, m = self._member(group_id, member_id)
        if generation != g.generation:
            raise GroupError(ErrorCode.ILLEGAL_GENERATION)
        if g.state is State.PREPARING:
            raise GroupError(ErrorCode.REBALANCE_IN_PROGRESS)
        if g.state is State.STABLE:
            return m.assignment
        m.last_seen = time.monotonic()
        if member_id == g.leader:
            for mid, member in g.members.items():
                member.assignment = assignments.get(mid, b"")
            g.state = State.STABLE
            self._keep(g)
            for member in g.members.values():
                if member.syncing is not None and not member.syncing.done():
                    member.syncing.set_result(member.assignment)
            return m.assignment
        m.syncing = asyncio.get_running_loop().create_future()
        return await m.syncing

    def _keep(self, g: Group) -> None:
        """Write the generation just completed to etcd, off the event loop."""
        assert g.epoch is not None and g.protocol_type is not None and g.protocol is not None and g.leader
        kept = GroupGeneration(g.epoch.epoch, g.protocol_type, g.protocol, g.leader, tuple(
            group_generations.member_record(m.member_id, m.group_instance_id, m.client_id, m.session_timeout_s,
                                            m.rebalance_timeout_s, m.protocols, m.assignment)
            for m in g.members.values()))
        task = asyncio.get_running_loop().run_in_executor(None, group_generations.save, self._conn, g.group_id, kept)
        self._saving.add(task)
        task.add_done_callback(self._saving.discard)

    async def carry_on(self, group_id: str, member_id: str, generation: int) -> None:
        """Before a member's heartbeat or commit: if this coordinator does not know the
        member at that generation (coordination moved here, or this broker was paused),
        take the group's generation from etcd when it is still current
        (:mod:`llog.kafka.group_generations`), so the member carries on without a
        rebalance. Otherwise the request gets its usual answer."""
        g = self._groups.get(group_id)
        if generation < 0 or (g is not None and (g.state in (State.PREPARING, State.COMPLETING)
                                                 or (member_id in g.members and g.generation == generation))):
            return
        try:
            got = await asyncio.to_thread(group_generations.load, self._conn, group_id, generation, member_id)
        except Exception as exc:  # etcd unreachable or a bad value: the member rejoins
            log.warning("group %s: could not read its kept generation: %s", group_id, exc)
            return
        g = self._groups.get(group_id)  # it may have changed meanwhile
        if got is None:
            return
        kept, epoch = got
        if g is not None and (g.state in (State.PREPARING, State.COMPLETING) or g.generation > kept.epoch
                              or member_id in g.members):
            return
        if g is not None:
            drop(g, ErrorCode.REBALANCE_IN_PROGRESS)
        now = time.monotonic()
        self._groups[group_id] = Group(
            group_id, State.STABLE, kept.protocol_type, kept.protocol, kept.leader, epoch,
            {m.member_id: Member(m.member_id, m.group_instance_id, m.session_timeout_ms / 1000,
                                 m.rebalance_timeout_ms / 1000, list(m.protocols), last_seen=now,
                                 assignment=m.assignment, client_id=m.client_id) for m in kept.members})
        log.info("group %s: generation %d carried on from etcd with %d members", group_id, kept.epoch,
                 len(kept.members))

    def heartbeat(self, group_id: str, member_id: str, generation: int) -> None:
        g, m = self._member(group_id, member_id)
        m.last_seen = time.monotonic()
        if g.state is State.PREPARING:
            raise GroupError(ErrorCode.REBALANCE_IN_PROGRESS)
        if generation != g.generation:
            raise GroupError(ErrorCode.ILLEGAL_GENERATION)

    def leave(self, group_id: str, member_id: str) -> None:
        g, _ = self._member(group_id, member_id)
        self._remove(g, member_id)

    def forget(self, group_id: str) -> bool:
        """Drop group ``group_id`` when it has no members (DeleteGroups); whether it
        was known here. A group with members is kept: :meth:`has_members` first."""
        g = self._groups.get(group_id)
        if g is None or g.members:
            return False
        drop(g, ErrorCode.GROUP_ID_NOT_FOUND)
        del self._groups[group_id]
        return True

    def has_members(self, group_id: str) -> bool:
        """Whether ``group_id`` has live members here (its coordinator)."""
        g = self._groups.get(group_id)
        return g is not None and bool(g.members)

    def check_commit(self, group_id: str, member_id: str, generation: int) -> GroupEpoch:
        """The epoch a commit by ``member_id`` of ``generation`` is fenced with."""
        g, m = self._member(group_id, member_id)
        if generation != g.generation or g.epoch is None:
            raise GroupError(ErrorCode.ILLEGAL_GENERATION)
        m.last_seen = time.monotonic()
        return g.epoch

    def _member(self, group_id: str, member_id: str) -> tuple[Group, Member]:
        g = self._groups.get(group_id)
        m = None if g is None else g.members.get(member_id)
        if g is None or m is None:
            raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID)
        return g, m

    def _prepare(self, g: Group) -> None:
        """Start a rebalance, unless one is under way: members must join again."""
        if g.state is State.PREPARING:
            return
        g.initial = initial = g.state is State.EMPTY
        g.state = State.PREPARING
        for m in g.members.values():  # members waiting to sync must rejoin
            if m.syncing is not None and not m.syncing.done():
                m.syncing.set_exception(GroupError(ErrorCode.REBALANCE_IN_PROGRESS))
        timeout = max((m.rebalance_timeout_s for m in g.members.values()), default=1.0)
        if g.completion is not None:
            g.completion.cancel()
        g.completion = asyncio.create_task(self._complete_after(g, INITIAL_REBALANCE_DELAY_S if initial else timeout,
                                                                 initial))

    def _maybe_complete(self, g: Group) -> None:
        """Complete the rebalance now if every member has joined again (and the group
        is not in its initial delay)."""
        if g.state is not State.PREPARING or g.completion is None or g.initial:
            return
        if all(m.joining is not None and not m.joining.done() for m in g.members.values()):
            g.completion.cancel()
            g.completion = asyncio.create_task(self._complete_after(g, 0, False))

    async def _complete_after(self, g: Group, delay_s: float, initial: bool) -> None:
        await asyncio.sleep(delay_s)
        # Members that did not join again within the rebalance timeout are out.
        for mid in [mid for mid, m in g.members.items() if m.joining is None or m.joining.done()]:
            del g.members[mid]
        if not g.members:
            g.state, g.epoch, g.leader = State.EMPTY, g.epoch, None
            return
        try:
            g.epoch = await asyncio.to_thread(bump_epoch, self._conn, g.group_id, self._owner)
        except Exception as exc:  # etcd unreachable: the members retry their join
            log.warning("group %s: rebalance failed: %s", g.group_id, exc)
            for m in g.members.values():
                if m.joining is not None and not m.joining.done():
                    m.joining.set_exception(GroupError(ErrorCode.COORDINATOR_NOT_AVAILABLE))
            g.state = State.EMPTY if initial else State.STABLE
            return
        if g.leader not in g.members:
            g.leader = next(iter(g.members))
        try:
            g.protocol = self._choose_protocol(g)
        except GroupError as exc:
            for m in g.members.values():
                if m.joining is not None and not m.joining.done():
                    m.joining.set_exception(exc)
            g.members.clear()
            g.state, g.leader, g.completion = State.EMPTY, None, None
            return
        g.state = State.COMPLETING
        g.completion = None
        assert g.protocol_type is not None
        for mid, m in g.members.items():
            metadata = [(o.member_id, o.group_instance_id, dict(o.protocols)[g.protocol]) for o in g.members.values()]
            result = JoinResult(g.generation, g.protocol, g.protocol_type, g.leader, mid,
                                metadata if mid == g.leader else [])
            assert m.joining is not None
            if not m.joining.done():
                m.joining.set_result(result)
        log.info("group %s: generation %d with %d members", g.group_id, g.generation, len(g.members))

    @staticmethod
    def _choose_protocol(g: Group) -> str:
        """The leader's first protocol that every member supports."""
        assert g.leader is not None
        common = set.intersection(*({name for name, _ in m.protocols} for m in g.members.values()))
        for name, _ in g.members[g.leader].protocols:
            if name in common:
                return name
        raise GroupError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)

    def _remove(self, g: Group, member_id: str) -> None:
        m = g.members.pop(member_id, None)
        if m is None:
            return
        fail_waits(m, ErrorCode.UNKNOWN_MEMBER_ID)
        if g.members:
            self._prepare(g)
            self._maybe_complete(g)
        else:
            if g.completion is not None:
                g.completion.cancel()
                g.completion = None
            g.state, g.leader = State.EMPTY, None

    async def _expire_members(self) -> None:
        """Members that stopped heartbeating past their session timeout leave; after a
        pause or stall of this broker, nothing is judged by its clock
        (:func:`llog.kafka.coordinator_stall.check_after_stall`)."""
        last = time.monotonic()
        while True:
            await asyncio.sleep(EXPIRY_TICK_S)
            now = time.monotonic()
            late, last = now - last - EXPIRY_TICK_S, now
            if late > PAUSED_S:
                await check_after_stall(self._conn, self._groups, late)
                last = time.monotonic()
                continue
            for g in list(self._groups.values()):
                for mid in [mid for mid, until in g.pending.items() if until < now]:
                    del g.pending[mid]
                for mid, m in list(g.members.items()):
                    waiting = m.joining is not None and not m.joining.done()
                    if not waiting and now - m.last_seen > m.session_timeout_s:
                        log.info("group %s: member %s timed out", g.group_id, mid)
                        self._remove(g, mid)
