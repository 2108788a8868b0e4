"""Broker throughput and latency against the SDK on the same stack, same run.

Starts a local stack (real etcd + moto S3, ``bench/common.py``) and two broker child
processes (``python -m llog broker``), then measures:

- produce: ``--clients`` threads POSTing ``/produce`` (``--records`` records of
  ``--size`` bytes to a random one of 8 partitions per request) to broker A, against
  the same threads calling ``BatchingProducer.send_group`` in-process (the SDK, no
  HTTP). Runs alternate; records/s and MiB/s are medians of ``--runs``;
  ``broker_ratio`` is the median of per-run ratios. Target: >= 0.7.
- end to end at a fixed offered load (``--rate`` requests/s, one record each, spread
  over the partitions): produce-ack latency, and produce-send → a long-polling
  consumer (on broker A) sees the record. Target: e2e p99 <= 1.2 x produce-ack p99.
- tail wake-up: a consumer long-polls on broker A while broker B commits; latency
  from B's ack to A's consumer receiving it. Target: p99 <= 50 ms. The brokers share
  ``LLOG_TAIL_CACHE_DIR`` (co-located brokers) unless ``--no-shared-cache``.

The last line is one JSON object.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import queue
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a file: python bench/...

from bench.common import LocalStack, bench_args, emit_json, median, print_table
from llog.config import LlogConfig
from llog.connection import Connection
from llog.producer import BatchingProducer
from llog.topic.admin import Topics

PARTITIONS = 8


class Client:
    """One keep-alive HTTP/1.1 connection to a broker, as lean as a load generator
    should be: requests written as bytes, responses read by Content-Length. A request
    cost 0.55 ms of client CPU through ``http.client`` (header parsing through
    ``email``) and 0.25 ms here, JSON included: the 16 client threads share one GIL
    and the two cores the broker runs on."""

    def __init__(self, url: str, headers: Mapping[str, str] | None = None) -> None:
        host, port = url.removeprefix("http://").split(":")
        self._sock = socket.create_connection((host, int(port)), timeout=120)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self._head = f"Host: {host}:{port}\r\nContent-Type: application/json\r\n{extra}".encode()
        self._buf = b""

    def post(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        data = json.dumps(body).encode()
        self._sock.sendall(b"POST %s HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n%s"
                           % (path.encode(), self._head, len(data), data))
        while (end := self._buf.find(b"\r\n\r\n")) < 0:
            self._recv()
        head, self._buf = self._buf[:end].decode("latin-1"), self._buf[end + 4:]
        lines = head.split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        fields = dict(line.split(":", 1) for line in lines[1:])
        length = int(next(v for k, v in fields.items() if k.lower() == "content-length"))
        while len(self._buf) < length:
            self._recv()
        payload, self._buf = self._buf[:length], self._buf[length:]
        return status, json.loads(payload)

    def _recv(self) -> None:
        chunk = self._sock.recv(1 << 16)
        if not chunk:
            raise ConnectionError("broker closed the connection")
        self._buf += chunk

    def close(self) -> None:
        self._sock.close()


@contextmanager
def broker(cfg: LlogConfig, tail_dir: Path | None) -> Iterator[str]:
    """A broker child process on ``cfg``'s stack; its URL."""
    with broker_process(cfg, tail_dir) as (url, _proc):
        yield url


