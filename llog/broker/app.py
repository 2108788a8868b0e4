"""The broker's HTTP API (starlette): produce through a shared BatchingProducer,
consume with long-polling on the tail, consumer-group offsets (commit, describe,
consume from the committed offset). Shapes and status codes: ``schemas.py`` and
``GET /openapi.json``."""

from __future__ import annotations

import asyncio
import hmac
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Generator
from concurrent.futures import Future
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any, cast

import anyio.to_thread
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from llog.broker.filecache import FileTailCache
from llog.broker.schemas import (
    CommitRequest,
    ConsumeRequest,
    FetchPartition,
    InvalidRequest,
    OffsetsQuery,
    ProduceRequest,
    encode_bytes,
    openapi_document,
    parse_commit,
    parse_consume,
    parse_offsets_query,
    parse_produce,
)
from llog.broker.tailcache import TailCache
from llog.broker.wakeup import PartitionTails
from llog.codec import batch
from llog.config import LlogConfig
from llog.connection import Connection
from llog.errors import BackPressure, LlogError, OffsetOutOfRange, SessionExpired, StaleEpoch, UnknownTopic
from llog.groups.admin import describe_group
from llog.groups.epoch import current_epoch
from llog.groups.offsets import Fence, GroupOffsets
from llog.producer import BatchingProducer
from llog.reader import Reader
from llog.records import ConsumedRecord, Record, payload_size
from llog.topics import Topics
from llog.writer import AppendResult

log = logging.getLogger(__name__)

ROUTES = ("/produce", "/consume", "/commit", "/offsets", "/health", "/metrics", "/metrics/prometheus", "/openapi.json")
_OPEN_ROUTES = {"/health", "/openapi.json"}  # no token needed


