"""``meta/compactor-claim``: who may compact a partition right now.

A claim is a key bound to an etcd lease, created only if absent, holding a token
unique to this acquisition. Every compaction stage transaction compares the claim key
with the token, so a claimant whose lease lapsed (a long pause, a partition from etcd)
cannot finish a stage once someone else holds the partition (invariant 5). A dead
process's claims vanish with its lease; :class:`LeaseKeeper` keeps a live one's
lease alive.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from llog.connection import Connection
from llog.errors import ClaimConflict, ClaimLost, CoordinationError
from llog.etcd.client import Etcd
from llog.etcd.operations import KV, Compare, Delete, Get, Op, Put, TxnResult, absent, value_is
from llog.topic.guard import TopicGuard

log = logging.getLogger(__name__)


def process_owner() -> str:
    """``host:pid``: names this process in claims and compaction records."""
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True)
class Claim:
    """A held claim: ``token`` is stored at ``key``, bound to ``lease``."""

    topic: str
    partition: int
    key: str
    token: str
    lease: int

    def guard(self) -> Compare:
        """Holds while this claim is still the partition's claim."""
        return value_is(self.key, self.token.encode())


def claim_guard(conn: Connection, topic: str, partition: int, claim: Claim | None) -> Compare:
    """The compare a compaction transaction carries: the caller's claim still holds,
    or, for an unclaimed caller (the one-shot debugging path), nobody holds one."""
    if claim is not None:
        return claim.guard()
    return absent(conn.keys.compactor_claim(topic, partition))


def claim_lost(claim: Claim | None, held: list[KV]) -> bool:
    """Whether the claim key's value ``held`` (read where the guard failed) means
    :func:`claim_guard` no longer holds for ``claim``."""
    if claim is None:
        return bool(held)
    return not held or held[0].value != claim.token.encode()


def claimed_txn(
    conn: Connection, topic: str, partition: int, claim: Claim | None, compares: Sequence[Compare],
    ops: Sequence[Op], failure: Sequence[Get] = (),
) -> TxnResult:
    """One compactor transaction: ``ops`` if ``compares``, :func:`claim_guard` and the
    topic guard (spec §4.5) hold. A failed one answers ``failure``'s reads, then the
    topic record's and the claim key's (the last response); :class:`UnknownTopic` when
    it failed because the topic was deleted, :class:`ClaimLost` because the claim moved."""
    guard = TopicGuard.of(conn, topic)
    r = conn.etcd.txn([*compares, claim_guard(conn, topic, partition, claim), guard.compare()], ops,
                      [*failure, guard.read(), Get(conn.keys.compactor_claim(topic, partition))])
    if not r.succeeded:
        topic_read, held = r.responses[-2], r.responses[-1]
        assert isinstance(topic_read, list) and isinstance(held, list)
        guard.check(conn, topic_read)
        if claim_lost(claim, held):
            raise ClaimLost(topic, partition)
        r = TxnResult(r.succeeded, r.revision, r.responses[:-2] + r.responses[-1:])
    return r


def try_claim(conn: Connection, topic: str, partition: int, lease: int, owner: str) -> Claim | ClaimConflict:
    """Create the claim if absent; otherwise say who holds it."""
    key = conn.keys.compactor_claim(topic, partition)
    token = f"{owner}/{uuid.uuid4().hex[:12]}"
    guard = TopicGuard.of(conn, topic)  # no claim key under a deleted topic
    r = conn.etcd.txn([absent(key), guard.compare()], [Put(key, token.encode(), lease)], [Get(key), guard.read()])
    if r.succeeded:
        return Claim(topic, partition, key, token, lease)
    topic_read = r.responses[1]
    assert isinstance(topic_read, list)
    guard.check(conn, topic_read)
    got = r.responses[0]
    holder = got[0].value.decode(errors="replace") if isinstance(got, list) and got else "?"
    return ClaimConflict(topic, partition, holder)


def release_claim(conn: Connection, claim: Claim) -> bool:
    """Delete the claim if it is still ours; return whether it was."""
    r = conn.etcd.txn([claim.guard()], [Delete(claim.key)])
    return r.succeeded


class LeaseKeeper:
    """One etcd lease kept alive by a background thread, for a process's claims.

    If a keep-alive finds the lease gone (the process stalled past the TTL), a new
    lease is granted for later claims; work under the old one fails its claim guard.
    """

    def __init__(self, etcd: Etcd, ttl_s: int) -> None:
        self._etcd = etcd
        self.ttl_s = ttl_s
        self._lock = threading.Lock()
        self._lease = etcd.grant_lease(ttl_s)
        self._last_ok = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="llog-compactor-lease", daemon=True)
        self._thread.start()

    @property
    def lease(self) -> int:
        with self._lock:
            return self._lease

    def healthy(self) -> bool:
        """The lease was confirmed alive within its TTL."""
        return time.monotonic() - self._last_ok < self.ttl_s

    def _run(self) -> None:
        interval = max(0.2, self.ttl_s / 3)
        while not self._stop.wait(interval):
            lease = self.lease
            try:
                if self._etcd.refresh_lease(lease) > 0:
                    self._last_ok = time.monotonic()
                    continue
                log.warning("compactor lease %x expired; granting a new one", lease)
                fresh = self._etcd.grant_lease(self.ttl_s)
                with self._lock:
                    self._lease = fresh
                self._last_ok = time.monotonic()
            except CoordinationError as exc:
                log.warning("compactor lease keep-alive failed: %s", exc)

    def close(self, *, revoke: bool = True) -> None:
        """Stop the keep-alive; ``revoke`` drops every claim bound to the lease now."""
        self._stop.set()
        self._thread.join()
        if revoke:
            try:
                self._etcd.revoke_lease(self.lease)
            except CoordinationError as exc:
                log.warning("could not revoke compactor lease: %s", exc)

    def __enter__(self) -> LeaseKeeper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextmanager
def claimed(conn: Connection, topic: str, partition: int, *, ttl_s: int | None = None) -> Iterator[Claim]:
    """Hold the partition's claim (with its own kept-alive lease) for the ``with``
    body; :class:`ClaimConflict` if another compactor holds it."""
    with LeaseKeeper(conn.etcd, ttl_s or conn.config.compactor_claim_ttl_s) as keeper:
        got = try_claim(conn, topic, partition, keeper.lease, process_owner())
        if isinstance(got, ClaimConflict):
            raise got
        try:
            yield got
        finally:
            release_claim(conn, got)
