"""A thin layer over the ``etcd3`` module: exactly what the protocol needs.

get, range scans, ceiling lookup, transactions with revision compares, delete range,
leases and watches, with typed results (:class:`KV`, :class:`TxnResult`), metrics, and
failover across endpoints. Requests are built from etcd's own protobuf messages so a
transaction returns its header revision (the new ``mod_revision`` of what it wrote),
which callers cache to make their next compare-and-swap without a read. Maintenance
(compaction, defragmentation, alarms) is :mod:`llog.etcd_maintenance`.

Failover (:class:`Etcd`): with several members each attempt has a short deadline
(``attempt_timeout``), each call a budget (``timeout``): a member that stops answering —
paused, partitioned, dead — costs a call one attempt before it moves on, and is passed
over for :data:`Etcd.SUSPECT_S`. A lone member gets the whole budget for each attempt.
Reads, read-only transactions and lease calls are tried again on another member; a
write is sent again only when it provably never reached a member (no connection, or a
member without a leader, or etcd refused its token: :class:`_Tokens`). Any other failure
of a write is an unknown outcome (:class:`CoordinationError`), which the caller resolves
by reading (spec §8.5), never by a blind resend. Watches move with the members: a watch
whose member failed is opened again on another from the revision after the last it
delivered.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Literal

import etcd3
import etcd3.watch
import grpc
from etcd3 import etcdrpc

from llog.config import LlogConfig
from llog.errors import CoordinationError, EtcdSpaceExhausted, HistoryCompacted
from llog.metrics import Metrics

# python3-etcd3 0.13's watch.py calls six.itervalues() without importing six, so a watch
# stream that ends kills its thread with NameError and leaves the callbacks un-notified.
if not hasattr(etcd3.watch, "six"):
    etcd3.watch.six = SimpleNamespace(itervalues=lambda d: iter(d.values()))

log = logging.getLogger(__name__)


class _WatchRefused(Exception):
    """etcd created a watch and cancelled it at once (an expired token), or ended one."""


def _handle_watch_response(self: Any, rs: Any) -> None:
    """python3-etcd3 takes a watch etcd refused (``created`` and ``canceled``: its token
    expired) for one it made, and drops a watch etcd ended without a word: both become
    errors here, so a waiting :meth:`add_callback` raises and a live watch's callback
    hears of it (and the watch is opened again)."""
    if not rs.canceled or rs.compact_revision:  # a compacted start: python3-etcd3's own error
        _plain_handle_watch_response(self, rs)
        return
    refused = _WatchRefused(rs.cancel_reason or "cancelled by etcd")
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

_RETRYABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}
#: Reads per get_and_count transaction: two operations each, within etcd's default
#: ``--max-txn-ops`` of 128.
GET_AND_COUNT_BATCH = 64
#: Longest wait between attempts to reconnect to an etcd that went away.
_MAX_RECONNECT_BACKOFF_MS = 500


@dataclass(frozen=True, slots=True)
class KV:
    key: str
    value: bytes
    mod_revision: int
    create_revision: int
    version: int
    lease: int


@dataclass(frozen=True, slots=True)
class Compare:
    key: str
    target: Literal["mod", "create", "version", "value", "lease"]
    op: Literal["=", "!=", "<", ">"]
    value: int | bytes


def mod_revision_is(key: str, revision: int) -> Compare:
    """Holds when ``key``'s last write was at ``revision`` (0: the key is absent)."""
    return Compare(key, "mod", "=", revision)


def conflict_pause(attempt: int) -> None:
    """After a CAS lost to another writer (spec §8.3): from the third attempt on, sleep a
    jittered moment that grows with ``attempt``, so contending writers stop colliding."""
    if attempt >= 2:
        time.sleep(random.uniform(0, min(0.05, 0.001 * 2 ** min(attempt, 6))))


def absent(key: str) -> Compare:
    return Compare(key, "version", "=", 0)


def value_is(key: str, value: bytes) -> Compare:
    return Compare(key, "value", "=", value)


def lease_is(key: str, lease: int) -> Compare:
    """Holds when ``key`` exists bound to ``lease`` (0: the key is absent or has none)."""
    return Compare(key, "lease", "=", lease)


@dataclass(frozen=True, slots=True)
class Put:
    key: str
    value: bytes
    lease: int = 0


