"""llog next to its peers: the same produce-then-consume workload against llog (local
file store, and the moto S3 server), NATS JetStream and Redis Streams.

Workload (every system alike): ``--records`` records of 1 KiB random values over 16
partitions (llog partitions, JetStream subjects ``<stream>.<p>`` of one stream, Redis
stream keys), sent by one producer in batches of ``--batch`` records (about 1 MiB, llog's
default ``batch_max_bytes``) holding every partition; the producer waits for a batch's
acks before sending the next. Then one consumer reads everything back from the start,
partition after partition (JetStream: one pull consumer over the stream, in stream order)
and the count and bytes are checked.

- llog: one ``Writer.append_shared`` per batch (one shared WAL blob, 16 commits);
  ``Reader.scan`` per partition. etcd and moto come from :class:`llog.devstack.LocalStack`.
- JetStream: ``publish_async`` per record, then every ack of the batch; a pull consumer
  with ``AckPolicy.NONE`` fetching ``--batch`` messages at a time. File storage.
- Redis Streams: one non-transactional pipeline of ``XADD`` per batch; ``XRANGE`` pages of
  ``--batch`` entries. AOF on, ``appendfsync everysec``.

Durability differs and is part of the picture: llog's file store fsyncs every blob and
etcd fsyncs every commit; JetStream syncs its files every 2 minutes by default; Redis
fsyncs its AOF once a second; moto keeps objects in memory.

Every server is started here on free loopback ports and stopped at the end. Nothing is
installed: a missing ``nats-server``/``redis-server`` binary or ``nats-py``/``redis``
package is named in an error (``apt-get install nats-server redis-server``,
``pip install -e '.[bench]'``). Each figure is the median over ``--runs`` runs; the
systems' order rotates from run to run; ratios are per-run ratios to llog (file store)
measured in the same run, then the median. Latency percentiles pool every batch of every
run. The last stdout line is one JSON object.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import os
import shutil
import socket
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a file: python bench/peers.py

from bench.common import bench_args, emit_json, median, print_table, ratio
from llog import AppendFailure, AppendGroup, Reader, Topics, Writer
from llog.config import LlogConfig
from llog.connection import Connection
from llog.devstack import LocalServer, LocalStack, scratch_dir
from llog.local_ports import free_port

PARTITIONS = 16
VALUE_BYTES = 1024
#: Distinct batches of random values the workload cycles through (keeps memory small).
TEMPLATES = 8
SYSTEMS = ("llog_file", "llog_s3", "jetstream", "redis")

#: One batch: the values for each partition, ``batch[p]``.
Batch = list[list[bytes]]


# -- servers --------------------------------------------------------------------------
class NatsServer(LocalServer):
    """``nats-server -js`` with file storage in ``workdir``."""

    name = "nats"

    def __init__(self, workdir: Path) -> None:
        port, self.monitor_port = free_port(), free_port()
        self.url = f"nats://127.0.0.1:{port}"
        argv = [
            "nats-server",
            "-js", "-a", "127.0.0.1", "-p", str(port), "-m", str(self.monitor_port),
            "-sd", str(workdir / "jetstream"),
        ]
        super().__init__(argv, port, workdir)

    def ready(self) -> bool:
        url = f"http://127.0.0.1:{self.monitor_port}/healthz?js-enabled-only=true"
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                return bool(r.status == 200)
        except OSError:
            return False


class RedisServer(LocalServer):
    """``redis-server`` on loopback, AOF with ``appendfsync everysec``, no RDB snapshots."""

    name = "redis"

    def __init__(self, workdir: Path) -> None:
        port = free_port()
        argv = [
            "redis-server",
            "--port", str(port), "--bind", "127.0.0.1", "--dir", str(workdir),
            "--save", "", "--appendonly", "yes", "--appendfsync", "everysec",
        ]
        super().__init__(argv, port, workdir)

    def ready(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False


def check_requirements(systems: Sequence[str]) -> list[str]:
    """What is missing for ``systems``, one line each (empty: all there)."""
    needs = {
        "jetstream": [("binary", "nats-server", "apt-get install nats-server"),
                      ("module", "nats", "pip install -e '.[bench]' (nats-py)")],
        "redis": [("binary", "redis-server", "apt-get install redis-server"),
                  ("module", "redis", "pip install -e '.[bench]' (redis)")],
    }
    missing = []
    for system in systems:
        for kind, name, install in needs.get(system, []):
            absent = shutil.which(name) is None if kind == "binary" else importlib.util.find_spec(name) is None
            if absent:
                missing.append(f"{system}: {kind} {name!r} is missing; install it with: {install}")
    return missing


# -- systems --------------------------------------------------------------------------
class Peer(Protocol):
    def produce(self, run: int, batches: Sequence[Batch]) -> list[float]:
        """Send every batch, one at a time; return each batch's seconds to full ack."""

    def consume(self, run: int) -> tuple[int, int]:
        """Read run ``run``'s records from the start; return (records, value bytes)."""

    def close(self) -> None: ...


