"""Produce and end-to-end latency at real S3 latency, across two brokers (issue 22).

Starts a real etcd, a moto S3 server behind the nemesis S3 proxy (llog/nemesis/, whose
latency profile each row switches through the proxy's control API), and two HTTP
brokers, A and B, as child processes that do not share a tail-cache directory (they
stand for brokers on different hosts). Per row, on a fresh topic of ``--partitions``:

- a load generator (its own process, asyncio, keep-alive connections opened as the
  offered load needs them, up to ``MAX_CONNECTIONS``) sends single-record ``/produce`` requests to A at a fixed
  rate, open loop: a request's latency counts from when it was due, so a generator or
  broker that falls behind shows up in the figures instead of slowing the offered load;
- a consumer process long-polls every partition on B (one thread and connection per
  partition), so wake-ups come through etcd and records through S3;

and reports produce p50/p99 (due → ack), end-to-end p50/p99 (due → the consumer on B
has the record), the rate achieved, records not seen within 30 s of the end, the S3
requests the proxy saw (PUTs from A, GETs from B), **GETs per flush** (GETs / PUTs: how
often B fetched each blob A wrote) and **S3 request cost per million records** at S3
Standard's us-east-1 prices ($0.005 per 1,000 PUTs, $0.0004 per 1,000 GETs; storage and
transfer left out).

``--quick``: 200 and 2,000 requests/s under ``standard`` (lognormal, median 60 ms, p99
200 ms per request) and 200 requests/s at ``fixed:1``, 15 s measured each after a 20 s
warm-up (``--warmup``) that opens connections, fills caches and spends the broker's
saved-up PUT budget (``LLOG_BROKER_PUT_BURST``); ``puts_per_s`` is A's PUT rate over the
measured seconds alone (issue 38: <= 5 at 200 requests/s with the default budget), while
the proxy's request counts behind GETs per flush and cost cover the warm-up too. The issue's targets
per ``standard`` row: ``e2e_p99_ms <= 1.5 * produce_p99_ms`` and ``e2e_p99_ms <= 500``.
``--inflight-sweep 1,2,4,8`` adds, per profile, one in-process producer's throughput
at each number of PUTs in flight (issue 22's "writes that keep up at S3 latency").
The last line is one JSON object.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a file: python bench/...

from bench.broker import Client, broker, pct
from bench.common import LocalStack, bench_args, emit_json, print_table
from llog.config import LlogConfig
from llog.connection import Connection
from llog.nemesis.control import proxy_state, set_latency
from llog.producer import BatchingProducer
from llog.records import Record
from llog.topic.admin import Topics

#: S3 Standard request prices, us-east-1, USD per request.
PUT_USD = 0.005 / 1000
GET_USD = 0.0004 / 1000
#: Requests (so connections) the load generator has open at once: past it, a due request
#: waits for a free connection, its latency still counted from when it was due; without
#: a cap a broker that falls behind makes the generator run out of file descriptors.
MAX_CONNECTIONS = 1024


class _Conn:
    """One keep-alive asyncio HTTP/1.1 connection to a broker."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes) -> None:
        self.reader, self.writer, self.head = reader, writer, head

    async def post(self, path: bytes, body: bytes) -> int:
        self.writer.write(b"POST %s HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n%s" % (path, self.head, len(body), body))
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        length = next(int(v) for k, _, v in (ln.partition(":") for ln in lines[1:]) if k.lower() == "content-length")
        await self.reader.readexactly(length)
        return int(lines[0].split(" ", 2)[1])