class Broker:
    """What the routes share; opened in the app's lifespan, closed at shutdown."""

    def __init__(self, config: LlogConfig, *, send_timeout_s: float, tail_cache_bytes: int) -> None:
        self.config = config
        self.conn = Connection(config)
        self.cache = TailCache(tail_cache_bytes)
        self.files = (
            None if config.tail_cache_dir is None
            else FileTailCache(config.tail_cache_dir, self.conn.keys.root, tail_cache_bytes, self.conn.metrics)
        )
        self.reader = Reader(self.conn)
        self.tails: PartitionTails | None = None
        # Partitions already validated (topic cached): produce to them never touches etcd.
        self._ready: set[tuple[str, int]] = set()
        self.producer = BatchingProducer(self.conn, send_timeout_s=send_timeout_s, on_commit=self._committed)

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.tails = PartitionTails(self.conn, loop, owns=self.producer.owns)

    def close(self) -> None:
        try:
            self.producer.close()  # drains: every accepted produce is answered
        finally:
            if self.files is not None:
                self.files.close()
            if self.tails is not None:
                self.tails.close()
            self.reader.close()
            self.conn.close()

    def _committed(self, result: AppendResult, records: list[Record], body: memoryview) -> None:
        # The body is the one just PUT and committed: no need to check its CRC again.
        self.cache.put(result, records, batch.decode(body, verify=False).timestamps)
        if self.files is not None:
            self.files.put(result, body)
        if self.tails is not None:
            self.tails.local_commit((result.topic, result.partition), result.end_offset + 1)

    # -- produce (worker thread) ----------------------------------------------------
    def submit(
        self, req: ProduceRequest, start: int = 0, *, fast: bool = False
    ) -> list[Future[AppendResult] | LlogError]:
        """Hand the request's groups from ``start`` on to the producer. ``fast`` runs on
        the event loop: it stops (returning fewer items) at the first group that could
        block, on etcd (a partition not seen yet) or on a full buffer, and the caller
        finishes the rest on a worker thread."""
        out: list[Future[AppendResult] | LlogError] = []
        for tp in req.topic_partitions[start:]:
            key = (tp.topic, tp.partition)
            if fast and key not in self._ready:
                break
            records = [Record(v) for v in tp.records]  # the writer stamps append time
            try:
                if not fast:
                    self._ensure_topic(tp.topic)
                out.append(self.producer.send_group(
                    tp.topic, tp.partition, records, producer_id=tp.producer_id, sequence=tp.sequence,
                    timeout=0 if fast else None,
                ))
                self._ready.add(key)
            except BackPressure as exc:
                if fast:
                    break
                out.append(exc)
            except LlogError as exc:
                out.append(exc)
        return out

    def _ensure_topic(self, topic: str) -> None:
        if not self.config.auto_create_topics:
            return
        try:
            self.conn.topic(topic)
        except UnknownTopic:
            Topics(self.conn).create(topic, self.config.default_partitions)

    # -- consume (worker thread) ----------------------------------------------------
    def resolve(self, req: ConsumeRequest) -> tuple[ConsumeRequest, dict[int, LlogError]]:
        """Start offsets for the partitions given without ``fetch_offset``: the group's
        committed offset, else ``auto_offset_reset``. Returns the request with them
        filled in, and the errors of partitions that could not be resolved (by index)."""
        assert req.group is not None
        offsets = GroupOffsets(self.conn, req.group)
        parts = list(req.topic_partitions)
        failed: dict[int, LlogError] = {}
        for i, fp in enumerate(parts):
            if fp.fetch_offset is not None:
                continue
            try:
                self.conn.check_partition(fp.topic, fp.partition)
                committed = offsets.get(fp.topic, fp.partition)
                if committed is not None:
                    start = committed.offset
                else:
                    low, high = self.reader.high_watermark(fp.topic, fp.partition)
                    start = low if req.auto_offset_reset == "earliest" else high
            except LlogError as exc:
                failed[i] = exc
                continue
            parts[i] = replace(fp, fetch_offset=start)
        return replace(req, topic_partitions=tuple(parts)), failed

    def fetch(
        self, req: ConsumeRequest, *, io: bool, failed: dict[int, LlogError] | None = None
    ) -> tuple[list[dict[str, Any]], int]:
        """Every partition's records (``failed``: partitions :meth:`resolve` could not
        place). Without ``io`` (on the event loop) raise :class:`_NeedsIO` as soon as a
        partition needs etcd or S3."""
        budget = req.max_bytes
        out: list[dict[str, Any]] = []
        total = 0
        for i, fp in enumerate(req.topic_partitions):
            try:
                if fp.fetch_offset is None:
                    raise (failed or {})[i]
                part, used = self._fetch_one(fp, fp.fetch_offset, budget, io)
            except LlogError as exc:
                out.append({"topic": fp.topic, "partition": fp.partition, "ok": False,
                            "error_type": type(exc).__name__, "error": str(exc)})
                continue
            budget = max(0, budget - used)
            total += used
            out.append(part)
        self.conn.metrics.consume_records.inc(sum(len(p["records"]) for p in out if p["ok"]))
        self.conn.metrics.consume_bytes.inc(total)
        return out, total

    def _fetch_one(self, fp: FetchPartition, offset: int, budget: int, io: bool) -> tuple[dict[str, Any], int]:
        tp = (fp.topic, fp.partition)
        assert self.tails is not None
        known = self.tails.known(tp)
        if known is None:
            if not io:
                raise _NeedsIO
            self.conn.check_partition(fp.topic, fp.partition)  # no watches on names that do not exist
            self.tails.watch(tp)
            known = self.reader.high_watermark(fp.topic, fp.partition)
            self.tails.learn(tp, *known)
        log_start, hwm = known
        if offset < log_start:
            raise OffsetOutOfRange(fp.topic, fp.partition, offset, log_start)
        limit = min(fp.partition_max_bytes, budget)
        records: list[ConsumedRecord] = []
        if offset < hwm and budget > 0:
            cached = self.cache.get(fp.topic, fp.partition, offset, limit)
            if not cached and not io:
                raise _NeedsIO
            source = "hit"
            if not cached and self.files is not None:
                cached = self.files.get(fp.topic, fp.partition, offset, limit)
                source = "file"
            self.conn.metrics.tail_cache_lookups.labels(source if cached else "miss").inc()
            records = cached if cached else self._read(fp, offset, hwm, limit)
        used = sum(map(payload_size, records))
        return {
            "topic": fp.topic, "partition": fp.partition, "ok": True,
            "high_watermark": hwm, "log_start_offset": log_start,
            "next_offset": records[-1].offset + 1 if records else offset,
            "records": [_record_json(r) for r in records],
        }, used

    def _read(self, fp: FetchPartition, offset: int, hwm: int, limit: int) -> list[ConsumedRecord]:
        out: list[ConsumedRecord] = []
        used = 0
        scan = cast(Generator[ConsumedRecord, None, None],
                    self.reader.scan(fp.topic, fp.partition, offset, hwm))
        try:
            for r in scan:
                size = payload_size(r)
                if out and used + size > limit:
                    break
                out.append(r)
                used += size
        finally:
            scan.close()
        return out

    # -- consumer groups (worker thread) -------------------------------------------------
    def commit(self, req: CommitRequest) -> list[dict[str, Any]]:
        """Commit each offset on its own; a refused one leaves that partition unchanged."""
        offsets = GroupOffsets(self.conn, req.group)
        fence = Fence(owner=req.member)
        stale = None
        if req.epoch is not None:
            current = current_epoch(self.conn, req.group)
            if current is None or current.epoch != req.epoch:
                stale = f"epoch {req.epoch} is not the current epoch {0 if current is None else current.epoch}"
            else:
                # The guard compares the epoch key's exact bytes: a bump after this read still fences.
                fence = replace(fence, epoch=current)
        out: list[dict[str, Any]] = []
        for c in req.offsets:
            base = {"topic": c.topic, "partition": c.partition}
            try:
                if stale is not None:
                    raise StaleEpoch(req.group, c.topic, c.partition, c.offset, stale)
                done = offsets.commit(
                    c.topic, c.partition, c.offset, fence=fence, member=req.member or "", reset=req.reset
                )
            except LlogError as exc:
                out.append({**base, "ok": False, "error_type": type(exc).__name__, "error": str(exc)})
                continue
            out.append({**base, "ok": True, "offset": done.offset, "epoch": done.epoch,
                        "member": done.member, "updated_at_ms": done.updated_at_ms})
        return out

    def describe(self, query: OffsetsQuery) -> dict[str, Any]:
        topics = None if query.topic is None else [query.topic]
        d = describe_group(self.conn, query.group, topics)
        rows = [p for p in d.partitions if query.topic is None or p.topic == query.topic]
        return {
            "group": d.group, "members": list(d.members), "epoch": d.epoch, "epoch_owner": d.epoch_owner,
            "partitions": [{
                "topic": p.topic, "partition": p.partition, "committed": p.committed,
                "log_start_offset": p.log_start_offset, "next_offset": p.next_offset, "lag": p.lag,
                "owner": p.owner,
            } for p in rows],
            "total_lag": sum(p.lag for p in rows),
        }