@contextmanager
def broker_process(cfg: LlogConfig, tail_dir: Path | None, *args: str,
                   env: Mapping[str, str] | None = None) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """``llog broker --port 0 ARGS`` on ``cfg``'s stack (``env``: more ``LLOG_*``
    settings): its URL and the process (whose stdout has the lines after the first);
    stopped with SIGTERM."""
    env = {**os.environ, **(env or {}), **({"LLOG_TAIL_CACHE_DIR": str(tail_dir)} if tail_dir else {}),
           "LLOG_ETCD_ENDPOINTS": ",".join(cfg.etcd_endpoints), "LLOG_OBJECT_STORE": cfg.object_store,
           "LLOG_ROOT_PREFIX": cfg.root_prefix, "LLOG_S3_ENDPOINT_URL": cfg.s3_endpoint_url or ""}
    proc = subprocess.Popen([sys.executable, "-m", "llog", "broker", "--port", "0", *args], env=env,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if "listening on " not in line:
            raise RuntimeError(f"broker did not start: {line!r}")
        yield line.rsplit(" ", 1)[1].strip(), proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def shared_tail_dir(workdir: Path) -> Path:
    """The brokers' shared ``LLOG_TAIL_CACHE_DIR``: on a tmpfs where the host has one,
    as docs/broker.md recommends (a file per commit on a disk-backed directory costs
    the brokers CPU for nothing), else under the stack's work directory."""
    shm = Path("/dev/shm")
    base = shm if shm.is_dir() and os.access(shm, os.W_OK) else workdir
    return base / f"llog-bench-tail-{os.getpid()}"


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def run_clients(clients: int, requests: int, fn: Any) -> float:
    """Seconds for ``clients`` threads to each call ``fn(client_index, i)`` ``requests`` times."""
    start = threading.Barrier(clients + 1)

    def worker(c: int) -> None:
        start.wait()
        for i in range(requests):
            fn(c, i)

    threads = [threading.Thread(target=worker, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    return time.perf_counter() - t0


def broker_produce(url: str, clients: int, requests: int, records: int, size: int,
                   headers: Mapping[str, str] | None = None) -> float:
    conns = [Client(url, headers) for _ in range(clients)]
    value = "x" * size

    def send(c: int, _i: int) -> None:
        status, resp = conns[c].post("/produce", {"topic_partitions": [
            {"topic": "b", "partition": random.randrange(PARTITIONS), "records": [value] * records}]})
        if status != 200:
            raise RuntimeError(f"produce failed: {status} {resp}")

    try:
        return run_clients(clients, requests, send)
    finally:
        for c in conns:
            c.close()


def sdk_produce(prod: BatchingProducer, clients: int, requests: int, records: int, size: int) -> float:
    value = b"x" * size

    def send(_c: int, _i: int) -> None:
        prod.send_group("b", random.randrange(PARTITIONS), [value] * records).result()

    return run_clients(clients, requests, send)


def tail_consumer(url: str, topic: str, stop: Any, out: Any) -> None:
    """In its own process (no GIL shared with the producers): long-poll every partition
    of ``topic`` and report ``(value, monotonic time seen)`` for each record."""
    conn = Client(url)
    offsets = {p: 0 for p in range(PARTITIONS)}
    out.put(("", 0.0))  # ready: the producers start now
    while not stop.is_set():
        _, resp = conn.post("/consume", {"topic_partitions": [
            {"topic": topic, "partition": p, "fetch_offset": o} for p, o in offsets.items()],
            "max_wait_ms": 200})
        now = time.monotonic()
        for part in resp["topic_partitions"]:
            for r in part["records"]:
                out.put((r["value"], now))
            offsets[part["partition"]] = part["next_offset"]
    conn.close()
    out.put(None)


def end_to_end(url: str, rate: float, seconds: float) -> tuple[list[float], list[float]]:
    """Produce one record per tick at ``rate``/s; return (ack latencies, e2e latencies) in ms."""
    ack: list[float] = []
    sent: dict[str, float] = {}
    ctx = multiprocessing.get_context("spawn")
    stop, seen_q = ctx.Event(), ctx.Queue()
    consumer = ctx.Process(target=tail_consumer, args=(url, "e", stop, seen_q))
    consumer.start()
    assert seen_q.get(timeout=60) == ("", 0.0)
    producers = [Client(url) for _ in range(4)]
    lock = threading.Lock()
    ticks = int(rate * seconds)

    def produce(c: int) -> None:
        for i in range(c, ticks, len(producers)):
            due = t0 + i / rate
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)  # pacing the offered load, not synchronisation
            key = f"r{i}"
            t = time.monotonic()
            producers[c].post("/produce", {"topic_partitions": [
                {"topic": "e", "partition": i % PARTITIONS, "records": [key]}]})
            done = time.monotonic()
            with lock:
                sent[key] = t
                ack.append((done - t) * 1000)

    t0 = time.monotonic()
    threads = [threading.Thread(target=produce, args=(c,)) for c in range(len(producers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seen: dict[str, float] = {}
    deadline = time.monotonic() + 30
    while len(seen) < len(sent) and time.monotonic() < deadline:
        try:
            item = seen_q.get(timeout=1)
        except queue.Empty:
            continue
        if item is not None:
            seen.setdefault(item[0], item[1])
    stop.set()
    while seen_q.get() is not None:  # drain until the consumer's end marker
        pass
    consumer.join()
    for p in producers:
        p.close()
    e2e = [(seen[k] - sent[k]) * 1000 for k in sent if k in seen]
    return ack, e2e


def wake_ups(url_a: str, url_b: str, count: int) -> list[float]:
    """ms from broker B's produce ack to broker A's long-polling consumer receiving."""
    acks: dict[str, float] = {}
    got: dict[str, float] = {}
    a, b = Client(url_a), Client(url_b)
    done = threading.Event()

    def consume() -> None:
        offset = 0
        while not done.is_set():
            _, resp = a.post("/consume", {"topic_partitions": [
                {"topic": "w", "partition": 0, "fetch_offset": offset}], "max_wait_ms": 1000})
            now = time.perf_counter()
            part = resp["topic_partitions"][0]
            for r in part["records"]:
                got[r["value"]] = now
            offset = part["next_offset"]
            if len(got) >= count:
                done.set()

    consumer = threading.Thread(target=consume)
    consumer.start()
    for i in range(count):
        key = f"w{i}"
        b.post("/produce", {"topic_partitions": [{"topic": "w", "partition": 0, "records": [key]}]})
        acks[key] = time.perf_counter()
        time.sleep(0.03)  # spacing so each commit finds the consumer parked at the tail
    done.wait(30)
    done.set()
    consumer.join()
    a.close()
    b.close()
    # The ack reaches the client after the commit, so this slightly understates.
    return [max(0.0, (got[k] - acks[k]) * 1000) for k in acks if k in got]


def main() -> None:
    p = bench_args(__doc__ or "")
    p.add_argument("--clients", type=int, default=None)
    p.add_argument("--records", type=int, default=10)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--rate", type=float, default=100.0)
    p.add_argument("--no-shared-cache", action="store_true",
                   help="brokers do not share LLOG_TAIL_CACHE_DIR (wake-ups then read S3)")
    args = p.parse_args()
    # Many short alternating runs: on a shared machine the speed drifts within seconds,
    # and the median of many per-run ratios is steadier than that of a few long ones.
    runs = args.runs or (9 if args.quick else 15)
    clients = args.clients or 16
    requests = 20 if args.quick else 50
    e2e_seconds = 5.0 if args.quick else 20.0
    wakes = 50 if args.quick else 200

    with LocalStack() as stack:
        cfg = stack.config("s3")
        with Connection(cfg) as conn:
            for t in ("b", "e", "w"):
                Topics(conn).create(t, PARTITIONS)
        tail_dir = None if args.no_shared_cache else shared_tail_dir(stack.workdir)
        try:
            with broker(cfg, tail_dir) as url_a, broker(cfg, tail_dir) as url_b, BatchingProducer(cfg) as prod:
                # Warm both paths (connections, partition caches) before timing.
                broker_produce(url_a, clients, 2, args.records, args.size)
                sdk_produce(prod, clients, 2, args.records, args.size)
                n = clients * requests * args.records
                b_secs, s_secs = [], []
                for _ in range(runs):
                    b_secs.append(broker_produce(url_a, clients, requests, args.records, args.size))
                    s_secs.append(sdk_produce(prod, clients, requests, args.records, args.size))
                ack, e2e = end_to_end(url_a, args.rate, e2e_seconds)
                wake = wake_ups(url_a, url_b, wakes)
        finally:
            if tail_dir is not None:
                shutil.rmtree(tail_dir, ignore_errors=True)

    broker_rate, sdk_rate = n / median(b_secs), n / median(s_secs)
    ratio = median([s / b for b, s in zip(b_secs, s_secs, strict=True)])
    mib = args.size / 1024 / 1024
    produce_p99, e2e_p99 = pct(ack, 0.99), pct(e2e, 0.99)
    result = {
        "clients": clients,
        "shared_tail_cache": not args.no_shared_cache,
        "broker_produce_rec_s": broker_rate,
        "broker_produce_mib_s": broker_rate * mib,
        "sdk_produce_rec_s": sdk_rate,
        "sdk_produce_mib_s": sdk_rate * mib,
        "broker_ratio": ratio,
        "produce_p50_ms": pct(ack, 0.5),
        "produce_p99_ms": produce_p99,
        "e2e_p50_ms": pct(e2e, 0.5),
        "e2e_p99_ms": e2e_p99,
        "e2e_over_produce_p99": e2e_p99 / produce_p99 if produce_p99 > 0 else float("nan"),
        "e2e_seen": len(e2e),
        "e2e_sent": len(ack),
        "wake_p50_ms": pct(wake, 0.5),
        "wake_p99_ms": pct(wake, 0.99),
        "wake_seen": len(wake),
    }
    print_table(["figure", "value", "target"], [
        ["broker produce rec/s", broker_rate, ""],
        ["SDK produce rec/s", sdk_rate, ""],
        ["broker / SDK", ratio, ">= 0.7"],
        ["produce-ack p99 ms", produce_p99, ""],
        ["e2e p50 ms", result["e2e_p50_ms"], ""],
        ["e2e p99 ms", e2e_p99, ""],
        ["e2e / produce p99", result["e2e_over_produce_p99"], "<= 1.2"],
        ["wake p99 ms", result["wake_p99_ms"], "<= 50"],
    ])
    emit_json(result)


if __name__ == "__main__":
    main()