async def _generate(url: str, topic: str, partitions: int, rate: float, seconds: float,
                    warmup: float, warm: Any) -> dict[str, Any]:
    host, port = url.removeprefix("http://").split(":")
    head = f"Host: {host}:{port}\r\nContent-Type: application/json\r\n".encode()
    idle: list[_Conn] = []
    acks: list[float] = []
    sent: dict[str, float] = {}
    errors = 0
    warm_ticks = int(rate * warmup)
    slots = asyncio.Semaphore(MAX_CONNECTIONS)

    async def fresh() -> _Conn:
        return _Conn(*await asyncio.open_connection(host, int(port)), head)

    async def one(i: int, due: float) -> None:
        nonlocal errors
        key = f"r{i}"
        body = json.dumps({"topic_partitions": [{"topic": topic, "partition": i % partitions, "records": [key]}]})
        async with slots:
            conn = idle.pop() if idle else await fresh()
            try:
                status = await conn.post(b"/produce", body.encode())
            except (asyncio.IncompleteReadError, ConnectionError):
                # The broker closed a connection idle past its keep-alive timeout before
                # reading this request: send it again on a new one.
                conn = await fresh()
                status = await conn.post(b"/produce", body.encode())
            done = time.monotonic()
            idle.append(conn)
        if status != 200:
            errors += 1
            return
        if i < warm_ticks:  # warm-up: connections opened, caches filled; not measured
            return
        sent[key] = due
        acks.append((done - due) * 1000)

    ticks = warm_ticks + int(rate * seconds)
    t0 = time.monotonic() + 0.1
    tasks = []
    for i in range(ticks):
        if i == warm_ticks:
            warm()
        due = t0 + i / rate
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)  # pacing the offered load
        tasks.append(asyncio.ensure_future(one(i, due)))
    await asyncio.gather(*tasks)
    wall = time.monotonic() - t0 - warm_ticks / rate
    for c in idle:
        c.writer.close()
    return {"acks": acks, "sent": sent, "errors": errors, "achieved": len(acks) / wall,
            "connections": len(idle), "total": ticks}


def _producer(url: str, topic: str, partitions: int, rate: float, seconds: float, warmup: float, out: Any) -> None:
    """In its own process: the open-loop load; puts its result on ``out``, with the CPU
    share the generator itself used (near 1.0: it, not the broker, limits the rate)."""
    cpu0, t0 = time.process_time(), time.monotonic()
    result = asyncio.run(_generate(url, topic, partitions, rate, seconds, warmup, lambda: out.put("warm")))
    result["cpu_share"] = (time.process_time() - cpu0) / (time.monotonic() - t0)
    out.put(result)


def _consumer(url: str, topic: str, partitions: int, stop: Any, out: Any) -> None:
    """In its own process: one long-polling thread per partition on ``url``; puts a
    list of ``(key, monotonic time seen)`` per answer with records (one queue item per
    answer, not per record: the harness shares the brokers' cores), then ``None``."""
    ready = threading.Barrier(partitions + 1)

    def poll(p: int) -> None:
        client, offset = Client(url), 0
        ready.wait()
        while not stop.is_set():
            _, resp = client.post("/consume", {"topic_partitions": [
                {"topic": topic, "partition": p, "fetch_offset": offset}], "max_wait_ms": 500})
            now = time.monotonic()
            [part] = resp["topic_partitions"]
            if part["records"]:
                out.put([(r["value"], now) for r in part["records"]])
            offset = part.get("next_offset", offset)
        client.close()

    threads = [threading.Thread(target=poll, args=(p,)) for p in range(partitions)]
    for t in threads:
        t.start()
    ready.wait()
    out.put([])
    for t in threads:
        t.join()
    out.put(None)