@dataclass(frozen=True, slots=True)
class Delete:
    key: str
    range_end: str | None = None


@dataclass(frozen=True, slots=True)
class Get:
    key: str
    range_end: str | None = None
    limit: int = 0


Op = Put | Delete | Get


@dataclass(frozen=True)
class TxnResult:
    succeeded: bool
    #: Store revision after the transaction (= mod_revision of every key it wrote).
    revision: int
    #: Per op of the branch that ran: list[KV] for a Get, deleted count for a Delete,
    #: None for a Put.
    responses: tuple[list[KV] | int | None, ...]


_TARGETS = {
    "mod": etcdrpc.Compare.MOD,
    "create": etcdrpc.Compare.CREATE,
    "version": etcdrpc.Compare.VERSION,
    "value": etcdrpc.Compare.VALUE,
    "lease": etcdrpc.Compare.LEASE,
}
_OPS = {
    "=": etcdrpc.Compare.EQUAL,
    "!=": etcdrpc.Compare.NOT_EQUAL,
    "<": etcdrpc.Compare.LESS,
    ">": etcdrpc.Compare.GREATER,
}


def _add_compare(into: Any, c: Compare) -> None:
    # Filled in place through add(): building each message and copying it into the
    # request cost 3-4x as much (0.13 ms of a 16-partition commit).
    msg = into.add()
    msg.key = c.key.encode()
    msg.target = _TARGETS[c.target]
    msg.result = _OPS[c.op]
    if c.target == "mod":
        msg.mod_revision = int(c.value)
    elif c.target == "create":
        msg.create_revision = int(c.value)
    elif c.target == "version":
        msg.version = int(c.value)
    elif c.target == "lease":
        msg.lease = int(c.value)
    else:
        assert isinstance(c.value, bytes)
        msg.value = c.value


def _range_req(key: str, range_end: str | None, limit: int = 0, **kw: Any) -> Any:
    return _fill_range(etcdrpc.RangeRequest(**kw), key, range_end, limit)


def _fill_range(req: Any, key: str, range_end: str | None, limit: int) -> Any:
    req.key = key.encode()
    if range_end is not None:
        req.range_end = range_end.encode()
    if limit:
        req.limit = limit
    return req


def _add_op(into: Any, op: Op) -> None:
    msg = into.add()
    if isinstance(op, Put):
        put = msg.request_put
        put.key = op.key.encode()
        put.value = op.value
        if op.lease:
            put.lease = op.lease
    elif isinstance(op, Delete):
        msg.request_delete_range.key = op.key.encode()
        if op.range_end is not None:
            msg.request_delete_range.range_end = op.range_end.encode()
    else:
        _fill_range(msg.request_range, op.key, op.range_end, op.limit)


def _error(op: str, exc: grpc.RpcError, revision: int = 0) -> CoordinationError:
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


def _never_sent(exc: grpc.RpcError) -> bool:
    """Whether a failed call provably never reached a member, so a write may be sent
    to another: no connection could be made, or the member had no leader (etcd refuses
    those before anything runs). A deadline, or a connection lost mid-call, proves
    nothing."""
    detail = str(exc.details() if hasattr(exc, "details") else exc)
    return exc.code() == grpc.StatusCode.UNAVAILABLE and (
        "failed to connect" in detail or "no leader" in detail or "Connection refused" in detail
    )


