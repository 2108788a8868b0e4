"""What hostile produce requests cost everyone else: one broker with its Kafka
listener, and two clients timed throughout — ``GET /health`` over HTTP and a Kafka
Fetch on a connection of its own, each in a loop — first with nothing else going on
(the baseline), then while another connection sends the crafted batches of
tests/test_kafka_edge.py (decompression bombs in every codec, 30,000,000 empty records,
a record over the limit once inflated, broken insides) back to back, each refused.
Then, against a broker with a token, 8 connections that never authenticate announce
100 MiB frames and send junk.

Per phase: the two clients' latency p50/p99/max (the acceptance asks every answer
within 100 ms), the crafted batches sent and refused, and the broker's peak RSS
growth over its baseline (from /proc: the peak is reset before each phase). The last
line is one JSON object.
"""

from __future__ import annotations

import os
import socket
import struct
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# Run as a file (python bench/edge.py), sys.path[0] is this directory, where bench/kafka.py
# would shadow the kafka package: the repository root takes its place.
sys.path[:] = [p for p in sys.path if p != str(Path(__file__).resolve().parent)]
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.broker import broker_process, pct
from bench.common import MIB, LocalStack, bench_args, emit_json, print_table
from llog.connection import Connection
from llog.topic.admin import Topics
from tests.broker_harness import PeakRss
from tests.kafka_crafted import exchange

TOPIC = "edge"


