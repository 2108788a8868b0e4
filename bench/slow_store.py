"""A producer's acknowledgements while the object store holds a third of its answers
(issue 36: no second without acknowledgements while the store still answers).

Starts a real etcd and a moto S3 server behind the nemesis S3 proxy. Per run and per
mode — WAL PUT hedging off (``LLOG_PUT_HEDGE_QUANTILE=0``, the baseline) and on (the
default) — one ``BatchingProducer`` is fed by ``--threads`` threads at a fixed rate on a
fresh topic; after a warm-up the proxy holds ``--slow-rate`` of the answers for
``--delay-ms`` (the nemesis's ``slow`` fault) for ``--seconds``, then clears. Reported
per mode, medians over ``--runs``: the **longest gap between two acknowledgements**
inside the fault window, gaps over 0.5 s, acknowledgements per second, and the PUTs
hedged (sent / answered first); and the ratio of the longest gaps, hedged over not.
The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a file: python bench/...

from bench.common import LocalStack, bench_args, emit_json, median, print_table
from llog.connection import Connection
from llog.nemesis.control import set_faults
from llog.nemesis.faults import FaultPlan, FaultRule
from llog.producer import BatchingProducer
from llog.topic.admin import Topics

PARTITIONS = 8


@dataclass(frozen=True)
class Window:
    longest_gap_s: float
    gaps_over_half_s: int
    acks_per_s: float
    hedges_sent: float
    hedges_won: float


def one_run(stack: LocalStack, hedged: bool, args: argparse.Namespace) -> Window:
    threads, rate, seconds = args.threads, args.rate, args.seconds
    cfg = stack.config(put_hedge_quantile=0.9 if hedged else 0.0)
    acks: list[float] = []
    lock = threading.Lock()
    stop = threading.Event()

    def acked(_f: object) -> None:
        with lock:
            acks.append(time.monotonic())

    with Connection(cfg) as conn:
        Topics(conn).create("slow", PARTITIONS)
        with BatchingProducer(conn) as producer:

            def feed(i: int) -> None:
                n = 0
                t0 = time.monotonic()
                while not stop.is_set():
                    producer.send("slow", (i + n) % PARTITIONS, b"x" * 128).add_done_callback(acked)
                    n += 1
                    # Open loop at rate/threads records a second: a stalled producer does
                    # not slow the offered load (send buffers; back-pressure would raise).
                    stop.wait(max(0.0, t0 + n * threads / rate - time.monotonic()))

            feeders = [threading.Thread(target=feed, args=(i,), daemon=True) for i in range(threads)]
            for t in feeders:
                t.start()
            try:
                stop.wait(args.warmup)
                rule = FaultRule("slow", args.slow_rate, delay_ms=args.delay_ms)
                set_faults(stack.s3_endpoint, FaultPlan((rule,)))
                start = time.monotonic()
                stop.wait(seconds)
                end = time.monotonic()
                set_faults(stack.s3_endpoint, FaultPlan(()))
                stop.wait(args.delay_ms / 1000 + 1)
            finally:
                stop.set()
                for t in feeders:
                    t.join()
        inside = sorted(a for a in acks if start <= a <= end)
        edges = [start, *inside, end]
        gaps = [b - a for a, b in itertools.pairwise(edges)]
        return Window(
            longest_gap_s=max(gaps),
            gaps_over_half_s=sum(g > 0.5 for g in gaps),
            acks_per_s=len(inside) / (end - start),
            hedges_sent=conn.metrics.value("llog_put_hedges_total", outcome="sent") or 0.0,
            hedges_won=conn.metrics.value("llog_put_hedges_total", outcome="won") or 0.0,
        )


def main() -> None:
    p = bench_args(__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--rate", type=float, default=640.0, help="records a second offered (all threads)")
    p.add_argument("--seconds", type=float, default=None, help="the fault window (10 s; --quick 6 s)")
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument("--slow-rate", type=float, default=0.3, help="share of the store's answers held")
    p.add_argument("--delay-ms", type=float, default=2000.0, help="how long a held answer is held")
    args = p.parse_args()
    args.seconds = args.seconds or (6.0 if args.quick else 10.0)
    runs = args.runs or (1 if args.quick else 3)
    by_mode: dict[str, list[Window]] = {"off": [], "on": []}
    with LocalStack(s3_profile="none") as stack:
        for _ in range(runs):
            for mode in by_mode:  # alternated, so drift in the machine hits both alike
                by_mode[mode].append(one_run(stack, mode == "on", args))

    def med(mode: str, field: str) -> float:
        return median([getattr(w, field) for w in by_mode[mode]])

    rows = [[mode, f"{med(mode, 'longest_gap_s'):.3f}", f"{med(mode, 'gaps_over_half_s'):.0f}",
             f"{med(mode, 'acks_per_s'):.0f}", f"{med(mode, 'hedges_sent'):.0f} / {med(mode, 'hedges_won'):.0f}"]
            for mode in by_mode]
    print(f"{runs} run(s); {args.slow_rate:.0%} of S3 answers held {args.delay_ms:.0f} ms for {args.seconds:.0f} s; "
          f"{args.rate:.0f} records/s offered by {args.threads} threads")
    print_table(["hedging", "longest ack gap s", "gaps > 0.5 s", "acks/s", "hedges sent / won"], rows)
    result: dict[str, object] = {"runs": runs}
    for mode in by_mode:
        for field in ("longest_gap_s", "gaps_over_half_s", "acks_per_s", "hedges_sent"):
            result[f"{field}_{mode}"] = med(mode, field)
    result["longest_gap_on_over_off"] = med("on", "longest_gap_s") / med("off", "longest_gap_s")
    emit_json(result)


if __name__ == "__main__":
    main()
