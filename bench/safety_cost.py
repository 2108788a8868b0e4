"""What the write path's safety costs: this tree against an earlier commit, in one run.

Checks out ``--baseline`` (default: the commit before the session work of issue 17) into
a temporary git worktree and, against the same real etcd and moto S3 server, runs the
same produce workload alternately with the baseline's llog and this tree's llog, each
in its own child process (so each imports its own code):

- ``serial``: ``Writer.append_shared`` of shared blobs with records for every
  partition, called back to back by one thread (each call PUTs, then commits);
- ``pipelined``: ``BatchingProducer.send_group`` of the same flushes (the producer's
  PUT/encode/commit pipeline, as the broker sends).

Per row and per code: produce MiB/s of record payload, etcd requests per flush (every
request the writer makes: transactions, reads, lease keep-alives) and S3 PUTs per flush.
Each figure is the median over ``--runs`` alternating rounds; the ratio is the median of
per-round ratios (this tree / baseline). The last line is one JSON object.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a file: python bench/...

from bench.common import LocalStack, bench_args, emit_json, median, print_table

REPO = Path(__file__).resolve().parent.parent
#: The last commit before blob sessions (issue 17, "a blob outlives every commit").
DEFAULT_BASELINE = "6b43502"

#: Runs in a child process with one llog tree first on sys.path; prints one JSON line.
WORKER = r"""
import json, sys, time, uuid
from dataclasses import replace
from llog.config import LlogConfig
from llog.connection import Connection
from llog.records import AppendGroup, Record
from llog import Topics  # the name both trees have (the baseline's module is llog.topics)
from llog.writer import Writer
from llog.producer import BatchingProducer

mode = sys.argv[1]
flushes, partitions, record_bytes, per_part = (int(a) for a in sys.argv[2:6])
cfg = replace(LlogConfig.from_env(), root_prefix=f"cost-{uuid.uuid4().hex[:10]}")

def counter(conn, name):
    return sum(s.value for m in conn.metrics.registry.collect() if m.name == name
               for s in m.samples if s.name.endswith("_total"))

value = b"x" * record_bytes
groups = [AppendGroup("cost", p, [Record(value)] * per_part) for p in range(partitions)]
payload = flushes * partitions * per_part * record_bytes
with Connection(cfg) as conn:
    Topics(conn).create("cost", partitions)
    if mode == "serial":
        with Writer(conn) as w:
            w.append_shared(groups)  # warm: every partition's control cached
            e0, s0, t0 = counter(conn, "llog_etcd_ops"), counter(conn, "llog_s3_ops"), time.perf_counter()
            for _ in range(flushes):
                for out in w.append_shared(groups):
                    assert out.ok, out
            secs = time.perf_counter() - t0
            e1, s1 = counter(conn, "llog_etcd_ops"), counter(conn, "llog_s3_ops")
if mode == "pipelined":
    # One drain takes one flush's groups (one blob), as in bench/write_read.py.
    flush_bytes = partitions * per_part * record_bytes
    pcfg = replace(cfg, batch_max_bytes=flush_bytes, max_blob_bytes=2 * flush_bytes + per_part * record_bytes)
    with Connection(pcfg) as conn, Writer(conn, commit_workers=partitions) as w, \
            BatchingProducer(w, max_inflight=2, max_inflight_puts=1) as prod:
        for g in groups:
            prod.send_group(g.topic, g.partition, g.records)
        prod.flush()
        e0, s0, t0 = counter(conn, "llog_etcd_ops"), counter(conn, "llog_s3_ops"), time.perf_counter()
        futures = [prod.send_group(g.topic, g.partition, g.records) for _ in range(flushes) for g in groups]
        for f in futures:
            f.result()
        secs = time.perf_counter() - t0
        e1, s1 = counter(conn, "llog_etcd_ops"), counter(conn, "llog_s3_ops")
print(json.dumps({"mib_s": payload / 2**20 / secs, "etcd_per_flush": (e1 - e0) / flushes,
                  "s3_per_flush": (s1 - s0) / flushes}))
"""


def run_worker(tree: Path, env: dict[str, str], mode: str, args: Any) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", WORKER, mode, str(args.flushes), str(args.partitions), str(args.record_bytes),
         str(args.records_per_partition)],
        env={**env, "PYTHONPATH": str(tree)}, cwd=tree, capture_output=True, text=True, timeout=600,
    )
    if out.returncode != 0:
        raise SystemExit(f"worker ({tree}, {mode}) failed:\n{out.stderr[-3000:]}")
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    p = bench_args(__doc__.splitlines()[0])
    p.add_argument("--baseline", default=DEFAULT_BASELINE, help=f"commit to compare with (default {DEFAULT_BASELINE})")
    p.add_argument("--flushes", type=int, default=None, help="flushes per round")
    p.add_argument("--partitions", type=int, default=16)
    p.add_argument("--records-per-partition", type=int, default=64)
    p.add_argument("--record-bytes", type=int, default=1024)
    args = p.parse_args()
    runs = args.runs or (3 if args.quick else 5)
    args.flushes = args.flushes or (40 if args.quick else 100)
    with tempfile.TemporaryDirectory(prefix="llog-baseline-") as tmp:
        base = Path(tmp) / "tree"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(base), args.baseline],
                       check=True)
        try:
            with LocalStack() as stack:
                cfg = stack.config("s3")
                env = {**os.environ, "LLOG_ETCD_ENDPOINTS": ",".join(cfg.etcd_endpoints),
                       "LLOG_OBJECT_STORE": cfg.object_store, "LLOG_S3_ENDPOINT_URL": cfg.s3_endpoint_url or ""}
                figures: dict[str, dict[str, list[dict[str, float]]]] = {}
                for mode in ("serial", "pipelined"):
                    rows = figures.setdefault(mode, {"baseline": [], "this": []})
                    for r in range(runs):
                        order = [("baseline", base), ("this", REPO)]
                        for name, tree in order if r % 2 == 0 else reversed(order):
                            rows[name].append(run_worker(tree, env, mode, args))
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(base)], check=False)
    table, result = [], {"baseline": args.baseline, "runs": runs, "flushes": args.flushes,
                         "partitions": args.partitions}
    for mode, rows in figures.items():
        b, t = rows["baseline"], rows["this"]
        ratio = median([x["mib_s"] / y["mib_s"] for x, y in zip(t, b, strict=True)])
        for name, xs in (("baseline", b), ("this", t)):
            table.append([f"{mode} {name}", median([x["mib_s"] for x in xs]),
                          median([x["etcd_per_flush"] for x in xs]), median([x["s3_per_flush"] for x in xs])])
            result[f"{mode}_{name}_mib_s"] = median([x["mib_s"] for x in xs])
            result[f"{mode}_{name}_etcd_per_flush"] = median([x["etcd_per_flush"] for x in xs])
        table.append([f"{mode} this/baseline", ratio, "", ""])
        result[f"{mode}_ratio"] = ratio
    print_table(["row", "MiB/s", "etcd req/flush", "S3 req/flush"], table)
    emit_json(result)


if __name__ == "__main__":
    main()
