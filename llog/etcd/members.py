"""An :class:`~llog.etcd.client.Etcd`'s members (:class:`Members`): which to try
next, which failed lately; and what a failed call proves — whether it may be sent
again (:func:`never_sent`), how long to wait before the next attempt
(:func:`failover_pause`), the typed error it becomes (:func:`rpc_error`)."""

from __future__ import annotations

import functools
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import grpc
from etcd3 import etcdrpc

from llog.errors import CoordinationError, EtcdSpaceExhausted, HistoryCompacted

#: The gRPC codes of a failed attempt that another attempt may not meet: the member did
#: not answer, or not in time.
RETRYABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}
#: How long :meth:`Members.pick` waits for the other members to answer when the one in
#: use failed: a live member answers within milliseconds, one cut off never does.
PROBE_S = 0.25


def rpc_error(op: str, exc: grpc.RpcError, revision: int = 0) -> CoordinationError:
    """The typed error for a failed etcd RPC (``revision``: the one it named, if any)."""
    code = exc.code() if hasattr(exc, "code") else None
    detail = str(exc.details() if hasattr(exc, "details") else exc)
    # etcd's ErrGRPCNoSpace: the quota check or the NOSPACE alarm refused a write
    # before it was applied, so the outcome is known: nothing changed.
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED and "space exceeded" in detail:
        return EtcdSpaceExhausted(op, detail)
    if code == grpc.StatusCode.OUT_OF_RANGE and "compacted" in detail:
        return HistoryCompacted(op, revision)
    return CoordinationError(f"etcd {op} failed: {code}: {detail}")


def never_sent(exc: grpc.RpcError) -> bool:
    """Whether a failed call provably never reached a member, so a write may be sent
    to another: no connection could be made, or the member had no leader (etcd refuses
    those before anything runs). A deadline, or a connection lost mid-call, proves
    nothing."""
    detail = str(exc.details() if hasattr(exc, "details") else exc)
    return exc.code() == grpc.StatusCode.UNAVAILABLE and (
        "failed to connect" in detail or "no leader" in detail or "Connection refused" in detail
    )


def failover_pause(attempt: int, members: int) -> float:
    """Seconds to wait after failed attempt number ``attempt`` of a call. One member: a
    short pause (0.05, 0.1, 0.2, ... s) so a read outlasts its restart; several: none,
    the next member at once, but the same pause (at most 0.5 s) once each has failed
    this call, as during an election, when every member answers "no leader" at once:
    spinning would take the CPU the election needs."""
    if attempt % members:
        return 0.0
    pause: float = 0.05 * 2.0 ** (attempt // members - 1)
    return pause if members == 1 else min(pause, 0.5)


@dataclass(eq=False)
class Member:
    """One etcd member and the client that talks to it only."""

    endpoint: str
    client: Any
    #: Until when (``time.monotonic``) the member is passed over after failing.
    suspect_until: float = 0.0
    #: With etcd users: which token the client holds (0: none yet; :class:`~llog.etcd.auth.Tokens`).
    token: int = 0
    token_lock: threading.Lock = field(default_factory=threading.Lock)


class Members:
    """An :class:`~llog.etcd.client.Etcd`'s members: which to try next, which failed lately."""

    def __init__(self, members: list[Member], suspect_s: float, first: int | None = None) -> None:
        self.all = members
        self._suspect_s = suspect_s
        # Unless told, each client starts on a member of its own, so one member's pause
        # stalls a share of the clients, not all of them at once.
        self._preferred = random.randrange(len(members)) if first is None else first
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.all)

    def pick(self) -> Member:
        """The one that last worked unless it is suspect, else another that is not: the
        first of them to answer a probe (:meth:`_first_to_answer`), or one at random,
        so clients leaving one member, or coming back after every member failed, spread
        over the members instead of all meeting on one."""
        now = time.monotonic()
        with self._lock:
            first = self.all[self._preferred]
            if first.suspect_until <= now:
                return first
            others = [m for m in self.all if m is not first and m.suspect_until <= now]
        if len(others) > 1:
            alive = self._first_to_answer(others)
            if alive is not None:
                return alive
        return random.choice(others or self.all)

    def _first_to_answer(self, members: list[Member]) -> Member | None:
        """The first of ``members`` to answer a Status call within :data:`PROBE_S`
        (then the one used from now on), or ``None``. Any answer will do, an error
        included: only a member cut off, paused or gone stays silent, and trying one of
        those costs a whole attempt (a zone lost with the leader's member: the rest
        elect a new one in under a second, and a random pick of the silent member
        doubled the time writes waited)."""
        won: list[Member] = []
        answered = threading.Event()

        def done(m: Member, call: Any) -> None:
            if call.cancelled():  # silent until the wait below ended
                return
            exc = call.exception()
            if exc is None or (isinstance(exc, grpc.RpcError) and exc.code() not in RETRYABLE):
                with self._lock:
                    if not won:
                        won.append(m)
                        self._preferred = self.all.index(m)
                answered.set()

        calls = []
        for m in members:
            call = m.client.maintenancestub.Status.future(etcdrpc.StatusRequest(), PROBE_S)
            call.add_done_callback(functools.partial(done, m))
            calls.append(call)
        answered.wait(PROBE_S)
        for call in calls:
            call.cancel()
        return won[0] if won else None

    def worked(self, m: Member) -> None:
        with self._lock:
            self._preferred = self.all.index(m)
            m.suspect_until = 0.0

    def failed(self, m: Member) -> bool:
        """Pass ``m`` over for a while; whether it was not suspect already."""
        with self._lock:
            now = time.monotonic()
            newly = m.suspect_until <= now
            m.suspect_until = now + self._suspect_s
        return newly