def run_row(url_a: str, url_b: str, proxy: str, profile: str, rate: float, seconds: float,
            warmup: float, partitions: int, conn: Connection) -> dict[str, Any]:
    topic = f"tail-{profile.replace(':', '')}-{int(rate)}-{time.monotonic_ns() % 10**6}"
    Topics(conn).create(topic, partitions)
    set_latency(proxy, profile, seed=1)
    ctx = multiprocessing.get_context("spawn")
    stop, seen_q, prod_q = ctx.Event(), ctx.Queue(), ctx.Queue()
    consumer = ctx.Process(target=_consumer, args=(url_b, topic, partitions, stop, seen_q))
    consumer.start()
    assert seen_q.get(timeout=60) == []
    before = proxy_state(proxy)["requests"]
    producer = ctx.Process(target=_producer, args=(url_a, topic, partitions, rate, seconds, warmup, prod_q))
    producer.start()
    seen: dict[str, float] = {}
    result: dict[str, Any] | None = None
    deadline = None
    warm: dict[str, int] | None = None
    warm_at = measured_end = 0.0
    warm_puts = 0
    while True:
        if result is None and not prod_q.empty():
            item = prod_q.get()
            if item == "warm":
                warm, warm_at = proxy_state(proxy)["requests"], time.monotonic()
                continue
            result = item
            measured_end = time.monotonic()
            warm_puts = proxy_state(proxy)["requests"].get("PUT", 0) - (warm or {}).get("PUT", 0)
            deadline = time.monotonic() + 30
        if result is None and not producer.is_alive() and prod_q.empty():
            stop.set()
            raise SystemExit(f"the load generator died (exit {producer.exitcode}); see its traceback above")
        if result is not None and (len(seen) >= result["total"] - result["errors"]
                                   or time.monotonic() > (deadline or 0)):
            break
        try:
            item = seen_q.get(timeout=0.2)
        except Exception:  # queue.Empty
            continue
        for key, at in item or ():
            seen.setdefault(key, at)
    producer.join()
    after = proxy_state(proxy)["requests"]
    stop.set()
    while seen_q.get() is not None:  # drain to the consumer's end marker
        pass
    consumer.join()
    assert result is not None
    sent: dict[str, float] = result["sent"]
    e2e = [(seen[k] - due) * 1000 for k, due in sent.items() if k in seen]
    puts = after.get("PUT", 0) - before.get("PUT", 0)
    gets = after.get("GET", 0) - before.get("GET", 0)
    n = max(1, result["total"])  # the proxy's counts cover the warm-up's records too
    e2e_p99, produce_p99 = round(pct(e2e, 0.99), 1), round(pct(result["acks"], 0.99), 1)
    return {
        "profile": profile, "offered_rps": rate, "achieved_rps": round(result["achieved"], 1),
        "produce_p50_ms": round(pct(result["acks"], 0.5), 1), "produce_p99_ms": produce_p99,
        "e2e_p50_ms": round(pct(e2e, 0.5), 1), "e2e_p99_ms": e2e_p99,
        "records": len(sent), "unseen": len(sent) - len(e2e), "errors": result["errors"],
        "puts": puts, "gets": gets, "gets_per_flush": round(gets / max(1, puts), 2),
        # Over the measured seconds only: the warm-up spends the PUT budget's saved burst.
        "puts_per_s": round(warm_puts / max(1e-9, measured_end - warm_at), 1),
        "usd_per_million_records": round((puts * PUT_USD + gets * GET_USD) / n * 1e6, 2),
        "client_connections": result["connections"], "generator_cpu_share": round(result["cpu_share"], 2),
        "generator_holds_rate": result["achieved"] >= 0.95 * rate,
        "e2e_within_1_5x_produce": e2e_p99 <= 1.5 * produce_p99, "e2e_p99_le_500": e2e_p99 <= 500,
    }


