"""Key compaction of a compacted topic (spec §10.2): a pass's time and peak memory.

Starts a local stack (real etcd + moto S3 on loopback, see ``bench/common.py``). Per key
count (``--keys``, default 10,000 and 100,000): ``--records`` records (1,000,000;
``--quick`` 200,000) written to one partition of a ``cleanup.policy=compact`` topic as
rounds that update every key, merged by compaction, then — in a fresh child process per
run, so its memory is the pass's own — first a full SDK scan of the partition (the
baseline: reading every record once), then one key compaction pass
(``Compactor.clean_once``) over all of it. Reported per key count, medians over
``--runs`` (each run on a fresh topic): the scan's and the pass's seconds, their ratio
(a pass reads the dirty records twice: once for the key map, once to rewrite), records
removed, and the child's peak resident memory (``VmHWM``) after each step. The last
line is one JSON object.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a file: python bench/...

from bench.common import LocalStack, bench_args, emit_json, median, print_table
from compactor import compact_once
from llog.config import LlogConfig
from llog.connection import Connection
from llog.records import Record
from llog.topic.admin import Topics
from llog.writer import Writer

#: The child: scan, then clean, printing seconds and peak memory after each (JSON).
CHILD = r"""
import json, sys, time
import llog
from compactor import Compactor

def peak_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0

topic = sys.argv[1]
with llog.Connection(llog.LlogConfig.from_env()) as conn:
    t0 = time.perf_counter()
    with llog.Reader(conn) as r:
        n = sum(1 for _ in r.scan(topic, 0))
    scan_s, scan_peak = time.perf_counter() - t0, peak_mib()
    with Compactor(conn) as c:
        t0 = time.perf_counter()
        res = c.clean_once(topic, 0)
        clean_s = time.perf_counter() - t0
print(json.dumps({"records": n, "scan_s": scan_s, "scan_peak_mib": scan_peak, "clean_s": clean_s,
                  "clean_peak_mib": peak_mib(), "removed": res.removed, "outcome": res.outcome}))
"""


def one_run(cfg: LlogConfig, records: int, keys: int) -> dict[str, float]:
    topic = f"kc-{keys}-{time.monotonic_ns()}"
    with Connection(cfg) as conn:
        Topics(conn).create(topic, 1, cleanup_policy="compact")
        with Writer(conn) as w:
            written = 0
            while written < records:
                chunk = min(10_000, records - written)
                w.append(topic, 0, [Record(b"value-%d" % (written + i), key=b"key-%d" % ((written + i) % keys))
                                    for i in range(chunk)])
                written += chunk
        while compact_once(conn, topic, 0).outcome == "compacted":
            pass
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent),
           **{f"LLOG_{k.upper()}": v for k, v in _env(cfg).items()}}
    out = subprocess.run([sys.executable, "-c", CHILD, topic], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"the child failed:\n{out.stderr[-3000:]}")
    got: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    if got["outcome"] != "cleaned" or got["removed"] != records - keys:
        raise SystemExit(f"the pass did not clean as expected: {got}")
    return got


def _env(cfg: LlogConfig) -> dict[str, str]:
    return {"etcd_endpoints": ",".join(cfg.etcd_endpoints), "object_store": cfg.object_store,
            "s3_endpoint_url": cfg.s3_endpoint_url or "", "root_prefix": cfg.root_prefix,
            "compact_min_dirty_ratio": "0", "compact_key_map_entries": str(cfg.compact_key_map_entries)}


def main() -> None:
    p = bench_args(__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=None, help="records per topic (1,000,000; --quick 200,000)")
    p.add_argument("--keys", type=int, nargs="+", default=[10_000, 100_000])
    args = p.parse_args()
    records = args.records or (200_000 if args.quick else 1_000_000)
    runs = args.runs or (1 if args.quick else 3)
    rows, result = [], {"records": records, "runs": runs}
    with LocalStack() as stack:
        cfg = replace(stack.config(), compact_min_age_ms=0, settle_after_ms=0, compact_min_dirty_ratio=0.0)
        for keys in args.keys:
            got = [one_run(cfg, records, keys) for _ in range(runs)]

            def med(field: str, got: list[dict[str, float]] = got) -> float:
                return median([g[field] for g in got])

            ratio = med("clean_s") / med("scan_s")
            rows.append([f"{keys:,}", f"{med('scan_s'):.2f}", f"{med('clean_s'):.2f}", f"{ratio:.2f}",
                         f"{med('removed'):,.0f}", f"{med('scan_peak_mib'):.0f}", f"{med('clean_peak_mib'):.0f}"])
            for field in ("scan_s", "clean_s", "scan_peak_mib", "clean_peak_mib"):
                result[f"{field}_{keys}"] = med(field)
            result[f"clean_over_scan_{keys}"] = ratio
    print(f"{runs} run(s) of {records:,} records in one partition; one key compaction pass each")
    print_table(["keys", "scan s", "pass s", "pass / scan", "removed", "peak MiB after scan",
                 "peak MiB after pass"], rows)
    emit_json(result)


if __name__ == "__main__":
    main()
