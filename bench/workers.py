"""HTTP single-record produce requests/s of one broker with 1 and with N worker
processes (``llog broker --workers``), same stack, same run.

Starts a local stack (real etcd; llog on the ``file://`` store, so no S3 server
competes for the cores) and, in turns, ``llog broker --workers 1`` and ``--workers N``
(default: this host's cores), each driven by ``wrk`` (C, one thread, ``--connections``
keep-alive connections) POSTing ``/produce`` with one record of ``--size`` bytes to a
random one of 8 partitions. The brokers run with ``--put-rate 0``: the figure is what
the processes can serve, not what the PUT budget lets through. Each run is a warm-up
then ``--seconds`` measured; requests/s and wrk's latency p50/p99 are medians over
``--runs``; ``workers_over_one`` is the median of per-run ratios. Issue 38's target
on a 2-core host: >= 1.6. Also per run: the broker's CPU (every process of it) in cores
and per request, and the host's idle cores, which say what bounds the figure: the load
generator, etcd and the kernel's loopback share the host with the broker.

Needs ``wrk`` (Debian: ``apt-get install wrk``). The last line is one JSON object.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a file: python bench/...

from bench.broker import broker_process
from bench.common import LocalStack, bench_args, cpu_seconds, emit_json, median, print_table
from llog.connection import Connection
from llog.topic.admin import Topics

PARTITIONS = 8

_SCRIPT = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local value = string.rep("x", %d)
request = function()
  local body = '{"topic_partitions":[{"topic":"w","partition":' .. math.random(0, %d) ..
               ',"records":["' .. value .. '"]}]}'
  return wrk.format(nil, "/produce", nil, body)
end
"""
_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def _idle_s() -> float:
    """Seconds every core of this host has been idle."""
    return int(Path("/proc/stat").read_text().split()[4]) / os.sysconf("SC_CLK_TCK")


def wrk(url: str, script: Path, seconds: float, connections: int, broker_pid: int | None = None,
        ) -> tuple[float, float, float, int, float, float]:
    """``(requests/s, p50 ms, p99 ms, requests not answered 2xx, the broker's CPU
    cores, the host's idle cores)`` of one wrk run."""
    pids = [] if broker_pid is None else [broker_pid]
    cpu0, idle0, t0 = cpu_seconds(pids, children=True), _idle_s(), time.monotonic()
    out = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--latency", "-s", str(script), url],
        capture_output=True, text=True, check=True,
    ).stdout
    elapsed = time.monotonic() - t0
    cores, idle = (cpu_seconds(pids, children=True) - cpu0) / elapsed, (_idle_s() - idle0) / elapsed
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    lat = {q: float(v) * _UNITS[u] for q, v, u in re.findall(r"\s(50|99)%\s+([\d.]+)(us|ms|s)\b", out)}
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    failed = (int(bad.group(1)) if bad else 0) + (sum(int(g) for g in errors.groups()) if errors else 0)
    return rate, lat.get("50", float("nan")), lat.get("99", float("nan")), failed, cores, idle


def main() -> None:
    ap = bench_args(__doc__ or "")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--connections", type=int, default=512)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=None)
    args = ap.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("bench/workers.py needs wrk (Debian: apt-get install wrk)")
    seconds = args.seconds or (5.0 if args.quick else 10.0)
    runs = args.runs or (3 if args.quick else 5)
    counts = (1, args.workers)
    results: dict[int, list[tuple[float, float, float, int, float, float]]] = {n: [] for n in counts}
    with LocalStack() as stack, tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "produce.lua"
        script.write_text(_SCRIPT % (args.size, PARTITIONS - 1))
        cfg = stack.config("file")
        with Connection(cfg) as conn:
            Topics(conn).create("w", PARTITIONS)
        for run in range(runs):
            for n in counts if run % 2 == 0 else counts[::-1]:
                with broker_process(cfg, None, "--workers", str(n), "--put-rate", "0") as (url, proc):
                    wrk(url, script, 2.0, args.connections)  # warm-up: connections, caches, the JIT-less GC
                    results[n].append(wrk(url, script, seconds, args.connections, proc.pid))
                print(f"run {run + 1}/{runs}, {n} worker(s): {results[n][-1][0]:,.0f} requests/s", file=sys.stderr)
    one, many = results[1], results[args.workers]
    rows = [[f"{n} worker{'s' if n > 1 else ''}", f"{median([r[0] for r in rs]):,.0f}",
             f"{median([r[1] for r in rs]):.1f}", f"{median([r[2] for r in rs]):.1f}", sum(r[3] for r in rs),
             f"{median([r[4] for r in rs]):.2f}", f"{median([r[4] / r[0] * 1e6 for r in rs]):.0f}",
             f"{median([r[5] for r in rs]):.2f}"]
            for n, rs in results.items()]
    print_table(["broker", "requests/s", "p50 ms", "p99 ms", "failed", "broker cores", "CPU us/request",
                 "host idle cores"], rows)
    emit_json({
        "workers": args.workers,
        "connections": args.connections,
        "record_bytes": args.size,
        "one_worker_req_s": median([r[0] for r in one]),
        "workers_req_s": median([r[0] for r in many]),
        "workers_over_one": median([b[0] / a[0] for a, b in zip(one, many, strict=True)]),
        "one_worker_p99_ms": median([r[2] for r in one]),
        "workers_p99_ms": median([r[2] for r in many]),
        "failed_requests": sum(r[3] for rs in results.values() for r in rs),
        "one_worker_cores": median([r[4] for r in one]),
        "workers_cores": median([r[4] for r in many]),
        "one_worker_cpu_us_per_request": median([r[4] / r[0] * 1e6 for r in one]),
        "workers_cpu_us_per_request": median([r[4] / r[0] * 1e6 for r in many]),
        "one_worker_host_idle_cores": median([r[5] for r in one]),
        "workers_host_idle_cores": median([r[5] for r in many]),
    })


if __name__ == "__main__":
    main()