def _timed(send: Callable[[Batch], None], batches: Sequence[Batch]) -> list[float]:
    out = []
    for b in batches:
        t0 = time.perf_counter()
        send(b)
        out.append(time.perf_counter() - t0)
    return out


class LlogPeer:
    """llog through the SDK: a fresh key root per run, on one store."""

    def __init__(self, config: LlogConfig, label: str) -> None:
        self.base = config
        self.label = label

    def _config(self, run: int) -> LlogConfig:
        # Both llog systems share one etcd: a key root per system and run keeps them apart.
        return dataclasses.replace(self.base, root_prefix=f"peers-{self.label}-{run}")

    def produce(self, run: int, batches: Sequence[Batch]) -> list[float]:
        with Connection(self._config(run)) as conn:
            Topics(conn).create("peers", PARTITIONS)
            with Writer(conn, commit_workers=PARTITIONS) as w:

                def send(b: Batch) -> None:
                    outcomes = w.append_shared([AppendGroup("peers", p, vals) for p, vals in enumerate(b)])
                    failed = [o for o in outcomes if isinstance(o, AppendFailure)]
                    if failed:
                        raise failed[0].error

                return _timed(send, batches)

    def consume(self, run: int) -> tuple[int, int]:
        n = nbytes = 0
        with Reader(self._config(run)) as r:
            for p in range(PARTITIONS):
                for rec in r.scan("peers", p, 0):
                    n += 1
                    nbytes += len(rec.value)
        return n, nbytes

    def close(self) -> None:
        pass


class JetStreamPeer:
    """One stream per run (subjects ``peers<run>.<partition>``), deleted after consuming."""

    def __init__(self, url: str, fetch: int) -> None:
        import nats

        self._fetch = fetch
        self._loop = asyncio.new_event_loop()
        self._nc = self._loop.run_until_complete(nats.connect(url))
        self._js = self._nc.jetstream(publish_async_max_pending=1 << 20)

    def produce(self, run: int, batches: Sequence[Batch]) -> list[float]:
        from nats.js.api import StorageType

        stream = f"peers{run}"
        self._loop.run_until_complete(
            self._js.add_stream(name=stream, subjects=[f"{stream}.>"], storage=StorageType.FILE)
        )
        subjects = [f"{stream}.{p}" for p in range(PARTITIONS)]

        async def send(b: Batch) -> None:
            futures = []
            for i in range(max(len(v) for v in b)):
                for p, vals in enumerate(b):
                    if i < len(vals):
                        futures.append(await self._js.publish_async(subjects[p], vals[i]))
            await asyncio.gather(*futures)  # a PubAck with an error raises here

        return _timed(lambda b: self._loop.run_until_complete(send(b)), batches)

    def consume(self, run: int) -> tuple[int, int]:
        from nats.errors import TimeoutError as NatsTimeout
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

        stream = f"peers{run}"

        async def read() -> tuple[int, int]:
            info = await self._js.stream_info(stream)
            total = info.state.messages
            sub = await self._js.pull_subscribe(
                f"{stream}.>", stream=stream,
                config=ConsumerConfig(ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.ALL),
            )
            n = nbytes = 0
            try:
                while n < total:
                    try:
                        msgs = await sub.fetch(batch=self._fetch, timeout=5)
                    except NatsTimeout:
                        break
                    n += len(msgs)
                    nbytes += sum(len(m.data) for m in msgs)
            finally:
                await sub.unsubscribe()
                await self._js.delete_stream(stream)
            return n, nbytes

        return self._loop.run_until_complete(read())

    def close(self) -> None:
        self._loop.run_until_complete(self._nc.close())
        self._loop.close()


