"""The etcd client, :class:`Etcd`: reads, transactions, leases and watches on one
member at a time, with metrics and failover across members.

Failover: with several members each attempt has a short deadline
(``attempt_timeout``), each call a budget (``timeout``): a member that stops answering —
paused, partitioned, dead — costs a call one attempt before it moves on, and is passed
over for :data:`Etcd.SUSPECT_S`. A lone member gets the whole budget for each attempt.
Reads, read-only transactions and lease calls are tried again on another member; a
write is sent again only when it provably never reached a member (no connection, or a
member without a leader, or etcd refused its token: :class:`~llog.etcd.auth.Tokens`).
Any other failure of a write is an unknown outcome (:class:`CoordinationError`), which
the caller resolves by reading (spec §8.5), never by a blind resend. Watches move with
the members (:mod:`llog.etcd.watches`). Maintenance (compaction, defragmentation,
alarms) is :mod:`llog.etcd.maintenance`.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import etcd3
import grpc
from etcd3 import etcdrpc

from llog.errors import CoordinationError, HistoryCompacted
from llog.etcd.auth import AuthenticationFailed, EtcdSecurity, Tokens
from llog.etcd.members import RETRYABLE, Member, Members, failover_pause, never_sent, rpc_error
from llog.etcd.operations import KV, Compare, Get, Op, Put, TxnResult, add_compare, add_op, kv_of, range_request
from llog.etcd.watches import Watches
from llog.metrics import Metrics

log = logging.getLogger(__name__)

#: Reads per get_and_count transaction: two operations each, within etcd's default
#: ``--max-txn-ops`` of 128.
GET_AND_COUNT_BATCH = 64
#: Longest wait between attempts to reconnect to an etcd that went away.
_MAX_RECONNECT_BACKOFF_MS = 500


def _member_client(endpoint: str, attempt_timeout: float, keepalive_s: float, security: EtcdSecurity) -> Any:
    """A python3-etcd3 client of the member at ``endpoint`` only (over TLS when
    ``security`` has a CA; its users' token is llog's business: :class:`~llog.etcd.auth.Tokens`)."""
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
        self.tokens = Tokens(self.security, self.metrics)
        self._members = Members(
            [Member(ep, _member_client(ep, self.attempt_timeout, keepalive_s, self.security))
             for ep in self.endpoints],
            self.SUSPECT_S, first_member,
        )
        self._watches = Watches(self._members, self.tokens, self.metrics, self.attempt_timeout, self._failed)

    def _member(self) -> Member:
        return self._members.pick()

    def _failed(self, m: Member, why: str) -> None:
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
            except (grpc.RpcError, AuthenticationFailed) as exc:
                rpc = isinstance(exc, grpc.RpcError)
                if rpc and held and Tokens.refused(exc) and time.monotonic() + 0.05 < budget_end:
                    stale, attempt = held, attempt + 1  # refused before it ran: a new token, the same request
                    continue
                code = exc.code() if rpc and hasattr(exc, "code") else None
                if rpc and code not in RETRYABLE:
                    raise rpc_error(op, exc, revision) from exc
                self._failed(m, str(code or exc))
                attempt += 1
                # A request whose member gave no token was never sent.
                resend = retry or not rpc or never_sent(exc)
                if not resend or time.monotonic() + 0.05 >= budget_end or (retry and attempt >= self.read_retries
                                                                          and len(self._members) == 1):
                    raise (rpc_error(op, exc, revision) if rpc else CoordinationError(f"etcd {op} failed: {exc}")) \
                        from exc
                time.sleep(min(failover_pause(attempt, len(self._members)), max(0.0, budget_end - time.monotonic())))
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
        resp = self._range(range_request(key, None), "get")
        return kv_of(resp.kvs[0]) if resp.kvs else None

    def get_at(self, key: str, revision: int) -> KV | None:
        """``key`` as it was at store revision ``revision`` (``None``: absent then); its
        ``mod_revision`` is the last write at or before ``revision``. Raises
        :class:`HistoryCompacted` once etcd compacted its history past ``revision``."""
        req = range_request(key, None, revision=revision)
        try:
            resp = self._call(
                "get_at", lambda c, t: c.kvstub.Range(req, t, metadata=c.metadata),
                retry=True, revision=revision,
            )
        except HistoryCompacted:
            raise HistoryCompacted(key, revision) from None
        return kv_of(resp.kvs[0]) if resp.kvs else None

    def ceiling(self, key: str, range_end: str) -> KV | None:
        """The first key ``>= key`` and ``< range_end``, or ``None``."""
        resp = self._range(range_request(key, range_end, 1), "ceiling")
        return kv_of(resp.kvs[0]) if resp.kvs else None

    def range(self, start: str, end: str, *, limit: int = 0, last_first: bool = False) -> list[KV]:
        """Keys in ``[start, end)`` in key order, or from the last down (at most ``limit`` when > 0)."""
        order = {"sort_order": etcdrpc.RangeRequest.DESCEND, "sort_target": etcdrpc.RangeRequest.KEY}
        return [kv_of(kv) for kv in self._range(range_request(start, end, limit, **(order if last_first else {}))).kvs]

    def scan(self, start: str, end: str, *, page: int = 1000) -> Iterator[KV]:
        """Every key in ``[start, end)``, fetched ``page`` at a time."""
        while True:
            resp = self._range(range_request(start, end, page))
            for kv in resp.kvs:
                yield kv_of(kv)
            if not resp.more or not resp.kvs:
                return
            start = resp.kvs[-1].key.decode() + "\0"

    def get_many(self, reads: Sequence[Get]) -> list[list[KV]]:
        """Several range reads in one round trip, all at one revision: a transaction of
        reads only, which etcd serves like a linearizable range read (and which is
        retried like any read)."""
        req = etcdrpc.TxnRequest()
        for g in reads:
            add_op(req.success, g)
        resp = self._call(
            "get_many", lambda c, t: c.kvstub.Txn(req, t, metadata=c.metadata), retry=True
        )
        return [[kv_of(kv) for kv in r.response_range.kvs] for r in resp.responses]

    def count(self, start: str, end: str) -> int:
        return int(self._range(range_request(start, end, count_only=True), "count").count)

    def get_and_count(self, reads: Sequence[tuple[str, str, str]]) -> list[tuple[KV | None, int]]:
        """For each ``(key, start, end)``: ``key``'s value and the number of keys in
        ``[start, end)``. One round trip (all at one revision) per
        :data:`GET_AND_COUNT_BATCH` reads."""
        out: list[tuple[KV | None, int]] = []
        for i in range(0, len(reads), GET_AND_COUNT_BATCH):
            req = etcdrpc.TxnRequest()
            for key, start, end in reads[i : i + GET_AND_COUNT_BATCH]:
                add_op(req.success, Get(key))
                req.success.add().request_range.CopyFrom(range_request(start, end, count_only=True))
            resp = self._call("get_and_count", functools.partial(self._txn, req), retry=True)
            rs = resp.responses
            for got, counted in zip(rs[::2], rs[1::2], strict=True):
                kvs = got.response_range.kvs
                out.append(((kv_of(kvs[0]) if kvs else None), int(counted.response_range.count)))
        return out

    def keys(self, start: str, end: str, *, limit: int = 0) -> list[str]:
        resp = self._range(range_request(start, end, limit, keys_only=True), "keys")
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
            add_compare(req.compare, c)
        for o in success:
            add_op(req.success, o)
        for o in failure:
            add_op(req.failure, o)
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
                out.append([kv_of(kv) for kv in r.response_range.kvs])
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
        except AuthenticationFailed as exc:
            raise CoordinationError(f"{op} on {endpoint}: {exc}") from exc
        except grpc.RpcError as exc:
            raise rpc_error(f"{op} on {endpoint}", exc) from exc

    def close(self) -> None:
        self._watches.close()
        for m in self._members.all:
            m.client.close()

    def __enter__(self) -> Etcd:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
