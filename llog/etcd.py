"""A thin layer over the ``etcd3`` module: exactly what the protocol needs.

get, range scans, ceiling lookup, transactions with revision compares, delete range,
leases and watches, with typed results (:class:`KV`, :class:`TxnResult`), metrics, and
failover across endpoints. Requests are built from etcd's own protobuf messages so a
transaction returns its header revision (the new ``mod_revision`` of what it wrote),
which callers cache to make their next compare-and-swap without a read. Maintenance
(compaction, defragmentation, alarms) is :mod:`llog.etcd_maintenance`.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Literal

import etcd3
import etcd3.watch
import grpc
from etcd3 import etcdrpc

from llog.errors import CoordinationError, EtcdSpaceExhausted, HistoryCompacted
from llog.metrics import Metrics

# python3-etcd3 0.13's watch.py calls six.itervalues() without importing six, so a watch
# stream that ends kills its thread with NameError and leaves the callbacks un-notified.
if not hasattr(etcd3.watch, "six"):
    etcd3.watch.six = SimpleNamespace(itervalues=lambda d: iter(d.values()))

log = logging.getLogger(__name__)

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


def _kv(kv: Any) -> KV:
    return KV(
        kv.key.decode(), kv.value, kv.mod_revision, kv.create_revision, kv.version, kv.lease
    )


class Etcd:
    """One connection to an etcd cluster. Thread-safe; close it (or use ``with``)."""

    def __init__(
        self,
        endpoints: Sequence[str],
        *,
        timeout: float = 10.0,
        metrics: Metrics | None = None,
        read_retries: int = 5,
    ) -> None:
        if not endpoints:
            raise CoordinationError("no etcd endpoints given")
        self.endpoints = list(endpoints)
        self.timeout = timeout
        self.metrics = metrics if metrics is not None else Metrics()
        self.read_retries = read_retries
        self._lock = threading.Lock()
        self._current = 0
        self._client = self._connect(self._current)

    def _connect(self, i: int) -> Any:
        host, _, port = self.endpoints[i].rpartition(":")
        return etcd3.client(
            host=host,
            port=int(port),
            timeout=self.timeout,
            grpc_options={
                "grpc.enable_http_proxy": 0,
                # gRPC backs a failed connection off exponentially, by default up to
                # two minutes: a client would not see etcd come back for that long.
                "grpc.initial_reconnect_backoff_ms": 100,
                "grpc.max_reconnect_backoff_ms": _MAX_RECONNECT_BACKOFF_MS,
            }.items(),
        )

    def _failover(self, failed: Any) -> None:
        with self._lock:
            if self._client is not failed or len(self.endpoints) == 1:
                return
            self._current = (self._current + 1) % len(self.endpoints)
            log.warning("etcd endpoint failed; switching to %s", self.endpoints[self._current])
            old, self._client = self._client, self._connect(self._current)
        old.close()

    def _call(self, op: str, fn: Callable[[Any], Any], *, retry: bool, revision: int = 0) -> Any:
        attempts = self.read_retries if retry else 1
        for attempt in range(attempts):
            client = self._client
            self.metrics.etcd_ops.labels(op).inc()
            t0 = time.perf_counter()
            try:
                return fn(client)
            except grpc.RpcError as exc:
                code = exc.code() if hasattr(exc, "code") else None
                if code in _RETRYABLE:
                    self._failover(client)
                    if attempt + 1 < attempts:
                        # 0.05, 0.1, 0.2, 0.4 s: together longer than the channel's
                        # reconnect backoff (at most 0.5 s, +20% jitter), so a read
                        # outlasts an etcd restart.
                        time.sleep(0.05 * 2**attempt)
                        continue
                raise _error(op, exc, revision) from exc
            finally:
                self.metrics.etcd_latency.labels(op).observe(time.perf_counter() - t0)
        raise AssertionError("unreachable")

    def _range(self, req: Any, op: str = "range") -> Any:
        return self._call(
            op, lambda c: c.kvstub.Range(req, self.timeout, metadata=c.metadata), retry=True
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
                "get_at", lambda c: c.kvstub.Range(req, self.timeout, metadata=c.metadata),
                retry=True, revision=revision,
            )
        except HistoryCompacted:
            raise HistoryCompacted(key, revision) from None
        return _kv(resp.kvs[0]) if resp.kvs else None

    def ceiling(self, key: str, range_end: str) -> KV | None:
        """The first key ``>= key`` and ``< range_end``, or ``None``."""
        resp = self._range(_range_req(key, range_end, 1), "ceiling")
        return _kv(resp.kvs[0]) if resp.kvs else None

    def range(self, start: str, end: str, *, limit: int = 0) -> list[KV]:
        """Keys in ``[start, end)`` in key order (at most ``limit`` when > 0)."""
        return [_kv(kv) for kv in self._range(_range_req(start, end, limit)).kvs]

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
            "get_many", lambda c: c.kvstub.Txn(req, self.timeout, metadata=c.metadata), retry=True
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
            "put", lambda c: c.kvstub.Put(req, self.timeout, metadata=c.metadata), retry=False
        )
        return int(resp.header.revision)

    def delete_range(self, start: str, end: str | None = None) -> int:
        req = etcdrpc.DeleteRangeRequest(key=start.encode())
        if end is not None:
            req.range_end = end.encode()
        resp = self._call(
            "delete",
            lambda c: c.kvstub.DeleteRange(req, self.timeout, metadata=c.metadata),
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
            "txn", lambda c: c.kvstub.Txn(req, self.timeout, metadata=c.metadata), retry=False
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
            lambda c: c.leasestub.LeaseGrant(req, self.timeout, metadata=c.metadata),
            retry=False,
        )
        return int(resp.ID)

    def refresh_lease(self, lease_id: int) -> int:
        """Send one keep-alive; return the remaining TTL (<= 0: the lease is gone)."""

        def call(c: Any) -> Any:
            for resp in c.leasestub.LeaseKeepAlive(
                iter([etcdrpc.LeaseKeepAliveRequest(ID=lease_id)]), self.timeout,
                metadata=c.metadata,
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
                lambda c: c.leasestub.LeaseRevoke(req, self.timeout, metadata=c.metadata),
                retry=True,
            )
        except CoordinationError as exc:
            if "NOT_FOUND" not in str(exc):
                raise

    def watch(
        self, key: str, callback: Callable[[], None], *, prefix: bool = False
    ) -> Callable[[], None]:
        """Call ``callback()`` (on etcd3's watcher thread) after every change to
        ``key`` (or every key under it with ``prefix``). Returns a cancel function."""
        client = self._client

        def on_event(_response: Any) -> None:
            callback()

        wid = client.add_watch_prefix_callback(key, on_event) if prefix else client.add_watch_callback(key, on_event)
        self.metrics.etcd_ops.labels("watch").inc()
        return lambda: client.cancel_watch(wid)

    def watch_kvs(self, key: str, callback: Callable[[KV | None], None]) -> Callable[[], None]:
        """Like :meth:`watch` on one key, but hand ``callback`` each put's new value;
        ``None`` for a delete or a watch failure (re-read the key then). Returns a
        cancel function."""
        client = self._client

        def on_event(response: Any) -> None:
            events = getattr(response, "events", None)
            if events is None:
                callback(None)
                return
            for ev in events:
                callback(_kv(ev) if type(ev).__name__ == "PutEvent" else None)

        wid = client.add_watch_callback(key, on_event)
        self.metrics.etcd_ops.labels("watch").inc()
        return lambda: client.cancel_watch(wid)

    def status(self) -> dict[str, int]:
        """Revision and DB size of the member in use."""
        resp = self._call(
            "status",
            lambda c: c.maintenancestub.Status(
                etcdrpc.StatusRequest(), self.timeout, metadata=c.metadata
            ),
            retry=True,
        )
        return {"revision": int(resp.header.revision), "db_size": int(resp.dbSize)}

    def _txn(self, req: Any, c: Any) -> Any:
        return c.kvstub.Txn(req, self.timeout, metadata=c.metadata)

    def on_member(self, endpoint: str, op: str, fn: Callable[[Any], Any]) -> Any:
        """One RPC to the member behind ``endpoint`` (not the failover client)."""
        i = self.endpoints.index(endpoint)
        with self._lock:
            shared = self._client if i == self._current else None
        client = shared if shared is not None else self._connect(i)
        self.metrics.etcd_ops.labels(op).inc()
        try:
            return fn(client)
        except grpc.RpcError as exc:
            raise _error(f"{op} on {endpoint}", exc) from exc
        finally:
            if shared is None:
                client.close()

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> Etcd:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