def _pause(attempt: int, members: int) -> float:
    """Seconds to wait after failed attempt number ``attempt`` of a call. One member: a
    short pause (0.05, 0.1, 0.2, ... s) so a read outlasts its restart; several: none,
    the next member at once, but the same pause (at most 0.5 s) once each has failed
    this call, as during an election, when every member answers "no leader" at once:
    spinning would take the CPU the election needs."""
    if attempt % members:
        return 0.0
    pause: float = 0.05 * 2.0 ** (attempt // members - 1)
    return pause if members == 1 else min(pause, 0.5)


def _kv(kv: Any) -> KV:
    return KV(
        kv.key.decode(), kv.value, kv.mod_revision, kv.create_revision, kv.version, kv.lease
    )


@dataclass(eq=False)
class _Watch:
    """One watch of a key (or prefix), wherever it runs now."""

    key: str
    prefix: bool
    callback: Callable[[KV | None], None]
    member: _Member | None = None
    watch_id: Any = None
    #: The revision of the last change delivered (0: none yet).
    revision: int = 0
    cancelled: bool = False
    #: The python3-etcd3 watcher (one gRPC stream) it runs on, which cancels it.
    watcher: Any = None


class _AuthenticationFailed(Exception):
    """A member could not be asked for a token (unreachable): try another."""


class _Watches:
    """The watches of one :class:`Etcd`: each runs on one member, and moves to another
    when that member fails (its stream breaks, or a call to it fails), resuming at the
    revision after the last it delivered, so no change is missed or told twice."""

    def __init__(self, etcd: Etcd) -> None:
        self._etcd = etcd
        self._lock = threading.Lock()
        self._all: set[_Watch] = set()
        self._moving: set[_Watch] = set()

    def add(self, key: str, prefix: bool, callback: Callable[[KV | None], None]) -> Callable[[], None]:
        w = _Watch(key, prefix, callback)
        self._start(w)
        with self._lock:
            self._all.add(w)
        self._etcd.metrics.etcd_ops.labels("watch").inc()
        return lambda: self._cancel(w)

    def _start(self, w: _Watch) -> None:
        """Open ``w`` on a member that takes it; :class:`CoordinationError` if none does."""
        start = w.revision + 1 if w.revision else None
        last: Exception | None = None
        for _ in self._etcd.endpoints:
            m = self._etcd._member()
            w.member = m  # before the first event can arrive
            try:
                try:
                    held = self._etcd.tokens.ensure(m, self._etcd.attempt_timeout)
                    self._add(w, m, start)
                except Exception as exc:
                    if not _Tokens.refused(exc):
                        raise
                    self._etcd.tokens.ensure(m, self._etcd.attempt_timeout, stale=held)  # a new token, a new stream
                    self._add(w, m, start)
            except Exception as exc:  # python3-etcd3 raises its own kinds, and gRPC's
                w.member = None
                last = exc
                self._etcd._failed(m, f"watch: {type(exc).__name__}")
                continue
            return
        raise CoordinationError(f"etcd watch of {w.key} failed on every member: {last}")

    def _add(self, w: _Watch, m: _Member, start: int | None) -> None:
        watcher = m.client.watcher
        ranged = {"range_end": etcd3.utils.prefix_range_end(etcd3.utils.to_bytes(w.key))} if w.prefix else {}
        w.watch_id = watcher.add_callback(w.key, functools.partial(self._event, w, m), start_revision=start,
                                          **ranged)
        w.watcher = watcher

    def _event(self, w: _Watch, m: _Member, response: Any) -> None:
        """A watch response, or the error that ended ``w``'s stream on member ``m``."""
        if w.cancelled or w.member is not m:
            return
        events = getattr(response, "events", None)
        if events is None:  # the stream ended, or the history was compacted
            if type(response).__name__ == "RevisionCompactedError":
                w.revision = 0
                w.callback(None)  # changes were missed: re-read
            self._etcd._failed(m, f"watch stream: {type(response).__name__}")
            self._move(w)
            return
        kvs = [_kv(ev) for ev in events]
        stray = next((kv.key for kv in kvs if not (kv.key.startswith(w.key) if w.prefix else kv.key == w.key)), None)
        if stray is not None:
            # The client library paired this stream's watch ids with the wrong
            # callbacks (a watch create that timed out and was answered late, under
            # etcd failover): these changes are another key's. Never hand them on;
            # open the watch again and have its owner re-read what it may have missed.
            log.warning("etcd watch of %s was handed a change of %s: reopening it", w.key, stray)
            self._etcd.metrics.etcd_watch_strays.inc()
            w.callback(None)
            self._move(w)
            return
        w.revision = max(w.revision, int(response.header.revision))
        for ev, kv in zip(events, kvs, strict=True):
            w.callback(kv if type(ev).__name__ == "PutEvent" else None)

    def move_off(self, m: _Member) -> None:
        """Member ``m`` failed: move its watches."""
        with self._lock:
            ws = [w for w in self._all if w.member is m and not w.cancelled]
        for w in ws:
            self._move(w)

    def _move(self, w: _Watch) -> None:
        """Open ``w`` again on another member, on a thread of its own (the caller may be
        a request, or the failed stream's thread), until it runs or is cancelled."""
        with self._lock:
            if w in self._moving or w.cancelled:
                return
            self._moving.add(w)
        threading.Thread(target=self._reopen, args=(w,), name="llog-etcd-watch-move", daemon=True).start()

    def _reopen(self, w: _Watch) -> None:
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

    def _cancel(self, w: _Watch) -> None:
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


@dataclass(frozen=True)
class EtcdSecurity:
    """How llog proves itself to etcd and checks etcd's certificate: TLS (a CA to trust,
    optionally a client certificate and key) and etcd's own users (a name and password,
    exchanged for a token per member)."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    user: str | None = None
    password: str | None = field(default=None, repr=False)

    @property
    def tls(self) -> bool:
        return self.ca_file is not None

    @classmethod
    def of(cls, config: LlogConfig) -> EtcdSecurity:
        """``LLOG_ETCD_CA_FILE``, ``..._CERT_FILE``, ``..._KEY_FILE``, ``..._USER``, ``..._PASSWORD``."""
        return cls(config.etcd_ca_file, config.etcd_cert_file, config.etcd_key_file, config.etcd_user,
                   config.etcd_password)


@dataclass(eq=False)
class _Member:
    """One etcd member and the client that talks to it only."""

    endpoint: str
    client: Any
    #: Until when (``time.monotonic``) the member is passed over after failing.
    suspect_until: float = 0.0
    #: With etcd users: which token the client holds (0: none yet; :class:`_Tokens`).
    token: int = 0
    token_lock: threading.Lock = field(default_factory=threading.Lock)


class _Tokens:
    """etcd's users: a token per member, asked for when the member is first used and
    again when etcd refuses the one held — expired, or (JWT tokens) issued before a
    change of etcd's users and roles. One thread asks at a time per member; the others
    wait and use its token. A request etcd refused for its token was not run, so it is
    sent again, whatever it is (etcd's Go client does the same). python3-etcd3 would
    authenticate only when a client is built (failing for a member that is down then)
    and never again."""

    def __init__(self, security: EtcdSecurity, metrics: Metrics) -> None:
        self._security = security
        self._metrics = metrics

    @staticmethod
    def refused(exc: BaseException) -> bool:
        """Whether etcd refused a request (or a watch) for its token."""
        if isinstance(exc, _WatchRefused):
            return "token" in str(exc) or "auth" in str(exc)
        if not isinstance(exc, grpc.RpcError) or not hasattr(exc, "code"):
            return False
        detail = str(exc.details() if hasattr(exc, "details") else "")
        # An expired token; a JWT issued before a change of users and roles; none at all
        # (taken without one while etcd's auth was off, and it is on now).
        return exc.code() == grpc.StatusCode.UNAUTHENTICATED or any(why in detail for why in (
            "auth revision is old", "revision in header is old", "revision of auth store is old",
            "user name is empty"))

    def ensure(self, m: _Member, deadline: float, *, stale: int | None = None) -> int:
        """The token ``m``'s client holds (its number; 0 without etcd users), a new one
        first if it has none or still holds ``stale``. A new token also gets a new watch
        stream: etcd checks a stream's token when a watch is added to it (the watches on
        the old stream carry on)."""
        user = self._security.user
        if user is None:
            return 0
        with m.token_lock:
            if m.token and m.token != stale:
                return m.token
            self._metrics.etcd_ops.labels("authenticate").inc()
            try:
                resp = m.client.authstub.Authenticate(
                    etcdrpc.AuthenticateRequest(name=user, password=self._security.password or ""), deadline)
            except grpc.RpcError as exc:
                code = exc.code() if hasattr(exc, "code") else None
                detail = str(exc.details() if hasattr(exc, "details") else exc)
                if code in _RETRYABLE:
                    raise _AuthenticationFailed(f"authenticating to {m.endpoint}: {code}") from exc
                if "authentication is not enabled" not in detail:
                    raise CoordinationError(f"etcd refused user {user!r} at {m.endpoint}: {detail}") from exc
                # Users configured before etcd's auth is turned on: carry on without a
                # token (as etcd's Go client does), so either can be changed first.
                log.info("etcd at %s has authentication off; using it without a token", m.endpoint)
                m.token += 1
                return m.token
            m.client.metadata = (("token", resp.token), ("hasleader", "true"))
            m.client._stubs.pop("watcher", None)  # made afresh, with the new token, for the next watch
            m.token += 1
            return m.token

    def call(self, m: _Member, deadline: float, fn: Callable[[Any], Any]) -> Any:
        """``fn(client)`` with a token, and once more with a new one if etcd refused it."""
        held = self.ensure(m, deadline)
        try:
            return fn(m.client)
        except grpc.RpcError as exc:
            if not (held and self.refused(exc)):
                raise
        self.ensure(m, deadline, stale=held)
        return fn(m.client)


class _Members:
    """An :class:`Etcd`'s members: which to try next, which failed lately."""

    def __init__(self, members: list[_Member], suspect_s: float, first: int | None = None) -> None:
        self.all = members
        self._suspect_s = suspect_s
        # Unless told, each client starts on a member of its own, so one member's pause
        # stalls a share of the clients, not all of them at once.
        self._preferred = random.randrange(len(members)) if first is None else first
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.all)

    def pick(self) -> _Member:
        """The one that last worked unless it is suspect, else another that is not, else
        any: at random, so clients leaving one member, or coming back after every member
        failed, spread over the members instead of all meeting on one."""
        now = time.monotonic()
        with self._lock:
            first = self.all[self._preferred]
            if first.suspect_until <= now:
                return first
            others = [m for m in self.all if m is not first and m.suspect_until <= now]
            return random.choice(others or self.all)

    def worked(self, m: _Member) -> None:
        with self._lock:
            self._preferred = self.all.index(m)
            m.suspect_until = 0.0

    def failed(self, m: _Member) -> bool:
        """Pass ``m`` over for a while; whether it was not suspect already."""
        with self._lock:
            now = time.monotonic()
            newly = m.suspect_until <= now
            m.suspect_until = now + self._suspect_s
        return newly


