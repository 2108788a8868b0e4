"""Writer and compactor sessions: the lease-bound key every data object's commit
compares (protocol/README.md §3, §8.1, §11).

A :class:`Session` grants an etcd lease, puts ``{root}/_sessions/{session_id}`` with
it, and remembers the key's ``create_revision`` R. Every object the process PUTs is
keyed under the session id, and the transaction that first references the object
compares ``create_revision(session key) = R``. Once the lease ends (the process was
paused past the TTL, crashed, or closed the session) the key is gone and can never
come back with R, so no commit can reference the session's objects any more: vacuum
may delete those it finds unreferenced, however long anything pauses.

:class:`Sessions` hands out the current session for each new blob, opens a new one
when the current one has expired or grown older than ``session_rotate_s``, and ends
a replaced session once its last blob is done, so vacuum can take a long-running
process's garbage.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Literal

import msgpack

from llog.connection import Connection
from llog.errors import CoordinationError, LlogError
from llog.etcd.operations import KV, Compare
from llog.state.cluster_format import FORMAT_VERSION, check_can_join
from llog.state.control import now_ms
from llog.version import __version__

log = logging.getLogger(__name__)

SessionKind = Literal["writer", "compactor"]


def encode_session_value(kind: SessionKind, started_at_ms: int, peer_url: str | None = None,
                         zone: str | None = None) -> bytes:
    """The session key's value: ``{kind, host, pid, started_at_ms, version, format}``
    (for operators; ``llog upgrade finalize`` reads ``format``, the highest cluster
    format the process reads; the protocol reads only the key's presence and
    create_revision),
    ``peer_url`` where the process serves its blobs to other brokers' readers (§9 step
    9), and the ``zone`` it runs in (peers read only within a zone)."""
    value: dict[str, object] = {
        "kind": kind, "host": socket.gethostname(), "pid": os.getpid(), "started_at_ms": started_at_ms,
        "version": __version__, "format": FORMAT_VERSION,
    }
    if peer_url is not None:
        value["peer_url"] = peer_url
    if zone is not None:
        value["zone"] = zone
    out: bytes = msgpack.packb(value)
    return out


class Session:
    """One lease-bound session key, kept alive by a thread until :meth:`close`."""

    def __init__(
        self, conn: Connection, kind: SessionKind, on_tick: Callable[[Session], None] | None = None
    ) -> None:
        self.kind: SessionKind = kind
        #: Called from the keep-alive thread after each successful refresh.
        self._on_tick = on_tick
        self.id = uuid.uuid4().hex
        self.key = conn.keys.session(self.id)
        self.ttl_s = conn.config.session_ttl_s
        self.started = time.monotonic()
        self._etcd = conn.etcd
        self._metrics = conn.metrics
        # A release that cannot read the cluster's format writes nothing to it (spec §3.1).
        check_can_join(conn)
        self.lease = self._etcd.grant_lease(self.ttl_s)
        try:
            #: The key is new, so the put's revision is its create_revision.
            self.create_revision = self._etcd.put(
                self.key, encode_session_value(kind, now_ms(), conn.config.peer_url, conn.config.zone), lease=self.lease
            )
        except BaseException:
            with contextlib.suppress(CoordinationError):  # else the lease ends by its TTL
                self._etcd.revoke_lease(self.lease)
            raise
        self._expired = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._keepalive, name=f"llog-session-{kind}", daemon=True)
        self._thread.start()
        self._metrics.sessions_opened.labels(kind).inc()
        log.info("opened %s session %s (lease %x, revision %d)", kind, self.id, self.lease, self.create_revision)

    @property
    def expired(self) -> bool:
        """Whether this process knows the session ended (a refresh found the lease
        gone, or a commit's compare failed on it)."""
        return self._expired.is_set()

    def mark_expired(self) -> None:
        if not self._expired.is_set():
            self._expired.set()
            self._metrics.sessions_expired.labels(self.kind).inc()
            log.warning("%s session %s expired; new blobs go to a new session", self.kind, self.id)

    def compare(self) -> Compare:
        """The compare a commit that references this session's objects adds."""
        return Compare(self.key, "create", "=", self.create_revision)

    def holds(self, got: list[KV]) -> bool:
        """Whether a read of the session key (a failure branch's ``Get``) shows this
        session still alive; if not, the session is marked expired."""
        alive = bool(got) and got[0].create_revision == self.create_revision
        if not alive:
            self.mark_expired()
        return alive

    def _keepalive(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            try:
                ttl = self._etcd.refresh_lease(self.lease)
            except CoordinationError as exc:
                log.warning("refresh of session %s failed (retrying): %s", self.id, exc)
                continue
            if ttl <= 0:
                self.mark_expired()
                return
            if self._on_tick is not None:
                self._on_tick(self)

    def close(self) -> None:
        """Stop the keep-alive and revoke the lease (which deletes the key)."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()
        try:
            self._etcd.revoke_lease(self.lease)
        except CoordinationError as exc:  # the lease then ends by its TTL
            log.warning("could not revoke session %s: %s", self.id, exc)
        self._expired.set()


class Sessions:
    """The sessions of one writer or compactor: :meth:`acquire` the session for a new
    blob, :meth:`release` it when the blob is committed or given up. Thread-safe."""

    def __init__(self, conn: Connection, kind: SessionKind) -> None:
        self._conn = conn
        self._kind: SessionKind = kind
        self._rotate_s = conn.config.session_rotate_s
        self._lock = threading.Lock()
        self._current: Session | None = None
        # Blobs acquired and not yet released, per session.
        self._users: dict[Session, int] = {}
        self._closed = False

    def acquire(self) -> Session:
        """The session to write a new blob under (opened first if needed)."""
        retired: Session | None = None
        with self._lock:
            if self._closed:
                raise LlogError(f"the {self._kind}'s sessions are closed")
            cur = self._current
            if cur is None or self._due(cur):
                if cur is not None and self._users.get(cur, 0) == 0:
                    retired = cur
                    self._users.pop(cur, None)
                # Opened under the lock: one new session, not one per racing caller.
                cur = self._current = Session(self._conn, self._kind, self._retire_if_idle)
            self._users[cur] = self._users.get(cur, 0) + 1
        if retired is not None:
            retired.close()
        return cur

    def release(self, session: Session) -> None:
        """One blob of ``session`` is done. A replaced session ends with its last blob,
        and so does the current one once it is due for rotation (an idle process then
        holds no session that keeps its garbage from vacuum)."""
        with self._lock:
            left = self._users.get(session, 0) - 1
            if left > 0:
                self._users[session] = left
                return
            self._users.pop(session, None)
            if session is self._current:
                if not self._due(session):
                    return
                self._current = None
        session.close()

    def _retire_if_idle(self, session: Session) -> None:
        """From the session's keep-alive: end the current session once it is due for
        rotation and no blob uses it, so a process that went idle holds no session that
        keeps its garbage from vacuum (the next blob opens a new one)."""
        with self._lock:
            if session is not self._current or self._users.get(session, 0) or not self._due(session):
                return
            self._current = None
        session.close()

    def _due(self, session: Session) -> bool:
        return session.expired or time.monotonic() - session.started > self._rotate_s

    def close(self) -> None:
        """End every session; blobs staged and not committed can no longer commit."""
        with self._lock:
            self._closed = True
            ended = set(self._users)
            if self._current is not None:
                ended.add(self._current)
            self._current = None
            self._users.clear()
        for s in ended:
            s.close()
