"""``llog loadtest up|run|status|down``: a local cluster under load (see loadtest/README.md)."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path
from typing import Any

from llog.loadtest.scenario import DEFAULT_RESULTS, load_scenario

# Each runner imports llog.loadtest.orchestrator itself: a cluster's worth of imports,
# not for every llog command (they all build this parser).


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("loadtest", help="local cluster load test with reconciliation")
    sub = p.add_subparsers(dest="loadtest_command", metavar="ACTION", required=True)
    results = {"type": Path, "default": DEFAULT_RESULTS,
               "help": "results root (default loadtest/results)"}

    q = sub.add_parser("run", help="start a cluster, drive the scenario, reconcile, stop; exit 1 on a mismatch")
    q.add_argument("scenario", type=Path, help="scenario TOML (loadtest/scenarios/*.toml)")
    q.add_argument("--results", **results)
    q.set_defaults(func=_run)

    q = sub.add_parser("up", help="start the scenario's cluster and leave it running")
    q.add_argument("scenario", type=Path)
    q.add_argument("--results", **results)
    q.set_defaults(func=_up)

    q = sub.add_parser("status", help="processes of the cluster `up` started, alive and healthy")
    q.add_argument("--results", **results)
    q.set_defaults(func=_status)

    q = sub.add_parser("down", help="stop the cluster `up` started")
    q.add_argument("--results", **results)
    q.set_defaults(func=_down)


def _run(args: argparse.Namespace) -> int:
    from llog.loadtest import orchestrator

    # SIGTERM unwinds like Ctrl-C, so the cluster's processes are stopped on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    run_dir, s = orchestrator.run(load_scenario(args.scenario), args.results,
                                  progress=lambda line: print(line, file=sys.stderr, flush=True))
    if s.get("protocol") == "kafka-txn":
        return _print_transactional(run_dir, s)
    v, c = s["verdict"], s["client"]
    lat = c["latency"]
    print(f"run directory: {run_dir} (report.html, charts, summary.json)")
    print(f"client: {c['intent_records']} intended, {c['acked_records']} acked ({c['acked_rate_rec_s']} rec/s), "
          f"{c['failed_records']} given up, {c['resends']} batch resends; "
          f"produce p50 {lat['p50_ms']} ms, p99 {lat['p99_ms']} ms")
    print(f"brokers accepted {s['brokers']['accepted_records']:.0f}; etcd ops {s['etcd']['ops_total']:.0f}; "
          f"S3 class A {s['s3']['class_a_requests']:.0f}, class B {s['s3']['class_b_requests']:.0f}; "
          f"requests ${s['billing_estimate_usd']['requests_total']}")
    for e in s["chaos"]:
        print(f"chaos: {e['action']} {e['target']} at {e['done_s']}s ok={e['ok']}")
    a = s["availability"]
    print(f"availability: {len(a['zero_ack_intervals'])} interval(s) of {a['interval_s']} s with nothing acknowledged, "
          f"{len(a['zero_ack_intervals_unexcused'])} of them while etcd had a majority "
          f"{a['zero_ack_intervals_unexcused']}; longest gap {a['longest_gap_s']} s "
          f"({a['longest_unexcused_gap_s']} s unexcused); steady rate {a['steady_rate_rec_s']} rec/s")
    for kind, k in a["by_kind"].items():
        print(f"  {kind}: longest gap {k['longest_gap_s']} s, {k['zero_ack_intervals']} zero-ack interval(s), "
              f"rate during it {k['worst_vs_steady']} x steady (worst of {k['windows']})")
    print(f"reconciliation: {v['verified']}/{v['acked']} verified, {v['lost']} lost, {v['duplicated']} duplicated, "
          f"{v['mismatch_count']} mismatches, {v['unreadable_offsets']} unreadable offsets")
    if s.get("faults_injected"):
        print("faults injected: " + ", ".join(f"{k} {n}" for k, n in sorted(s["faults_injected"].items())))
    st = s["etcd"].get("state")
    if st:
        print(f"etcd: keys {st['start']['keys']} -> {st['end']['keys']}, "
              f"db size {st['start']['db_size']:,} -> {st['end']['db_size']:,} bytes")
    print(json.dumps(v))
    return 0 if v["all_acked_verified"] else 1


def _print_transactional(run_dir: Path, s: dict[str, Any]) -> int:
    v = s["verdict"]
    print(f"run directory: {run_dir} (summary.json)")
    print(f"input: {s['fed']} fed, {v['input_records']} stored, {v.get('unprocessed_records', 0)} past the "
          f"committed offsets; outputs: {v['output_records']}; drained: {s['drained']}; "
          f"transactions: {v['transactions']}")
    for e in s["chaos"]:
        print(f"chaos: {e['action']} {e['target']} at {e['done_s']}s ok={e['ok']}")
    for w in s.get("stuck_workers", []):
        print(f"stuck client: worker {w['worker']} in {w['call']} for {w['for_s']} s "
              f"(transaction {w['transaction']}, counted unknown)")
    print("anomalies: " + ", ".join(f"{k} {n}" for k, n in v["anomaly_counts"].items()))
    for kind, examples in v["anomalies"].items():
        for line in examples:
            print(f"  {kind}: {line}")
    print(json.dumps({"ok": v["ok"], **v["anomaly_counts"]}))
    return 0 if v["ok"] and s["drained"] else 1


def _up(args: argparse.Namespace) -> int:
    from llog.loadtest import orchestrator

    run_dir = orchestrator.up(load_scenario(args.scenario), args.results)
    layout = json.loads((run_dir / "layout.json").read_text())
    print(f"cluster up; run directory {run_dir}")
    for name, v in layout.items():
        if isinstance(v, dict) and "pid" in v:
            print(f"  {name}: pid {v['pid']} {v.get('url') or v.get('endpoint', '')}")
    if layout.get("network"):
        net = layout["network"]
        print(f"  network {net['subnet']} on bridge {net['bridge']} (each process in a namespace llog-{net['tag']}-*)")
    print((run_dir / "env.sh").read_text(), end="")
    return 0


def _status(args: argparse.Namespace) -> int:
    from llog.loadtest import orchestrator

    st = orchestrator.status(args.results)
    print(json.dumps(st, indent=2))
    return 0 if all(p["alive"] and p.get("healthy", True) for p in st["processes"].values()) else 1


def _down(args: argparse.Namespace) -> int:
    from llog.loadtest import orchestrator

    stopped = orchestrator.down(args.results)
    print(json.dumps(stopped))
    return 0 if all(stopped.values()) else 1