def _member_client(endpoint: str, attempt_timeout: float, keepalive_s: float, security: EtcdSecurity) -> Any:
    """A python3-etcd3 client of the member at ``endpoint`` only (over TLS when
    ``security`` has a CA; its users' token is llog's business: :meth:`Etcd._ensure_token`)."""
    host, _, port = endpoint.rpartition(":")
    client = etcd3.client(
        host=host,
        port=int(port),
        ca_cert=security.ca_file,
        cert_key=security.key_file,
        cert_cert=security.cert_file,
        timeout=attempt_timeout,  # what python3-etcd3's own calls (watch creation) wait
        grpc_options={
            "grpc.enable_http_proxy": 0,
            # gRPC backs a failed connection off exponentially, by default up to
            # two minutes: a client would not see etcd come back for that long.
            "grpc.initial_reconnect_backoff_ms": 100,
            "grpc.min_reconnect_backoff_ms": 1000,  # also the connect timeout
            "grpc.max_reconnect_backoff_ms": _MAX_RECONNECT_BACKOFF_MS,
            # Keepalive pings find a member that stopped answering on an idle
            # connection (a watch's); etcd refuses pings more often than its
            # --grpc-keepalive-min-time (5 s by default) with GOAWAY.
            "grpc.keepalive_time_ms": int(keepalive_s * 1000),
            "grpc.keepalive_timeout_ms": int(attempt_timeout * 1000),
            "grpc.keepalive_permit_without_calls": 0,
            "grpc.http2.max_pings_without_data": 0,
        }.items(),
    )
    # A member without a leader refuses at once ("etcdserver: no leader") instead
    # of holding the request: what etcd's own Go client asks for.
    client.metadata = (("hasleader", "true"),)
    # python3-etcd3 shuns an endpoint for 5 minutes after a failed watch and then
    # refuses every call on that client; llog judges its members itself.
    for endpoint_state in client.endpoints.values():
        endpoint_state.time_retry = 0
    return client


