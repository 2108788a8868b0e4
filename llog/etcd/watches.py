"""Watches that move with the members (:class:`Watches`): a watch whose member failed is
opened again on another from the revision after the last it delivered. Also the fixes
to python3-etcd3's watcher they need."""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import etcd3
import etcd3.watch

from llog.errors import CoordinationError
from llog.etcd.auth import Tokens, WatchRefused
from llog.etcd.members import Member, Members
from llog.etcd.operations import KV, kv_of
from llog.metrics import Metrics

# python3-etcd3 0.13's watch.py calls six.itervalues() without importing six, so a watch
# stream that ends kills its thread with NameError and leaves the callbacks un-notified.
if not hasattr(etcd3.watch, "six"):
    etcd3.watch.six = SimpleNamespace(itervalues=lambda d: iter(d.values()))

log = logging.getLogger(__name__)


def _handle_watch_response(self: Any, rs: Any) -> None:
    """python3-etcd3 takes a watch etcd refused (``created`` and ``canceled``: its token
    expired) for one it made, and drops a watch etcd ended without a word: both become
    errors here, so a waiting :meth:`add_callback` raises and a live watch's callback
    hears of it (and the watch is opened again)."""
    if not rs.canceled or rs.compact_revision:  # a compacted start: python3-etcd3's own error
        _plain_handle_watch_response(self, rs)
        return
    refused = WatchRefused(rs.cancel_reason or "cancelled by etcd")
    with self._lock:
        if rs.created and self._new_watch is not None:
            self._new_watch.err = refused
            self._new_watch_cond.notify_all()
            return
        callback = self._callbacks.pop(rs.watch_id, None)
    if callback is not None:
        etcd3.watch._safe_callback(callback, refused)


_plain_handle_watch_response = etcd3.watch.Watcher._handle_response
etcd3.watch.Watcher._handle_response = _handle_watch_response


@dataclass(eq=False)
class Watch:
    """One watch of a key (or prefix), wherever it runs now."""

    key: str
    prefix: bool
    callback: Callable[[KV | None], None]
    member: Member | None = None
    watch_id: Any = None
    #: The revision of the last change delivered (0: none yet).
    revision: int = 0
    cancelled: bool = False
    #: The python3-etcd3 watcher (one gRPC stream) it runs on, which cancels it.
    watcher: Any = None


