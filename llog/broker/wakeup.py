"""What the broker knows about each partition's tail, and how waiting consumers
wake up.

Each partition a consumer touches gets an etcd watch on its control key, registered
before the first control read. From then on the partition's ``(log_start_offset,
next_offset)`` is kept current without reading etcd: the watch hands over every new
control value (commits by any broker, fences, retention), and local commits raise
``next_offset`` as soon as they are acknowledged. ``next_offset`` only grows, so
taking the maximum makes the order of those two sources irrelevant. Every change wakes
the consumers long-polling on that partition; their waiting happens on the event loop.
A watch event for this broker's own in-flight commit is left to ``local_commit``; one
for another broker's new append goes to ``on_remote_commit``, which reads its records
into the tail cache and then announces it (``remote_cached``), so the consumers it
wakes are served from memory (llog/broker/remote_commits.py).

A second watch, on the partition's compaction cursor, keeps the caches current
(protocol/README.md §9, "Cached appends"): key compaction (§10.2) rewrites only index
entries below the cursor, so the tail caches serve a partition only from its cursor
on, and retention and DeleteRecords only raise the log start the control watch hands
over. Neither costs a Kafka Fetch an etcd read.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from llog.broker.loop_inbox import LoopInbox
from llog.codec.etcd_values.maps import MetaFormatError
from llog.codec.etcd_values.partition import Control, Pending
from llog.connection import Connection
from llog.errors import CorruptMetadata
from llog.etcd.operations import KV, Get
from llog.names import TopicPartition
from llog.state.control import decode_control, decode_cursor

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TailView:
    """What a fetch needs of a partition: where it starts and ends, and where its
    compaction cursor is (the tail caches serve offsets from there on only)."""

    log_start_offset: int
    next_offset: int
    compaction_cursor: int


@dataclass
class _Tail:
    next_offset: int | None = None  # None: not known, read etcd
    log_start_offset: int = 0
    compaction_cursor: int = 0
    cursor_unsure: bool = False  # its watch may have missed a move: read etcd
    confirmed_at: float = 0.0  # monotonic time of the last etcd read or watch event
    cancel_watch: Callable[[], None] | None = None  # cancels both of its watches


class PartitionTails:
    def __init__(
        self,
        conn: Connection,
        inbox: LoopInbox,
        *,
        max_watches: int = 4096,
        trust_s: float = 5.0,
        owns: Callable[[str], bool] = lambda _data_key: False,
        on_remote_commit: Callable[[TopicPartition, Pending], bool] = lambda _tp, _pending: False,
    ) -> None:
        self._conn = conn
        # This broker's own commits reach local_commit right after the txn, with the
        # records already in the tail cache; their watch event can arrive first, and
        # waking consumers then would send them to S3 for records about to be cached.
        self._owns = owns
        # Another broker's commit of a watched partition: True when its records are
        # being read into the tail cache and remote_cached() will announce it.
        self._on_remote_commit = on_remote_commit
        self._trust_s = trust_s
        self._inbox = inbox
        self._max_watches = max_watches
        self._lock = threading.Lock()
        self._watch_lock = threading.Lock()  # one registration at a time
        self._tails: dict[TopicPartition, _Tail] = {}
        self._watches = 0
        # Loop-thread only:
        self._versions: dict[TopicPartition, int] = {}
        self._events: dict[TopicPartition, asyncio.Event] = {}
        self._stopping = False

    # -- state, any thread ---------------------------------------------------------
    def known(self, tp: TopicPartition) -> TailView | None:
        """The partition as its watches last told, if tracked; else ``None``."""
        with self._lock:
            t = self._tails.get(tp)
            if t is None or t.next_offset is None or t.cancel_watch is None or t.cursor_unsure:
                return None
            # A watch can die without telling (etcd3's watcher thread may crash when
            # its stream ends): past this age, re-read etcd rather than trust silence.
            if time.monotonic() - t.confirmed_at > self._trust_s:
                return None
            return TailView(t.log_start_offset, t.next_offset, t.compaction_cursor)

    def watch(self, tp: TopicPartition) -> None:
        """Start tracking the partition (call before :meth:`read`)."""
        with self._watch_lock:
            with self._lock:
                t = self._tails.setdefault(tp, _Tail())
                if t.cancel_watch is not None or self._watches >= self._max_watches:
                    return
            etcd, keys = self._conn.etcd, self._conn.keys
            cancel_control = etcd.watch_kvs(keys.control(*tp), lambda kv: self._remote(tp, kv))
            try:
                cancel_cursor = etcd.watch_kvs(keys.compaction_cursor(*tp), lambda kv: self._cursor_moved(tp, kv))
            except BaseException:
                cancel_control()
                raise

            def cancel() -> None:
                cancel_control()
                cancel_cursor()

            with self._lock:
                self._watches += 1
                t.cancel_watch = cancel

    def read(self, tp: TopicPartition) -> TailView:
        """The partition's control and compaction cursor, read from etcd in one round
        trip (after :meth:`watch`) and learned."""
        keys = self._conn.keys
        control, cursor = keys.control(*tp), keys.compaction_cursor(*tp)
        [ctl_kvs, cursor_kvs] = self._conn.etcd.get_many([Get(control), Get(cursor)])
        ctl = decode_control(control, ctl_kvs[0] if ctl_kvs else None).control
        at = decode_cursor(cursor, cursor_kvs[0].value) if cursor_kvs else 0
        with self._lock:
            t = self._tails.setdefault(tp, _Tail())
            t.next_offset = max(ctl.next_offset, t.next_offset or 0)
            t.log_start_offset = max(ctl.log_start_offset, t.log_start_offset)
            t.compaction_cursor = max(at, t.compaction_cursor)
            t.cursor_unsure = False
            t.confirmed_at = time.monotonic()
            return TailView(t.log_start_offset, t.next_offset, t.compaction_cursor)

    def local_commit(self, tp: TopicPartition, next_offset: int) -> None:
        """This broker committed ``tp`` up to ``next_offset`` (its records are cached)."""
        self._advance(tp, next_offset, "local")

    def remote_cached(self, tp: TopicPartition, next_offset: int) -> None:
        """Another broker's append to ``tp``, announced to ``on_remote_commit``, is now
        in the tail cache (or its read failed): consumers may read up to ``next_offset``."""
        self._advance(tp, next_offset, "watch")

    def _advance(self, tp: TopicPartition, next_offset: int, source: str) -> None:
        with self._lock:
            t = self._tails.get(tp)
            if t is not None and t.next_offset is not None:
                t.next_offset = max(t.next_offset, next_offset)
        self._conn.metrics.tail_wakeups.labels(source).inc()
        self._signal(tp)

    def _remote(self, tp: TopicPartition, kv: KV | None) -> None:
        ctl: Control | None = None
        if kv is not None:
            try:
                ctl = Control.decode(kv.value)
            except MetaFormatError as exc:
                log.warning("undecodable control value for %s/%s: %s", *tp, exc)
        pending = ctl.pending if ctl is not None else None
        ours = pending is not None and self._owns(pending.data_key)
        read = False  # hand the pending to on_remote_commit
        with self._lock:
            t = self._tails.setdefault(tp, _Tail())
            if ctl is None:
                # Deleted, corrupt, or the watch failed: forget, so the next fetch
                # re-reads etcd and registers a new watch.
                t.next_offset = None
                if t.cancel_watch is not None:
                    self._watches -= 1
                    t.cancel_watch = None
            elif t.next_offset is not None:
                t.confirmed_at = time.monotonic()
                t.log_start_offset = max(t.log_start_offset, ctl.log_start_offset)
                if ours:
                    return  # local_commit follows (see __init__)
                read = pending is not None and pending.end_offset >= t.next_offset
                if not read:
                    t.next_offset = max(t.next_offset, ctl.next_offset)
            else:
                read = pending is not None and not ours
        # Another broker's new append: announced once its records are in the tail cache
        # (remote_cached), so the consumers it wakes find them there.
        if read and pending is not None and self._on_remote_commit(tp, pending):
            return
        if read and ctl is not None:
            with self._lock:
                if t.next_offset is not None:
                    t.next_offset = max(t.next_offset, ctl.next_offset)
        self._conn.metrics.tail_wakeups.labels("watch").inc()
        self._signal(tp)

    def _cursor_moved(self, tp: TopicPartition, kv: KV | None) -> None:
        """The compaction cursor's watch: the caches stop serving what is below it."""
        cursor: int | None = None
        if kv is not None:
            try:
                cursor = decode_cursor(kv.key, kv.value)
            except CorruptMetadata as exc:
                log.warning("undecodable compaction cursor for %s/%s: %s", *tp, exc)
        with self._lock:
            t = self._tails.setdefault(tp, _Tail())
            if cursor is not None:
                t.compaction_cursor = max(t.compaction_cursor, cursor)
            else:
                # Deleted (with its topic), corrupt, or the watch missed changes (it
                # goes on, moved to another member): the next fetch reads etcd.
                t.cursor_unsure = True

    def close(self) -> None:
        with self._lock:
            cancels = [t.cancel_watch for t in self._tails.values() if t.cancel_watch]
            self._tails.clear()
        for c in cancels:
            try:
                c()
            except Exception as exc:  # a closing etcd client may refuse; nothing to undo
                log.debug("watch cancel failed: %s", exc)

    def release_waiters(self) -> None:
        """Shutting down: end every long-poll now and skip future waits."""
        self._inbox.call(self._release_all)

    def _release_all(self) -> None:
        self._stopping = True
        for ev in self._events.values():
            ev.set()
        self._events.clear()

    def _signal(self, tp: TopicPartition) -> None:
        self._inbox.call(self._fire, tp)

    # -- waiting, loop thread ------------------------------------------------------------
    def _fire(self, tp: TopicPartition) -> None:
        self._versions[tp] = self._versions.get(tp, 0) + 1
        ev = self._events.pop(tp, None)
        if ev is not None:
            ev.set()

    @property
    def stopping(self) -> bool:
        return self._stopping

    def versions(self, tps: list[TopicPartition]) -> list[int]:
        return [self._versions.get(tp, 0) for tp in tps]

    async def wait(self, tps: list[TopicPartition], seen: list[int], timeout: float) -> None:
        """Return when any of ``tps`` changed since ``seen`` (from :meth:`versions`),
        or after ``timeout`` seconds."""
        if self._stopping or self.versions(tps) != seen or timeout <= 0:
            return
        if not tps:  # a fetch of no partition (a Kafka client's with all of its paused) waits it out
            await asyncio.sleep(timeout)
            return
        events = {self._events.setdefault(tp, asyncio.Event()) for tp in tps}
        waiters = [asyncio.ensure_future(e.wait()) for e in events]
        try:
            await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waiters:
                w.cancel()