@contextmanager
def _kafka_broker(cfg: Any, **env: str) -> Iterator[tuple[str, str, int]]:
    """A broker with its Kafka listener (``env`` added to its environment): its URL,
    bootstrap address and pid."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        with broker_process(cfg, None, "--kafka-port", "0") as (url, proc):
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if "Kafka listener on port " not in line:
                raise RuntimeError(f"no Kafka listener: {line!r}")
            yield url, f"127.0.0.1:{int(line.rsplit(' ', 1)[1])}", proc.pid
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _connect(bootstrap: str) -> socket.socket:
    host, port = bootstrap.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=60)


def _exchange(s: socket.socket, req: Any, correlation: int) -> bytes:
    return exchange(s, req, correlation, "bench-edge")


def _timed_clients(
    url: str, bootstrap: str, stop: threading.Event, out: dict[str, list[float]]
) -> list[threading.Thread]:
    """The two clients timed throughout; their latencies (ms) go to ``out``."""
    import http.client
    from urllib.parse import urlsplit

    from kafka.protocol.consumer import FetchRequest

    def health() -> None:
        parts = urlsplit(url)
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
        while not stop.is_set():
            t = time.perf_counter()
            conn.request("GET", "/health")
            conn.getresponse().read()
            out["health"].append((time.perf_counter() - t) * 1000)
            time.sleep(0.005)
        conn.close()

    def fetch() -> None:
        R = FetchRequest[11]
        host, port = bootstrap.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=30) as s:
            i = 0
            while not stop.is_set():
                req = R(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                        session_id=0, session_epoch=-1, topics=[R.FetchTopic(topic=TOPIC, partitions=[
                            R.FetchTopic.FetchPartition(partition=1, current_leader_epoch=-1, fetch_offset=0,
                                                        log_start_offset=-1, partition_max_bytes=1 << 20)])],
                        forgotten_topics_data=[], rack_id="")
                t = time.perf_counter()
                _exchange(s, req, i)
                out["fetch"].append((time.perf_counter() - t) * 1000)
                i += 1
                time.sleep(0.005)

    return [threading.Thread(target=health, daemon=True), threading.Thread(target=fetch, daemon=True)]


def _produce(s: socket.socket, records: bytes, correlation: int) -> int:
    from kafka.protocol.producer import ProduceRequest, ProduceResponse

    P = ProduceRequest[9]
    req = P(transactional_id=None, acks=-1, timeout_ms=30000, topic_data=[P.TopicProduceData(
        name=TOPIC, partition_data=[P.TopicProduceData.PartitionProduceData(index=0, records=records)])])
    resp = ProduceResponse[9].decode(_exchange(s, req, correlation), version=9, header=True)
    return int(resp.responses[0].partition_responses[0].error_code)


def _phase(url: str, bootstrap: str, pid: int, seconds: float, attack: Any) -> dict[str, Any]:
    rss = PeakRss(pid)
    rss.reset()
    stop = threading.Event()
    lat: dict[str, list[float]] = {"health": [], "fetch": []}
    clients = _timed_clients(url, bootstrap, stop, lat)
    for t in clients:
        t.start()
    extra: dict[str, Any] = {}
    if attack is None:
        time.sleep(seconds)  # the baseline: the two clients alone
    else:
        extra = attack(seconds)
    stop.set()
    for t in clients:
        t.join()
    row: dict[str, Any] = {"rss_growth_mib": rss.growth() / MIB, **extra}
    for name, values in lat.items():
        row[f"{name}_p50_ms"], row[f"{name}_p99_ms"] = pct(values, 0.5), pct(values, 0.99)
        row[f"{name}_max_ms"], row[f"{name}_n"] = max(values), len(values)
    return row


def main() -> None:
    from llog.config import LlogConfig
    from tests.kafka_crafted import hostile_batches, plain_batch

    args = bench_args(__doc__.splitlines()[0]).parse_args()
    seconds = 10.0 if args.quick else 30.0
    batches = hostile_batches(LlogConfig().max_record_bytes)
    print(f"{len(batches)} crafted batches, {sum(len(b) for _, b, _ in batches) / MIB:.1f} MiB", file=sys.stderr)
    result: dict[str, Any] = {}
    with LocalStack() as stack:
        cfg = stack.config("s3")
        with Connection(cfg) as conn:
            Topics(conn).create(TOPIC, 2)
        with _kafka_broker(cfg) as (url, bootstrap, pid):
            with _connect(bootstrap) as s:
                assert _produce(s, plain_batch([b"for the consumer"]), 0) == 0
            result["baseline"] = _phase(url, bootstrap, pid, seconds, None)

            def bombs(secs: float) -> dict[str, Any]:
                sent = refused = 0
                deadline = time.monotonic() + secs
                with _connect(bootstrap) as s:
                    while time.monotonic() < deadline:
                        for _, raw, code in batches:
                            sent += 1
                            refused += _produce(s, raw, sent) == code
                return {"crafted_sent": sent, "crafted_refused": refused}

            result["crafted"] = _phase(url, bootstrap, pid, seconds, bombs)
        with _kafka_broker(cfg, LLOG_BROKER_TOKEN="bench") as (url, bootstrap, pid):
            rss = PeakRss(pid)
            rss.reset()

            def junk(i: int, sent: list[int]) -> None:
                with _connect(bootstrap) as s:
                    try:
                        s.sendall(struct.pack(">i", 100 * MIB))
                        while sent[i] < 48 * MIB:
                            s.sendall(b"\xab" * MIB)
                            sent[i] += MIB
                    except OSError:
                        pass

            sent = [0] * 8
            threads = [threading.Thread(target=junk, args=(i, sent)) for i in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            result["preauth"] = {"rss_growth_mib": rss.growth() / MIB, "junk_sent_mib_max": max(sent) / MIB}
    rows = [[phase, r.get("health_p50_ms"), r.get("health_p99_ms"), r.get("health_max_ms"), r.get("fetch_p50_ms"),
             r.get("fetch_p99_ms"), r.get("fetch_max_ms"), r["rss_growth_mib"]] for phase, r in result.items()]
    print_table(["phase", "health p50 ms", "p99", "max", "fetch p50 ms", "p99", "max", "RSS growth MiB"], rows)
    flat = {f"{phase}_{k}": v for phase, r in result.items() for k, v in r.items()}
    emit_json(flat)


if __name__ == "__main__":
    main()