class Watches:
    """The watches of one :class:`~llog.etcd.client.Etcd`: each runs on one of its
    ``members``, and moves to another when that member fails (its stream breaks, or a
    call to it fails), resuming at the revision after the last it delivered, so no
    change is missed or told twice. ``failed(member, why)``: the client's own handling
    of a failed member (which moves its watches: :meth:`move_off`)."""

    def __init__(self, members: Members, tokens: Tokens, metrics: Metrics, attempt_timeout: float,
                 failed: Callable[[Member, str], None]) -> None:
        self._members = members
        self._tokens = tokens
        self._metrics = metrics
        self._attempt_timeout = attempt_timeout
        self._failed = failed
        self._lock = threading.Lock()
        self._all: set[Watch] = set()
        self._moving: set[Watch] = set()

    def add(self, key: str, prefix: bool, callback: Callable[[KV | None], None]) -> Callable[[], None]:
        w = Watch(key, prefix, callback)
        self._start(w)
        with self._lock:
            self._all.add(w)
        self._metrics.etcd_ops.labels("watch").inc()
        return lambda: self._cancel(w)

    def _start(self, w: Watch) -> None:
        """Open ``w`` on a member that takes it; :class:`CoordinationError` if none does."""
        start = w.revision + 1 if w.revision else None
        last: Exception | None = None
        for _ in range(len(self._members)):
            m = self._members.pick()
            w.member = m  # before the first event can arrive
            try:
                try:
                    held = self._tokens.ensure(m, self._attempt_timeout)
                    self._add(w, m, start)
                except Exception as exc:
                    if not Tokens.refused(exc):
                        raise
                    self._tokens.ensure(m, self._attempt_timeout, stale=held)  # a new token, a new stream
                    self._add(w, m, start)
            except Exception as exc:  # python3-etcd3 raises its own kinds, and gRPC's
                w.member = None
                last = exc
                self._failed(m, f"watch: {type(exc).__name__}")
                continue
            return
        raise CoordinationError(f"etcd watch of {w.key} failed on every member: {last}")

    def _add(self, w: Watch, m: Member, start: int | None) -> None:
        watcher = m.client.watcher
        ranged = {"range_end": etcd3.utils.prefix_range_end(etcd3.utils.to_bytes(w.key))} if w.prefix else {}
        w.watch_id = watcher.add_callback(w.key, functools.partial(self._event, w, m), start_revision=start,
                                          **ranged)
        w.watcher = watcher

    def _event(self, w: Watch, m: Member, response: Any) -> None:
        """A watch response, or the error that ended ``w``'s stream on member ``m``."""
        if w.cancelled or w.member is not m:
            return
        events = getattr(response, "events", None)
        if events is None:  # the stream ended, or the history was compacted
            if type(response).__name__ == "RevisionCompactedError":
                w.revision = 0
                w.callback(None)  # changes were missed: re-read
            self._failed(m, f"watch stream: {type(response).__name__}")
            self._move(w)
            return
        kvs = [kv_of(ev) for ev in events]
        stray = next((kv.key for kv in kvs if not (kv.key.startswith(w.key) if w.prefix else kv.key == w.key)), None)
        if stray is not None:
            # The client library paired this stream's watch ids with the wrong
            # callbacks (a watch create that timed out and was answered late, under
            # etcd failover): these changes are another key's. Never hand them on;
            # open the watch again and have its owner re-read what it may have missed.
            log.warning("etcd watch of %s was handed a change of %s: reopening it", w.key, stray)
            self._metrics.etcd_watch_strays.inc()
            w.callback(None)
            self._move(w)
            return
        w.revision = max(w.revision, int(response.header.revision))
        for ev, kv in zip(events, kvs, strict=True):
            w.callback(kv if type(ev).__name__ == "PutEvent" else None)

    def move_off(self, m: Member) -> None:
        """Member ``m`` failed: move its watches."""
        with self._lock:
            ws = [w for w in self._all if w.member is m and not w.cancelled]
        for w in ws:
            self._move(w)

    def _move(self, w: Watch) -> None:
        """Open ``w`` again on another member, on a thread of its own (the caller may be
        a request, or the failed stream's thread), until it runs or is cancelled."""
        with self._lock:
            if w in self._moving or w.cancelled:
                return
            self._moving.add(w)
        threading.Thread(target=self._reopen, args=(w,), name="llog-etcd-watch-move", daemon=True).start()

    def _reopen(self, w: Watch) -> None:
        old, old_id = w.watcher, w.watch_id
        w.member = None  # events still in flight from the old member are dropped
        if old is not None:
            with contextlib.suppress(Exception):
                old.cancel(old_id)
        missed = w.revision == 0  # nothing delivered yet: no revision to resume from
        delay = 0.05
        try:
            while not w.cancelled:
                try:
                    self._start(w)
                except CoordinationError as exc:
                    log.warning("%s; trying again", exc)
                    time.sleep(delay)
                    delay = min(delay * 2, 1.0)
                    continue
                if missed:
                    w.callback(None)
                return
        finally:
            with self._lock:
                self._moving.discard(w)

    def _cancel(self, w: Watch) -> None:
        w.cancelled = True
        with self._lock:
            self._all.discard(w)
        if w.watcher is not None:
            with contextlib.suppress(Exception):
                w.watcher.cancel(w.watch_id)

    def close(self) -> None:
        with self._lock:
            ws = list(self._all)
        for w in ws:
            self._cancel(w)
