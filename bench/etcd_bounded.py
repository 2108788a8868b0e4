"""etcd stays bounded: a sustained produce run with the compactor stopped, then started.

Starts a local stack (real etcd + moto S3 on loopback, see ``bench/common.py``), then:

1. with no compactor running, a ``BatchingProducer`` sends rounds of one record to each
   of ``--partitions`` partitions (each round is one shared blob, one index key per
   partition) until every partition refuses with the retriable back-pressure error
   (``LLOG_MAX_UNCOMPACTED_KEYS`` = ``--bound``); every error is counted by type;
2. figures: index keys per partition, llog's keys in etcd, etcd's revision and DB size;
3. starts the compactor service (compaction passes, and llog's etcd history compaction
   every ``--etcd-interval`` seconds) and waits until every partition is compacted and
   etcd's history is compacted past the end of that work; then defragments etcd;
4. the same figures again, and one more round of sends (accepted again).

The suite's etcd runs with ``--auto-compaction-retention 5m``; a ``--quick`` run (under
2 minutes) ends before that would compact anything, so what shrinks is llog's doing.
No pass/fail: the last line is one JSON object with the figures.
"""

from __future__ import annotations

import logging
import sys
import time
from collections import Counter
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import LocalStack, bench_args, emit_json, print_table

from compactor.etcd_history import read_record
from compactor.service import CompactorService
from llog.codec.etcd_values.compaction import CompactionCursor
from llog.connection import Connection
from llog.errors import TooManyUncompactedKeys
from llog.etcd.maintenance import EtcdMaintenance
from llog.producer import BatchingProducer
from llog.state.keys import prefix_range_end
from llog.topic.admin import Topics

TOPIC = "bounded"


def figures(conn: Connection, partitions: int) -> dict[str, Any]:
    """Index keys per partition (all, and at or above the compaction cursor), llog's
    keys in etcd, etcd's revision and DB size."""
    keys = conn.keys
    index = [conn.etcd.count(keys.index_prefix(TOPIC, p), keys.index_range_end(TOPIC, p)) for p in range(partitions)]
    root = keys.all_prefix()
    status = conn.etcd.status()
    return {
        "index_keys_max": max(index),
        "index_keys_total": sum(index),
        "llog_keys": conn.etcd.count(root, prefix_range_end(root)),
        "revision": status["revision"],
        "db_size": status["db_size"],
    }


def produce_until_refused(p: BatchingProducer, partitions: int, max_rounds: int) -> tuple[int, int, Counter[str]]:
    """Rounds of one record per partition until every partition refuses; returns
    (rounds, records accepted, errors by type)."""
    errors: Counter[str] = Counter()
    accepted = 0
    for rnd in range(1, max_rounds + 1):
        futs: list[Future[Any]] = [p.send(TOPIC, part, b"x" * 100) for part in range(partitions)]
        refused = 0
        for f in futs:
            exc = f.exception(timeout=120)
            if exc is None:
                accepted += 1
            else:
                errors[type(exc).__name__] += 1
                refused += isinstance(exc, TooManyUncompactedKeys)
        if refused == partitions:
            return rnd, accepted, errors
    return max_rounds, accepted, errors


def compacted(conn: Connection, partitions: int, slack: int) -> bool:
    """Every partition has at most ``slack`` index keys at or above its cursor."""
    keys = conn.keys
    for part in range(partitions):
        kv = conn.etcd.get(keys.compaction_cursor(TOPIC, part))
        cursor = 0 if kv is None else CompactionCursor.decode(kv.value).offset
        if conn.etcd.count(keys.index(TOPIC, part, cursor), keys.index_range_end(TOPIC, part)) > slack:
            return False
    return True


def wait_for(cond: Any, timeout: float, what: str) -> float:
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.2)
    return time.monotonic() - t0


def main() -> None:
    ap = bench_args("etcd keys and DB size under sustained produce, compactor stopped then started")
    ap.add_argument("--partitions", type=int, default=None)
    ap.add_argument("--bound", type=int, default=None, help="LLOG_MAX_UNCOMPACTED_KEYS")
    ap.add_argument("--etcd-interval", type=float, default=2.0, help="LLOG_ETCD_COMPACT_INTERVAL_S for the service")
    args = ap.parse_args()
    logging.getLogger("apscheduler").setLevel(logging.ERROR)  # skipped runs on a busy machine
    partitions = args.partitions or (4 if args.quick else 8)
    bound = args.bound or (500 if args.quick else 5000)
    with LocalStack() as stack:
        cfg = stack.config(
            "s3", max_uncompacted_keys=bound, backpressure_check_s=1.0, compact_min_age_ms=0,
            settle_after_ms=0, batch_max_delay_ms=1,
        )
        with Connection(cfg) as conn:
            Topics(conn).create(TOPIC, partitions)
            start = figures(conn, partitions)
            t0 = time.monotonic()
            with BatchingProducer(conn, max_inflight=1) as p:
                rounds, accepted, errors = produce_until_refused(p, partitions, max_rounds=bound * 4)
            produce_s = time.monotonic() - t0
            peak = figures(conn, partitions)
            svc_cfg = replace(
                cfg, etcd_compact_interval_s=args.etcd_interval, compactor_pass_interval_s=0.5,
                compactor_discovery_interval_s=0.5, vacuum_interval_s=0, compactor_max_runs_per_task=64,
            )
            t0 = time.monotonic()
            with CompactorService(svc_cfg, http=False):
                wait_for(lambda: compacted(conn, partitions, slack=2), 600, "compaction of every partition")
                done_rev = conn.etcd.status()["revision"]
                wait_for(lambda: (r := read_record(conn)) is not None and r.revision >= done_rev, 600,
                         "etcd history compaction past the compactor's work")
            recover_s = time.monotonic() - t0
            EtcdMaintenance(conn.etcd).defragment()
            after = figures(conn, partitions)
            with BatchingProducer(conn, max_inflight=1) as p:
                again = sum(p.send(TOPIC, part, b"y").exception(timeout=120) is None for part in range(partitions))
    states = (("start", start), ("compactor stopped, refused", peak),
              ("compactor + etcd compaction + defrag", after))
    rows = [[name, f["index_keys_max"], f["index_keys_total"], f["llog_keys"], f["revision"], f["db_size"]]
            for name, f in states]
    print(f"{partitions} partitions, bound {bound} uncompacted index keys; {rounds} rounds in {produce_s:.1f} s, "
          f"{accepted} records accepted; errors by type: {dict(errors)}; recovery {recover_s:.1f} s")
    print_table(["state", "index keys/partition (max)", "index keys", "llog etcd keys", "revision", "etcd db bytes"],
                rows)
    print(f"sends accepted after recovery: {again}/{partitions}")
    emit_json({
        "partitions": partitions, "bound": bound, "rounds": rounds, "accepted": accepted,
        "errors": dict(errors), "produce_s": produce_s, "recover_s": recover_s,
        "index_keys_per_partition_peak": peak["index_keys_max"],
        "index_keys_per_partition_after": after["index_keys_max"],
        "llog_keys_start": start["llog_keys"], "llog_keys_peak": peak["llog_keys"],
        "llog_keys_after": after["llog_keys"],
        "db_size_start": start["db_size"], "db_size_peak": peak["db_size"], "db_size_after": after["db_size"],
        "accepted_after_recovery": again,
    })


if __name__ == "__main__":
    main()