class Etcd:
    """One connection to an etcd cluster: a client per member, requests on one member
    at a time, moving to another when it fails (the module doc says how). Thread-safe;
    close it (or use ``with``). ``first_member``: the index of the member to start on
    (default: one at random, so the clients of a cluster spread over its members)."""

    #: Seconds a member that failed an attempt is passed over.
    SUSPECT_S = 5.0

    def __init__(
        self,
        endpoints: Sequence[str],
        *,
        timeout: float = 10.0,
        attempt_timeout: float = 1.0,
        keepalive_s: float = 6.0,
        metrics: Metrics | None = None,
        read_retries: int = 5,
        first_member: int | None = None,
        security: EtcdSecurity | None = None,
    ) -> None:
        if not endpoints:
            raise CoordinationError("no etcd endpoints given")
        self.endpoints = list(endpoints)
        self.timeout = timeout
        self.attempt_timeout = min(attempt_timeout, timeout)
        self.metrics = metrics if metrics is not None else Metrics()
        self.read_retries = read_retries
        self.security = security if security is not None else EtcdSecurity()
        self.tokens = _Tokens(self.security, self.metrics)
        self._members = _Members(
            [_Member(ep, _member_client(ep, self.attempt_timeout, keepalive_s, self.security))
             for ep in self.endpoints],
            self.SUSPECT_S, first_member,
        )
        self._watches = _Watches(self)

    def _member(self) -> _Member:
        return self._members.pick()

    def _failed(self, m: _Member, why: str) -> None:
        newly = self._members.failed(m)
        if len(self._members) > 1:
            if newly:
                log.warning("etcd member %s failed (%s); moving to the others", m.endpoint, why)
            self.metrics.etcd_failovers.inc()
            self._watches.move_off(m)

    def _call(self, op: str, fn: Callable[[Any, float], Any], *, retry: bool, revision: int = 0) -> Any:
        """``fn(client, deadline)`` on a member, moving to another when it fails (see the
        module doc); ``retry``: the call is safe to send again (no write)."""
        budget_end = time.monotonic() + self.timeout
        attempt = 0
        stale: int | None = None  # a token etcd refused: renewed before the next attempt
        while True:
            m = self._member()
            remaining = budget_end - time.monotonic()
            # A lone member gets the whole budget: there is nowhere else to go.
            deadline = max(remaining if len(self._members) == 1 else min(self.attempt_timeout, remaining), 0.001)
            self.metrics.etcd_ops.labels(op).inc()
            t0 = time.perf_counter()
            held = 0
            try:
                held, stale = self.tokens.ensure(m, deadline, stale=stale), None
                result = fn(m.client, deadline)
            except (grpc.RpcError, _AuthenticationFailed) as exc:
                rpc = isinstance(exc, grpc.RpcError)
                if rpc and held and _Tokens.refused(exc) and time.monotonic() + 0.05 < budget_end:
                    stale, attempt = held, attempt + 1  # refused before it ran: a new token, the same request
                    continue
                code = exc.code() if rpc and hasattr(exc, "code") else None
                if rpc and code not in _RETRYABLE:
                    raise _error(op, exc, revision) from exc
                self._failed(m, str(code or exc))
                attempt += 1
                # A request whose member gave no token was never sent.
                resend = retry or not rpc or _never_sent(exc)
                if not resend or time.monotonic() + 0.05 >= budget_end or (retry and attempt >= self.read_retries
                                                                          and len(self._members) == 1):
                    raise (_error(op, exc, revision) if rpc else CoordinationError(f"etcd {op} failed: {exc}")) \
                        from exc
                time.sleep(min(_pause(attempt, len(self._members)), max(0.0, budget_end - time.monotonic())))
                continue
            finally:
                self.metrics.etcd_latency.labels(op).observe(time.perf_counter() - t0)
            self._members.worked(m)
            return result

    def _range(self, req: Any, op: str = "range") -> Any:
        return self._call(
            op, lambda c, t: c.kvstub.Range(req, t, metadata=c.metadata), retry=True
        )

    # -- reads -----------------------------------------------------------------
    def get(self, key: str) -> KV | None:
        resp = self._range(_range_req(key, None), "get")
        return _kv(resp.kvs[0]) if resp.kvs else None

    def get_at(self, key: str, revision: int) -> KV | None:
        """``key`` as it was at store revision ``revision`` (``None``: absent then); its
        ``mod_revision`` is the last write at or before ``revision``. Raises
        :class:`HistoryCompacted` once etcd compacted its history past ``revision``."""
        req = _range_req(key, None, revision=revision)
        try:
            resp = self._call(
                "get_at", lambda c, t: c.kvstub.Range(req, t, metadata=c.metadata),
                retry=True, revision=revision,
            )
        except HistoryCompacted:
            raise HistoryCompacted(key, revision) from None
        return _kv(resp.kvs[0]) if resp.kvs else None

    def ceiling(self, key: str, range_end: str) -> KV | None:
        """The first key ``>= key`` and ``< range_end``, or ``None``."""
        resp = self._range(_range_req(key, range_end, 1), "ceiling")
        return _kv(resp.kvs[0]) if resp.kvs else None

    def range(self, start: str, end: str, *, limit: int = 0, last_first: bool = False) -> list[KV]:
        """Keys in ``[start, end)`` in key order, or from the last down (at most ``limit`` when > 0)."""
        order = {"sort_order": etcdrpc.RangeRequest.DESCEND, "sort_target": etcdrpc.RangeRequest.KEY}
        return [_kv(kv) for kv in self._range(_range_req(start, end, limit, **(order if last_first else {}))).kvs]

    def scan(self, start: str, end: str, *, page: int = 1000) -> Iterator[KV]:
        """Every key in ``[start, end)``, fetched ``page`` at a time."""
        while True:
            resp = self._range(_range_req(start, end, page))
            for kv in resp.kvs:
                yield _kv(kv)
            if not resp.more or not resp.kvs:
                return
            start = resp.kvs[-1].key.decode() + "\0"

    def get_many(self, reads: Sequence[Get]) -> list[list[KV]]:
        """Several range reads in one round trip, all at one revision: a transaction of
        reads only, which etcd serves like a linearizable range read (and which is
        retried like any read)."""
        req = etcdrpc.TxnRequest()
        for g in reads:
            _add_op(req.success, g)
        resp = self._call(
            "get_many", lambda c, t: c.kvstub.Txn(req, t, metadata=c.metadata), retry=True
        )
        return [[_kv(kv) for kv in r.response_range.kvs] for r in resp.responses]

    def count(self, start: str, end: str) -> int:
        return int(self._range(_range_req(start, end, count_only=True), "count").count)

    def get_and_count(self, reads: Sequence[tuple[str, str, str]]) -> list[tuple[KV | None, int]]:
        """For each ``(key, start, end)``: ``key``'s value and the number of keys in
        ``[start, end)``. One round trip (all at one revision) per
        :data:`GET_AND_COUNT_BATCH` reads."""
        out: list[tuple[KV | None, int]] = []
        for i in range(0, len(reads), GET_AND_COUNT_BATCH):
            req = etcdrpc.TxnRequest()
            for key, start, end in reads[i : i + GET_AND_COUNT_BATCH]:
                _add_op(req.success, Get(key))
                req.success.add().request_range.CopyFrom(_range_req(start, end, count_only=True))
            resp = self._call("get_and_count", functools.partial(self._txn, req), retry=True)
            rs = resp.responses
            for got, counted in zip(rs[::2], rs[1::2], strict=True):
                kvs = got.response_range.kvs
                out.append(((_kv(kvs[0]) if kvs else None), int(counted.response_range.count)))
        return out

    def keys(self, start: str, end: str, *, limit: int = 0) -> list[str]:
        resp = self._range(_range_req(start, end, limit, keys_only=True), "keys")
        return [kv.key.decode() for kv in resp.kvs]

    # -- writes ----------------------------------------------------------------
    def put(self, key: str, value: bytes, *, lease: int = 0) -> int:
        req = etcdrpc.PutRequest(key=key.encode(), value=value, lease=lease)
        resp = self._call(
            "put", lambda c, t: c.kvstub.Put(req, t, metadata=c.metadata), retry=False
        )
        return int(resp.header.revision)

    def delete_range(self, start: str, end: str | None = None) -> int:
        req = etcdrpc.DeleteRangeRequest(key=start.encode())
        if end is not None:
            req.range_end = end.encode()
        resp = self._call(
            "delete",
            lambda c, t: c.kvstub.DeleteRange(req, t, metadata=c.metadata),
            retry=False,
        )
        return int(resp.deleted)

    def txn(
        self, compares: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op] = ()
    ) -> TxnResult:
        """One etcd transaction. A :class:`CoordinationError` from here means the
        outcome is unknown: the caller must find out by reading, not by retrying blind."""
        req = etcdrpc.TxnRequest()
        for c in compares:
            _add_compare(req.compare, c)
        for o in success:
            _add_op(req.success, o)
        for o in failure:
            _add_op(req.failure, o)
        resp = self._call(
            "txn", lambda c, t: c.kvstub.Txn(req, t, metadata=c.metadata), retry=False
        )
        ran = success if resp.succeeded else failure
        if all(type(o) is Put for o in ran):  # a commit: nothing to read back
            return TxnResult(bool(resp.succeeded), int(resp.header.revision), (None,) * len(ran))
        out: list[list[KV] | int | None] = []
        for r in resp.responses:
            kind = r.WhichOneof("response")
            if kind == "response_range":
                out.append([_kv(kv) for kv in r.response_range.kvs])
            elif kind == "response_delete_range":
                out.append(int(r.response_delete_range.deleted))
            else:
                out.append(None)
        return TxnResult(bool(resp.succeeded), int(resp.header.revision), tuple(out))

    # -- leases and watches ----------------------------------------------------
    def grant_lease(self, ttl: int) -> int:
        req = etcdrpc.LeaseGrantRequest(TTL=ttl, ID=0)
        resp = self._call(
            "lease_grant",
            lambda c, t: c.leasestub.LeaseGrant(req, t, metadata=c.metadata),
            retry=False,
        )
        return int(resp.ID)

    def refresh_lease(self, lease_id: int) -> int:
        """Send one keep-alive; return the remaining TTL (<= 0: the lease is gone)."""

        def call(c: Any, deadline: float) -> Any:
            for resp in c.leasestub.LeaseKeepAlive(
                iter([etcdrpc.LeaseKeepAliveRequest(ID=lease_id)]), deadline, metadata=c.metadata,
            ):
                return resp
            return None

        resp = self._call("lease_keepalive", call, retry=True)
        return int(resp.TTL) if resp is not None else 0

    def revoke_lease(self, lease_id: int) -> None:
        req = etcdrpc.LeaseRevokeRequest(ID=lease_id)
        try:
            self._call(
                "lease_revoke",
                lambda c, t: c.leasestub.LeaseRevoke(req, t, metadata=c.metadata),
                retry=True,
            )
        except CoordinationError as exc:
            if "NOT_FOUND" not in str(exc):
                raise

    def watch(
        self, key: str, callback: Callable[[], None], *, prefix: bool = False
    ) -> Callable[[], None]:
        """Call ``callback()`` (on a watcher thread) after every change to ``key`` (or
        every key under it with ``prefix``), on whichever member is up. Returns a cancel
        function."""
        return self._watches.add(key, prefix, lambda _kv: callback())

    def watch_kvs(self, key: str, callback: Callable[[KV | None], None]) -> Callable[[], None]:
        """Like :meth:`watch` on one key, but hand ``callback`` each put's new value;
        ``None`` for a delete or when changes may have been missed (re-read the key
        then). Returns a cancel function."""
        return self._watches.add(key, False, callback)

    def status(self) -> dict[str, int]:
        """Revision and DB size of the member in use."""
        resp = self._call(
            "status",
            lambda c, t: c.maintenancestub.Status(etcdrpc.StatusRequest(), t, metadata=c.metadata),
            retry=True,
        )
        return {"revision": int(resp.header.revision), "db_size": int(resp.dbSize)}

    @staticmethod
    def _txn(req: Any, c: Any, deadline: float) -> Any:
        return c.kvstub.Txn(req, deadline, metadata=c.metadata)

    def on_member(self, endpoint: str, op: str, fn: Callable[[Any], Any]) -> Any:
        """One RPC to the member behind ``endpoint``, and no other."""
        m = self._members.all[self.endpoints.index(endpoint)]
        self.metrics.etcd_ops.labels(op).inc()
        try:
            return self.tokens.call(m, self.attempt_timeout, fn)
        except _AuthenticationFailed as exc:
            raise CoordinationError(f"{op} on {endpoint}: {exc}") from exc
        except grpc.RpcError as exc:
            raise _error(f"{op} on {endpoint}", exc) from exc

    def close(self) -> None:
        self._watches.close()
        for m in self._members.all:
            m.client.close()

    def __enter__(self) -> Etcd:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