class RedisPeer:
    """Stream keys ``peers<run>:<partition>``, deleted after consuming."""

    def __init__(self, port: int, fetch: int) -> None:
        import redis

        self._fetch = fetch
        self._r = redis.Redis(host="127.0.0.1", port=port)

    def produce(self, run: int, batches: Sequence[Batch]) -> list[float]:
        keys = [f"peers{run}:{p}" for p in range(PARTITIONS)]

        def send(b: Batch) -> None:
            pipe = self._r.pipeline(transaction=False)
            for i in range(max(len(v) for v in b)):
                for p, vals in enumerate(b):
                    if i < len(vals):
                        pipe.xadd(keys[p], {"v": vals[i]})
            pipe.execute()  # raises the first failed XADD

        return _timed(send, batches)

    def consume(self, run: int) -> tuple[int, int]:
        keys = [f"peers{run}:{p}" for p in range(PARTITIONS)]
        n = nbytes = 0
        for key in keys:
            start = "-"
            while True:
                page: Any = self._r.xrange(key, min=start, count=self._fetch)
                if not page:
                    break
                n += len(page)
                nbytes += sum(len(fields[b"v"]) for _, fields in page)
                start = "(" + page[-1][0].decode()  # exclusive: after the last entry seen
        self._r.delete(*keys)
        return n, nbytes

    def close(self) -> None:
        self._r.close()