def inflight_sweep(
    cfg: LlogConfig, proxy: str, profile: str, depths: list[int], seconds: float
) -> list[dict[str, Any]]:
    """Produce throughput of one process's ``BatchingProducer`` at each PUT depth
    (``batch_max_inflight`` = ``batch_max_inflight_puts``): groups of 64 records of 1 KiB
    over 16 partitions, sent as fast as the producer takes them for ``seconds`` (it
    packs them into ``batch_max_bytes`` flushes, 1 MiB by default)."""
    set_latency(proxy, profile, seed=2)
    out = []
    value = b"x" * 1024
    with Connection(cfg) as conn:
        topic = f"sweep-{time.monotonic_ns() % 10**6}"
        Topics(conn).create(topic, 16)
        for depth in depths:
            with BatchingProducer(conn, max_inflight=depth, max_inflight_puts=depth) as prod:
                futs, t0, n = [], time.monotonic(), 0
                while time.monotonic() - t0 < seconds:
                    futs.append(prod.send_group(topic, n % 16, [Record(value)] * 64))
                    n += 1
                    if len(futs) > 256:
                        futs.pop(0).result()
                for f in futs:
                    f.result()
                secs = time.monotonic() - t0
            out.append({"profile": profile, "inflight": depth, "mib_s": round(n * 64 * 1024 / 2**20 / secs, 1)})
            print(f"  sweep {out[-1]}", file=sys.stderr, flush=True)
    return out


def main() -> None:
    p = bench_args(__doc__.splitlines()[0])
    p.add_argument("--partitions", type=int, default=16)
    p.add_argument("--seconds", type=float, default=None, help="measured load per row (15 with --quick, else 30)")
    p.add_argument("--warmup", type=float, default=20.0,
                   help="seconds of unmeasured load before each row's (the broker's PUT budget spends its "
                        "saved-up burst, a minute at its rate, in the first row's)")
    p.add_argument("--inflight-sweep", default=None, metavar="N,N,...",
                   help="also measure one producer's MiB/s at each PUT depth under each row's profile")
    p.add_argument("--rows", default=None,
                   help="profile@rate,... (default standard@200,standard@2000,fixed:1@200)")
    args = p.parse_args()
    seconds = args.seconds or (15.0 if args.quick else 30.0)
    rows = [(r.rsplit("@", 1)[0], float(r.rsplit("@", 1)[1]))
            for r in (args.rows or "standard@200,standard@2000,fixed:1@200").split(",")]
    with LocalStack(s3_profile="none") as stack:
        proxy = stack.s3_endpoint
        cfg = stack.config("s3")
        with Connection(cfg) as conn, broker(cfg, None) as url_a, broker(cfg, None) as url_b:
            results = []
            for profile, rate in rows:
                print(f"row {profile} @ {rate:g}/s ...", file=sys.stderr, flush=True)
                results.append(run_row(url_a, url_b, proxy, profile, rate, seconds, args.warmup,
                                       args.partitions, conn))
                print(f"  {results[-1]}", file=sys.stderr, flush=True)
        sweep = []
        if args.inflight_sweep:
            depths = [int(d) for d in args.inflight_sweep.split(",")]
            for profile in dict.fromkeys(r[0] for r in rows):
                sweep += inflight_sweep(cfg, proxy, profile, depths, min(seconds, 8.0))
    cols = ["profile", "offered_rps", "achieved_rps", "produce_p50_ms", "produce_p99_ms", "e2e_p50_ms",
            "e2e_p99_ms", "unseen", "puts_per_s", "gets_per_flush", "usd_per_million_records"]
    print_table(cols, [[r[c] for c in cols] for r in results])
    standard = [r for r in results if r["profile"] == "standard"]
    if sweep:
        print_table(["profile", "inflight", "mib_s"], [[r["profile"], r["inflight"], r["mib_s"]] for r in sweep])
    emit_json({
        "partitions": args.partitions, "seconds": seconds, "rows": results, "inflight_sweep": sweep,
        "settings": {k: v for k, v in os.environ.items() if k.startswith("LLOG_")},
        "e2e_within_1_5x_produce": all(r["e2e_within_1_5x_produce"] for r in standard),
        "e2e_p99_le_500": all(r["e2e_p99_le_500"] for r in standard),
        "generator_holds_rate": all(r["generator_holds_rate"] for r in results),
        "keeps_up": all(r["e2e_within_1_5x_produce"] and r["e2e_p99_le_500"] and not r["unseen"] for r in standard),
    })


if __name__ == "__main__":
    main()
