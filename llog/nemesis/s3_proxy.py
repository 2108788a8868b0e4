"""A fault-injecting, latency-adding HTTP proxy in front of an S3-compatible server.

It reads each request (head and body, as boto3 sends them), classifies it (GET, PUT,
DELETE, LIST, HEAD, POST), draws a fault from its :class:`~llog.nemesis.faults.FaultPlan`
and a delay from its latency profile, forwards it upstream on a connection of its own
and streams the response back after the delay, or breaks the exchange as the fault
says. The proxy runs its own asyncio loop on a thread (:meth:`S3Proxy.start` /
:meth:`S3Proxy.stop`), or as a process: ``python -m llog.nemesis``.

Control, from Python (:meth:`S3Proxy.set_plan`, :meth:`S3Proxy.set_latency`,
:meth:`S3Proxy.state`) or over HTTP on the proxy's own port (a bucket name cannot start
with ``_``, so these paths never reach S3):

- ``GET /_nemesis/state``: plan, profile, requests by operation, faults injected by kind;
- ``PUT /_nemesis/faults`` with a plan's JSON (``{"rules": [...]}``);
- ``PUT /_nemesis/latency`` with ``{"profile": "standard", "seed": 1}``;
- ``GET /_nemesis/metrics``: the ``llog_nemesis_*`` metrics in Prometheus text format.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import threading
from collections import Counter
from typing import Any
from urllib.parse import parse_qs, urlsplit

from llog.errors import ConfigError
from llog.nemesis.faults import DROP, ERROR_500, ERROR_503, SLOW, TIMEOUT, FaultPlan, FaultRule
from llog.nemesis.http import (
    STREAM_LIMIT,
    Head,
    HttpParseError,
    copy_body,
    read_body,
    read_head,
    request_framing,
    response_framing,
    s3_error,
    simple_response,
)
from llog.nemesis.latency import LatencyProfile, LatencySampler, profile, quantile
from llog.nemesis.metrics import NemesisMetrics

log = logging.getLogger(__name__)

CONTROL_PREFIX = "/_nemesis/"
_Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]


def classify(method: str, target: str) -> str:
    """The operation class of a path-style S3 request (what fault rules filter on)."""
    path, _, query = target.partition("?")
    if method == "GET":
        return "LIST" if len([s for s in path.split("/") if s]) <= 1 else "GET"
    if method == "POST" and "delete" in parse_qs(query, keep_blank_values=True):
        return "DELETE"
    return method if method in ("PUT", "DELETE", "HEAD") else "POST"


class S3Proxy:
    """A proxy from ``host:port`` (0: a free port) to ``upstream_url``."""

    def __init__(
        self,
        upstream_url: str,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        latency: str | LatencyProfile = "none",
        seed: int = 0,
        plan: FaultPlan | None = None,
    ) -> None:
        up = urlsplit(upstream_url)
        if up.scheme != "http" or not up.hostname:
            raise ConfigError(f"S3 proxy upstream {upstream_url!r} must be an http:// URL")
        self.upstream = (up.hostname, up.port or 80)
        self.host = host
        self.port = port
        self.metrics = NemesisMetrics()
        self._lock = threading.Lock()
        self._seed = seed
        self._plan = plan or FaultPlan()
        self._fault_rng = random.Random(seed)
        prof = profile(latency) if isinstance(latency, str) else latency
        self._sampler = LatencySampler(prof, seed)
        self._injected: Counter[str] = Counter()
        self._requests: Counter[str] = Counter()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._conns: set[asyncio.Task[None]] = set()

    # -- lifecycle -------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 10.0) -> S3Proxy:
        """Listen on a thread of its own; returns once the port is bound."""
        self._thread = threading.Thread(target=self._run, name="s3-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout) or self._error is not None:
            self.stop()
            raise ConfigError(f"S3 proxy did not start on {self.host}:{self.port}: {self._error}")
        log.info("S3 proxy %s -> %s:%d, latency %s", self.url, *self.upstream, self._sampler.profile.name)
        return self

    def stop(self) -> None:
        """Close the listener and every connection, then join the thread."""
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop ended already
                loop.call_soon_threadsafe(stopping.set)
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> S3Proxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        except BaseException as exc:  # reported by start(); the thread ends either way
            self._error = exc
            self._ready.set()
        finally:
            loop.close()

    async def _serve(self) -> None:
        self._stopping = asyncio.Event()
        server = await asyncio.start_server(self._accept, self.host, self.port, limit=STREAM_LIMIT)
        self.port = int(server.sockets[0].getsockname()[1])
        self._ready.set()
        async with server:
            await self._stopping.wait()
            server.close()
            for task in list(self._conns):
                task.cancel()
            await asyncio.gather(*self._conns, return_exceptions=True)

    # -- control ---------------------------------------------------------------------

    @property
    def plan(self) -> FaultPlan:
        with self._lock:
            return self._plan

    def set_plan(self, plan: FaultPlan) -> None:
        """Apply ``plan`` from the next request on (an empty plan: no faults)."""
        with self._lock:
            self._plan = plan
        log.info("S3 proxy %s: faults %s", self.url, plan.to_json())

    def set_latency(self, latency: str | LatencyProfile, seed: int | None = None) -> None:
        """Draw delays from ``latency`` from now on (a fresh sampler: draws restart)."""
        prof = profile(latency) if isinstance(latency, str) else latency
        with self._lock:
            self._sampler = LatencySampler(prof, self._seed if seed is None else seed)

    @property
    def sampler(self) -> LatencySampler:
        with self._lock:
            return self._sampler

    def injected(self) -> dict[str, int]:
        """Faults injected so far, by kind."""
        with self._lock:
            return dict(self._injected)

    def requests(self) -> dict[str, int]:
        """S3 requests received so far, by operation class."""
        with self._lock:
            return dict(self._requests)

    def state(self) -> dict[str, Any]:
        """What ``GET /_nemesis/state`` answers."""
        sampler = self.sampler
        draws = sampler.draws()
        return {
            "url": self.url,
            "upstream": f"http://{self.upstream[0]}:{self.upstream[1]}",
            "faults": self.plan.to_json(),
            "latency": {
                "profile": sampler.profile.name,
                "median_ms": sampler.profile.median_ms,
                "p99_ms": sampler.profile.p99_ms,
                "draws": len(draws),
                "drawn_p50_ms": quantile(draws, 0.5),
                "drawn_p99_ms": quantile(draws, 0.99),
            },
            "requests": self.requests(),
            "injected": self.injected(),
        }

    # -- per connection --------------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._conns.add(task)
        upstream: list[_Streams] = []  # at most one, opened on first use and reused
        try:
            while True:
                head = await read_head(reader)
                if head is None:
                    return
                if head.first[1].startswith(CONTROL_PREFIX):
                    await self._control(head, reader, writer)
                    continue
                if not await self._exchange(head, reader, writer, upstream):
                    return
        except (HttpParseError, OSError, asyncio.IncompleteReadError, ValueError) as exc:
            log.debug("S3 proxy connection ended: %r", exc)
        except asyncio.CancelledError:
            # stop() cancels open connections; ending quietly keeps Python 3.11's
            # start_server callback from logging the cancellation as an error.
            return
        finally:
            self._conns.discard(task)
            for _, up_writer in upstream:
                up_writer.close()
            writer.close()

    def _draw(self, op: str) -> tuple[FaultRule | None, float]:
        with self._lock:
            self._requests[op] += 1
            rule = self._plan.choose(op, self._fault_rng)
            if rule is not None:
                self._injected[rule.kind] += 1
            delay_ms = self._sampler.draw_ms()
        self.metrics.requests.labels(op).inc()
        if rule is not None:
            self.metrics.faults.labels(rule.kind, op).inc()
            if rule.kind == SLOW:
                delay_ms += rule.delay_ms
        return rule, delay_ms

    async def _exchange(
        self, head: Head, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, upstream: list[_Streams]
    ) -> bool:
        """Serve one request; False when the client connection must be closed."""
        method, target = head.first[0], head.first[1]
        resource = target.split("?", 1)[0]
        op = classify(method, target)
        rule, delay_ms = self._draw(op)
        kind = rule.kind if rule is not None else None
        framing = request_framing(head)
        expects = head.get("expect").lower() == "100-continue"

        if kind in (ERROR_500, ERROR_503):
            await self._delay(delay_ms)
            status = 500 if kind == ERROR_500 else 503
            if expects:  # refuse before the body is sent, as S3 does, and drop the connection
                writer.write(s3_error(status, resource, with_body=method != "HEAD", close=True))
                await writer.drain()
                return False
            await copy_body(framing, reader, None)
            writer.write(s3_error(status, resource, with_body=method != "HEAD"))
            await writer.drain()
            return not head.wants_close
        if kind == TIMEOUT:
            while await reader.read(64 * 1024):  # hold until the client gives up
                pass
            return False
        if expects:  # the proxy takes the body; upstream sees a plain request
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            await writer.drain()
        if kind == DROP and not framing.empty:
            if framing.kind == "length":
                await reader.readexactly(framing.length // 2)
            return False

        up_reader, up_writer = await self._upstream(upstream)
        up_writer.write(head.without("expect").encode())
        await copy_body(framing, reader, up_writer)
        await up_writer.drain()
        resp = await read_head(up_reader)
        if resp is None:
            raise ConnectionError(f"upstream closed the connection on {method} {target}")
        resp_framing = response_framing(resp, method)
        await self._delay(delay_ms)
        if kind == DROP:
            body = await read_body(resp_framing, up_reader)
            if body:
                writer.write(resp.encode() + body[: len(body) // 2])
                await writer.drain()
            return False
        # The client keeps its connection whenever the framing allows, as S3's do: the
        # local server closes every one (Werkzeug), which would make each request pay
        # a new connection that a client of S3 does not.
        writer.write((resp if resp_framing.kind == "close" else resp.without("connection")).encode())
        await copy_body(resp_framing, up_reader, writer)
        await writer.drain()
        if resp_framing.kind == "close" or resp.wants_close:
            up_writer.close()
            upstream.clear()
        return not (head.wants_close or resp_framing.kind == "close")

    async def _delay(self, delay_ms: float) -> None:
        if delay_ms > 0:
            self.metrics.added_latency.observe(delay_ms / 1000)
            await asyncio.sleep(delay_ms / 1000)

    async def _upstream(self, upstream: list[_Streams]) -> _Streams:
        if upstream and (upstream[0][0].at_eof() or upstream[0][1].is_closing()):
            upstream.pop()[1].close()  # the server closed it while idle: not a fault of ours
        if not upstream:
            upstream.append(await asyncio.open_connection(*self.upstream, limit=STREAM_LIMIT))
        return upstream[0]

    async def _control(self, head: Head, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        body = await read_body(request_framing(head), reader)
        method, what = head.first[0], head.first[1][len(CONTROL_PREFIX):].split("?", 1)[0]
        try:
            if method == "GET" and what == "metrics":
                writer.write(simple_response(200, "OK", self.metrics.exposition(), "text/plain; version=0.0.4"))
                await writer.drain()
                return
            if method == "PUT" and what == "faults":
                self.set_plan(FaultPlan.from_json(json.loads(body or b"{}")))
            elif method == "PUT" and what == "latency":
                doc = json.loads(body or b"{}")
                if not isinstance(doc, dict):
                    raise ConfigError(f"latency must be an object like {{\"profile\": \"standard\"}}, got {doc!r}")
                self.set_latency(str(doc.get("profile", "none")), doc.get("seed"))
            elif not (method == "GET" and what == "state"):
                writer.write(simple_response(404, "Not Found", b'{"error": "no such control route"}',
                                             "application/json"))
                await writer.drain()
                return
            answer = simple_response(200, "OK", json.dumps(self.state()).encode(), "application/json")
        except (ConfigError, ValueError) as exc:
            answer = simple_response(400, "Bad Request", json.dumps({"error": str(exc)}).encode(),
                                     "application/json")
        writer.write(answer)
        await writer.drain()