# -- workload and report --------------------------------------------------------------
def make_batches(records: int, batch: int) -> list[Batch]:
    """``records`` values in batches of ``batch``, spread round-robin over the
    partitions; :data:`TEMPLATES` distinct random batches, cycled."""
    templates: list[Batch] = []
    for _ in range(TEMPLATES):
        pool = os.urandom(VALUE_BYTES * batch)
        b: Batch = [[] for _ in range(PARTITIONS)]
        for i in range(batch):
            b[i % PARTITIONS].append(pool[i * VALUE_BYTES : (i + 1) * VALUE_BYTES])
        templates.append(b)
    full, rest = divmod(records, batch)
    out = [templates[i % TEMPLATES] for i in range(full)]
    if rest:
        b = [[] for _ in range(PARTITIONS)]
        for i in range(rest):
            b[i % PARTITIONS].append(templates[0][i % PARTITIONS][i // PARTITIONS])
        out.append(b)
    return out


@dataclass
class Figures:
    produce_rec_s: list[float] = dataclasses.field(default_factory=list)
    consume_rec_s: list[float] = dataclasses.field(default_factory=list)
    batch_s: list[float] = dataclasses.field(default_factory=list)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def run_bench(systems: Sequence[str], records: int, batch: int, runs: int) -> dict[str, Figures]:
    batches = make_batches(records, batch)
    expect_bytes = records * VALUE_BYTES
    workdir = scratch_dir("llog-peers-")
    servers: list[LocalServer] = []
    peers: dict[str, Peer] = {}
    try:
        with LocalStack(workdir / "llog", s3=True) as stack:
            s3_cfg = stack.config
            file_cfg = dataclasses.replace(
                s3_cfg, object_store=(workdir / "llog-objects").as_uri(), s3_endpoint_url=None
            )
            if "llog_file" in systems:
                peers["llog_file"] = LlogPeer(file_cfg, "file")
            if "llog_s3" in systems:
                peers["llog_s3"] = LlogPeer(s3_cfg, "s3")
            if "jetstream" in systems:
                nats_srv = NatsServer(workdir)
                servers.append(nats_srv)
                nats_srv.wait_ready()
                peers["jetstream"] = JetStreamPeer(nats_srv.url, batch)
            if "redis" in systems:
                redis_srv = RedisServer(workdir)
                servers.append(redis_srv)
                redis_srv.wait_ready()
                peers["redis"] = RedisPeer(redis_srv.port, batch)
            figures = {s: Figures() for s in systems}
            for run in range(runs):
                order = list(systems[run % len(systems):]) + list(systems[: run % len(systems)])
                for name in order:
                    peer = peers[name]
                    lat = peer.produce(run, batches)
                    produce_s = sum(lat)  # batches go one after another; setup is not timed
                    t0 = time.perf_counter()
                    got, got_bytes = peer.consume(run)
                    consume_s = time.perf_counter() - t0
                    if (got, got_bytes) != (records, expect_bytes):
                        raise RuntimeError(
                            f"{name} run {run}: read back {got} records / {got_bytes} bytes, "
                            f"wrote {records} / {expect_bytes}"
                        )
                    f = figures[name]
                    f.produce_rec_s.append(records / produce_s)
                    f.consume_rec_s.append(records / consume_s)
                    f.batch_s.extend(lat)
                    print(f"run {run} {name}: produce {produce_s:.2f}s, consume {consume_s:.2f}s", flush=True)
            return figures
    finally:
        for peer in peers.values():
            peer.close()
        for srv in reversed(servers):
            srv.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> int:
    p = bench_args("llog vs NATS JetStream vs Redis Streams: produce then consume")
    p.add_argument("--records", type=int, default=None, help="records per run (default 200000, quick 20000)")
    p.add_argument("--batch", type=int, default=1000, help="records per produce batch / consume fetch")
    p.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma separated subset of {','.join(SYSTEMS)}")
    args = p.parse_args()
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = set(systems) - set(SYSTEMS)
    if unknown or not systems:
        p.error(f"unknown systems {sorted(unknown)}; choose from {','.join(SYSTEMS)}")
    missing = check_requirements(systems)
    if missing:
        print("bench/peers.py cannot run:\n  " + "\n  ".join(missing), file=sys.stderr)
        return 2
    records = args.records or (20_000 if args.quick else 200_000)
    runs = args.runs or (2 if args.quick else 3)
    figures = run_bench(systems, records, args.batch, runs)

    base = figures.get("llog_file")
    rows: list[list[object]] = []
    result: dict[str, object] = {"records": records, "value_bytes": VALUE_BYTES, "batch": args.batch,
                                 "partitions": PARTITIONS, "runs": runs}
    for name in systems:
        f = figures[name]
        prod_ratio = cons_ratio = None
        if base is not None:
            prod_ratio = median([ratio(a, b) for a, b in zip(f.produce_rec_s, base.produce_rec_s, strict=True)])
            cons_ratio = median([ratio(a, b) for a, b in zip(f.consume_rec_s, base.consume_rec_s, strict=True)])
        stats: dict[str, float | None] = {
            "produce_rec_s": median(f.produce_rec_s),
            "consume_rec_s": median(f.consume_rec_s),
            "produce_p50_ms": percentile(f.batch_s, 50) * 1000,
            "produce_p99_ms": percentile(f.batch_s, 99) * 1000,
            "produce_ratio_to_llog_file": prod_ratio,
            "consume_ratio_to_llog_file": cons_ratio,
        }
        rows.append([name, *("-" if v is None else v for v in stats.values())])
        result[name] = {k: None if v is None else round(v, 3) for k, v in stats.items()}
    print()
    header = ["system", "produce rec/s", "consume rec/s", "p50 batch ms", "p99 batch ms",
              "produce/llog", "consume/llog"]
    print_table(header, rows)
    emit_json(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