class _NeedsIO(Exception):
    """A fetch on the event loop reached a partition it cannot serve from memory."""


def _record_json(r: ConsumedRecord) -> dict[str, Any]:
    return {
        "offset": r.offset, "timestamp": r.timestamp,
        "key": None if r.key is None else encode_bytes(r.key),
        "value": encode_bytes(r.value),
        "headers": [[k, encode_bytes(v)] for k, v in r.headers],
    }


def _error(status: int, error_type: str, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": message, "error_type": error_type, **extra}, status_code=status)


async def _body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _TooLarge(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _TooLarge(limit)
        chunks.append(chunk)
    return b"".join(chunks)


class _TooLarge(Exception):
    def __init__(self, limit: int) -> None:
        super().__init__(f"request body exceeds the limit of {limit} bytes")


class BrokerApp:
    """The broker's ASGI app. Outermost layer: bearer-token check and per-route
    request metrics; :meth:`begin_shutdown` starts a graceful stop."""

    def __init__(self, app: ASGIApp, broker_ref: Callable[[], Broker | None], token: str | None) -> None:
        self.app = app
        self.broker_ref = broker_ref
        self.token = token.encode() if token else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        route = path if path in ROUTES else "other"
        status = [500]

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        start = time.perf_counter()
        try:
            if self.token is not None and path not in _OPEN_ROUTES and not self._authorized(scope):
                resp = _error(401, "Unauthorized", "missing or wrong bearer token")
                resp.headers["www-authenticate"] = "Bearer"
                await resp(scope, receive, send_wrapper)
            else:
                await self.app(scope, receive, send_wrapper)
        finally:
            broker = self.broker_ref()
            if broker is not None:
                m = broker.conn.metrics
                m.http_requests.labels(route, str(status[0])).inc()
                m.http_latency.labels(route).observe(time.perf_counter() - start)

    def begin_shutdown(self) -> None:
        """Before the server waits for in-flight requests: drain the producer (so held
        produces get their answer) and end long-polls, on a background thread."""
        broker = self.broker_ref()
        if broker is None:
            return
        if broker.tails is not None:
            broker.tails.release_waiters()
        threading.Thread(target=broker.producer.close, name="llog-broker-drain", daemon=True).start()

    def _authorized(self, scope: Scope) -> bool:
        assert self.token is not None
        for name, value in scope["headers"]:
            if name == b"authorization":
                scheme, _, cred = value.partition(b" ")
                return scheme.lower() == b"bearer" and hmac.compare_digest(cred.strip(), self.token)
        return False


def create_app(
    config: LlogConfig,
    *,
    max_request_bytes: int = 16 * 1024 * 1024,
    send_timeout_s: float = 5.0,
    tail_cache_bytes: int = 64 * 1024 * 1024,
    on_ready: Callable[[], None] | None = None,
) -> BrokerApp:
    """The broker as an ASGI app; resources open in its lifespan."""
    holder: list[Broker] = []

    def broker() -> Broker:
        return holder[0]

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        b = await anyio.to_thread.run_sync(
            lambda: Broker(config, send_timeout_s=send_timeout_s, tail_cache_bytes=tail_cache_bytes)
        )
        b.start(asyncio.get_running_loop())
        holder.append(b)
        if on_ready is not None:
            on_ready()
        try:
            yield
        finally:
            await anyio.to_thread.run_sync(b.close)

    async def produce(request: Request) -> Response:
        req = parse_produce(await _body(request, max_request_bytes))
        b = broker()
        submitted = b.submit(req, fast=True)
        if len(submitted) < len(req.topic_partitions):
            submitted += await anyio.to_thread.run_sync(b.submit, req, len(submitted))
        results: list[dict[str, Any]] = []
        errors: list[LlogError | BaseException] = []
        for tp, item in zip(req.topic_partitions, submitted, strict=True):
            base = {"topic": tp.topic, "partition": tp.partition}
            try:
                if isinstance(item, LlogError):
                    raise item
                res = await asyncio.wrap_future(item)
            except LlogError as exc:
                errors.append(exc)
                results.append({**base, "ok": False, "error_type": type(exc).__name__, "error": str(exc)})
                continue
            b.conn.metrics.produce_records.inc(res.count)
            b.conn.metrics.produce_bytes.inc(sum(map(len, tp.records)))
            results.append({
                **base, "ok": True, "start_offset": res.start_offset, "end_offset": res.end_offset,
                "count": res.count, "index_key": res.index_key,
                "wal_uri": f"{config.object_store.rstrip('/')}/{res.data_key}",
            })
        if not errors:
            status = 200
        elif len(errors) == len(results) and all(isinstance(e, (BackPressure, SessionExpired)) for e in errors):
            # Nothing was accepted and a retry can succeed: the client should back off and retry.
            status = 503
        else:
            status = 409
        return JSONResponse(
            {"results": results, "success_count": len(results) - len(errors), "error_count": len(errors)},
            status_code=status,
        )

    async def consume(request: Request) -> Response:
        req = parse_consume(await _body(request, max_request_bytes))
        b = broker()
        assert b.tails is not None
        unresolved: dict[int, LlogError] = {}
        if any(fp.fetch_offset is None for fp in req.topic_partitions):
            # Once per request: the long-poll below re-fetches from the same start.
            req, unresolved = await anyio.to_thread.run_sync(b.resolve, req)
        tps = [(fp.topic, fp.partition) for fp in req.topic_partitions]
        deadline = time.monotonic() + req.max_wait_ms / 1000.0
        while True:
            # Versions first: a change landing during the fetch then ends the wait at once.
            seen = b.tails.versions(tps)
            try:
                parts, total = b.fetch(req, io=False, failed=unresolved)
            except _NeedsIO:
                parts, total = await anyio.to_thread.run_sync(lambda: b.fetch(req, io=True, failed=unresolved))
            failed = sum(1 for p in parts if not p["ok"])
            left = deadline - time.monotonic()
            if total >= req.min_bytes or failed or left <= 0 or b.tails.stopping:
                break
            with b.conn.metrics.consume_waiting.track_inprogress():
                await b.tails.wait(tps, seen, left)
        return JSONResponse(
            {"topic_partitions": parts, "success_count": len(parts) - failed, "error_count": failed},
            status_code=409 if failed else 200,
        )

    async def commit(request: Request) -> Response:
        req = parse_commit(await _body(request, max_request_bytes))
        results = await anyio.to_thread.run_sync(broker().commit, req)
        failed = sum(1 for r in results if not r["ok"])
        return JSONResponse(
            {"group": req.group, "results": results, "success_count": len(results) - failed,
             "error_count": failed},
            status_code=409 if failed else 200,
        )

    async def offsets(request: Request) -> Response:
        query = parse_offsets_query(request.query_params.multi_items())
        try:
            return JSONResponse(await anyio.to_thread.run_sync(broker().describe, query))
        except UnknownTopic as exc:
            return _error(404, "UnknownTopic", str(exc))

    async def health(_request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def metrics_json(_request: Request) -> Response:
        return JSONResponse(broker().conn.metrics.snapshot())

    async def metrics_prometheus(_request: Request) -> Response:
        return Response(generate_latest(broker().conn.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    doc = openapi_document()

    async def openapi(_request: Request) -> Response:
        return JSONResponse(doc)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        kind = {404: "NotFound", 405: "MethodNotAllowed"}.get(exc.status_code, "HTTPError")
        return _error(exc.status_code, kind, f"{exc.detail}: {request.method} {request.url.path}")

    async def too_large(_request: Request, exc: Exception) -> Response:
        return _error(413, "RequestTooLarge", str(exc))

    async def invalid_request(_request: Request, exc: Exception) -> Response:
        assert isinstance(exc, InvalidRequest)
        return _error(400, "InvalidRequest", str(exc), field=exc.field)

    handlers: dict[Any, Callable[[Request, Exception], Awaitable[Response]]] = {
        HTTPException: http_error, _TooLarge: too_large, InvalidRequest: invalid_request,
    }
    app = Starlette(
        routes=[
            Route("/produce", produce, methods=["POST"]),
            Route("/consume", consume, methods=["POST"]),
            Route("/commit", commit, methods=["POST"]),
            Route("/offsets", offsets, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
            Route("/metrics", metrics_json, methods=["GET"]),
            Route("/metrics/prometheus", metrics_prometheus, methods=["GET"]),
            Route("/openapi.json", openapi, methods=["GET"]),
        ],
        exception_handlers=handlers,
        lifespan=lifespan,
    )
    return BrokerApp(app, lambda: holder[0] if holder else None, config.broker_token)
