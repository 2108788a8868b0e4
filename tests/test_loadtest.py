"""The load-test kit: routing (owner sets, remaps), scenario files, reconciliation
against a real log, and one short end-to-end run with a broker killed mid-run."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from llog.connection import Connection
from llog.errors import ConfigError
from llog.loadtest import orchestrator, report
from llog.loadtest.collector import proc_stat
from llog.loadtest.loss_report import loss_report, lost_batches
from llog.loadtest.reconcile import Ack, Mismatch, reconcile
from llog.loadtest.routing import NoLiveOwner, Router, owner_set
from llog.loadtest.scenario import load_scenario, parse_scenario
from llog.records import AppendGroup, Record
from llog.topic.admin import Topics
from llog.writer import Writer

SCENARIOS = Path(__file__).resolve().parents[1] / "loadtest" / "scenarios"
BROKERS = [f"broker-{i}" for i in range(5)]
PARTS = [("orders", p) for p in range(64)]


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_owner_sets_are_stable_and_independent_of_broker_order() -> None:
    sets = {tp: owner_set(*tp, BROKERS, 2, seed=7) for tp in PARTS}
    assert all(len(s) == 2 and len(set(s)) == 2 for s in sets.values())
    assert sets == {tp: owner_set(*tp, list(reversed(BROKERS)), 2, seed=7) for tp in PARTS}
    # Spread over the brokers, and the seed changes the placement.
    assert {b for s in sets.values() for b in s} == set(BROKERS)
    assert sets != {tp: owner_set(*tp, BROKERS, 2, seed=8) for tp in PARTS}


def test_adding_a_broker_only_moves_partitions_onto_it() -> None:
    before = {tp: owner_set(*tp, BROKERS, 2, seed=1) for tp in PARTS}
    after = {tp: owner_set(*tp, [*BROKERS, "broker-5"], 2, seed=1) for tp in PARTS}
    for tp in PARTS:
        assert set(after[tp]) - set(before[tp]) <= {"broker-5"}
    assert any("broker-5" in s for s in after.values())


def test_dead_broker_remaps_inside_the_owner_set_and_comes_back(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    router = Router(BROKERS, 2, seed=3, policy="round_robin", revive_after_s=1.0, clock=clock)
    victim = "broker-2"
    affected = [tp for tp in PARTS if victim in router.owners(*tp)]
    assert affected
    with caplog.at_level(logging.WARNING, logger="llog.loadtest.routing"):
        router.mark_dead(victim, PARTS)
    for tp in affected:
        assert f"{tp[0]}/{tp[1]} remapped to" in caplog.text
    for tp in PARTS:
        picks = {router.pick(*tp) for _ in range(4)}
        assert victim not in picks
        assert picks <= set(router.owners(*tp))
    clock.now = 1.5
    # Out of its time out, one request tries it; the others keep away until it answers.
    tried = [tp for tp in affected if victim in {router.pick(*tp) for _ in range(4)}]
    assert len(tried) == 1
    assert all(victim not in {router.pick(*tp) for _ in range(4)} for tp in affected)
    router.answered(victim)
    assert all(victim in {router.pick(*tp) for _ in range(4)} for tp in affected)
    # A failure in a row doubles the time out.
    router.mark_dead(victim, PARTS)
    router.mark_dead(victim, PARTS)
    clock.now = 1.5 + 1.5
    assert all(victim not in {router.pick(*tp) for _ in range(4)} for tp in affected)
    clock.now = 1.5 + 2.5
    assert any(victim in {router.pick(*tp) for _ in range(4)} for tp in affected)


def test_round_robin_rotates_over_owners_and_fails_with_no_live_owner() -> None:
    router = Router(BROKERS, 3, seed=0, policy="round_robin")
    tp = PARTS[0]
    assert sorted(router.pick(*tp) for _ in range(6)) == sorted(router.owners(*tp) * 2)
    for b in router.owners(*tp):
        router.mark_dead(b, [tp])
    with pytest.raises(NoLiveOwner):
        router.pick(*tp)


def test_least_inflight_avoids_the_busy_owner() -> None:
    router = Router(BROKERS, 2, seed=0, policy="least_inflight")
    tp = PARTS[0]
    first, second = router.owners(*tp)
    router.begin(first)
    assert router.pick(*tp) == second
    router.begin(second)
    router.begin(second)
    assert router.pick(*tp) == first
    router.end(second)
    router.end(second)
    router.end(first)
    assert router.pick(*tp) == first


def test_scenarios_load_and_bad_keys_are_refused() -> None:
    smoke = load_scenario(SCENARIOS / "smoke.toml")
    assert (smoke.cluster.brokers, len(smoke.partitions), smoke.duration_s) == (2, 16, 60)
    assert [(c.at_s, c.target) for c in smoke.chaos] == [(30, "broker-1")]
    ci = load_scenario(SCENARIOS / "ci.toml")
    assert ci.chaos[0].at_s == ci.duration_s / 2
    with pytest.raises(ConfigError, match="colour"):
        parse_scenario({"name": "x", "duration_s": 1, "topics": [{"name": "t", "partitions": 1}], "colour": 1})
    with pytest.raises(ConfigError, match="broker-9"):
        parse_scenario({"name": "x", "duration_s": 1, "topics": [{"name": "t", "partitions": 1}],
                        "chaos": [{"at_s": 0, "target": "broker-9"}]})


def test_reconcile_lists_lost_misplaced_and_duplicated_records(conn: Connection) -> None:
    Topics(conn).create("rec", 1)
    ids = ["g0t0-0", "g0t0-1", "g0t0-2", "g0t0-1", "g0t0-4"]  # -1 twice, -3 never written
    with Writer(conn) as w:
        w.append("rec", 0, [Record(f"{i} pad".encode()) for i in ids])
    acks = [
        Ack("rec", 0, 0, 2, "g0t0", 0, 0, "b"),  # offsets 0-2: fine, but -1 has a second copy
        Ack("rec", 0, 3, 3, "g0t0", 3, 1, "b"),  # claims -3 at 3: never written
        Ack("rec", 0, 3, 3, "g0t0", 4, 2, "b"),  # claims -4 at 3: it is at 4
    ]
    r = reconcile(conn, acks, [("rec", 0)])
    kinds = sorted((m.kind, m.record_id) for m in r.mismatches)
    assert kinds == [("conflicting_ack", "g0t0-4"), ("duplicated", "g0t0-1"), ("lost", "g0t0-3"),
                     ("misplaced", "g0t0-4")]
    assert (r.acked_records, r.verified, r.lost, r.misplaced, r.duplicated) == (5, 2, 1, 1, 1)
    assert not r.ok
    dup = next(m for m in r.mismatches if m.kind == "duplicated")
    assert dup.found_offsets == (1, 3)


def test_a_loss_report_tells_a_commit_etcd_never_had_from_one_it_had(conn: Connection) -> None:
    """Two batches of one idempotent producer reported lost: the first was committed (its
    control version and producer version are in etcd's history, its blob in the store),
    the second never was (claimed past the end, under a sequence never committed)."""
    Topics(conn).create("lossy", 1)
    with Writer(conn) as w:
        [first] = w.append_shared([AppendGroup("lossy", 0, [Record(f"g0t0-{i} x".encode()) for i in range(3)],
                                               producer_id="lt-run-g0t0", sequence=0)])
        w.append("lossy", 0, [Record(b"other")])  # the control moves on past the batch
    uri = f"s3://bucket/{first.data_key}"
    committed = Ack("lossy", 0, 0, 2, "g0t0", 0, 0, "broker-1", uri, False)
    never = Ack("lossy", 0, 4, 6, "g0t0", 3, 1, "broker-1", uri.replace(first.data_key.rsplit("/", 1)[1], "x"), False)
    lost = [Mismatch("lost", "lossy", 0, f"g0t0-{i}", i, ()) for i in (0, 4)]
    assert lost_batches([committed, never], lost) == [committed, never]
    report = loss_report(conn, [committed, never])
    had, missing = report["batches"]
    assert had["commit_in_etcd_history"] and had["blob_in_store"]
    assert [v["sequence"] for v in had["producer_versions"]] == [0]
    assert not missing["commit_in_etcd_history"] and not missing["blob_in_store"]
    # The control's versions, newest first, back to one before the batch's offsets: the
    # writer's settle at close, the commit of "other", the batch's own commit.
    assert [v["next_offset"] for v in had["control_versions"]] == [4, 4, 3]
    assert had["control_versions"][2]["pending"][1:3] == [0, 2]
    assert [v["next_offset"] for v in missing["control_versions"]] == [4]
    assert report["not_reported"] == 0


@pytest.mark.timeout(180)
def test_ci_scenario_with_a_broker_kill_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    """``llog loadtest run loadtest/scenarios/ci.toml``, the command loadtest/README.md
    shows first (its block there is not run again)."""
    scenario = load_scenario(SCENARIOS / "ci.toml")
    # Exec'd, not forked: the generator's processes cannot be children of a daemonic one.
    out = subprocess.run([sys.executable, "-m", "llog", "loadtest", "run", str(SCENARIOS / "ci.toml"),
                          "--results", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-4000:]
    lines = out.stderr.splitlines()  # the live progress
    run_dir = Path(out.stdout.split("run directory: ", 1)[1].split(" (", 1)[0])
    summary = json.loads((run_dir / "summary.json").read_text())
    assert out.stdout.splitlines()[-1] == json.dumps(summary["verdict"])
    v = summary["verdict"]
    assert summary["reconciliation"]["mismatches"] == []
    assert (v["lost"], v["duplicated"]) == (0, 0)
    assert v["acked"] == summary["client"]["acked_records"] > 0
    assert v["verified"] == v["acked"] and v["all_acked_verified"]
    # The kill really happened mid-run and cost at least one failed request.
    kill = next(e for e in summary["chaos"] if e["action"] == "kill")
    assert kill["ok"] and kill["target"] == "broker-1"
    assert any(e["action"] == "restart" and e["ok"] for e in summary["chaos"])
    assert any(k.startswith("transport:") for k in summary["client"]["errors"])
    assert summary["client"]["failed_records"] == 0
    for name in ("scenario.json", "layout.json", "env.json", "git.json", "routing.json", "summary.json",
                 "collector.jsonl", "client/client_summary.json", "client/client_samples.jsonl",
                 "logs/broker-0.log", "logs/compactor.log", "report.html", *report.CHARTS):
        assert (run_dir / name).is_file(), name
    # Live progress: phases, a line per interval of load with the faults so far, the report.
    load = [line for line in lines if line.startswith("[load")]
    assert len(load) >= scenario.duration_s // scenario.interval_s - 2
    assert any("faults 1" in line for line in load) and "acked" in load[-1]
    assert lines[-1] == f"report: {run_dir / 'report.html'}"
    page = (run_dir / "report.html").read_text()
    assert "every acknowledged record verified" in page
    assert all(f'src="{c}"' in page for c in report.CHARTS) and "kill broker-1" in page
    for chart in report.CHARTS:
        assert (run_dir / chart).read_bytes().startswith(b"\x89PNG")


@pytest.mark.timeout(180)
def test_kafka_scenario_with_a_broker_kill_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    pytest.importorskip("confluent_kafka")
    scenario = load_scenario(SCENARIOS / "kafka-ci.toml")
    assert scenario.load.protocol == "kafka"
    run_dir, summary = orchestrator.run(scenario, tmp_path, progress=lambda _line: None)
    v = summary["verdict"]
    assert summary["reconciliation"]["mismatches"] == []
    assert (v["lost"], v["duplicated"]) == (0, 0)
    assert v["acked"] == summary["client"]["acked_records"] > 1000
    assert v["verified"] == v["acked"] and v["all_acked_verified"]
    assert summary["client"]["failed_records"] == 0
    kill = next(e for e in summary["chaos"] if e["action"] == "kill")
    assert kill["ok"] and kill["target"] == "broker-1"
    assert "--kafka-port" in (run_dir / "layout.json").read_text()


def test_up_status_down_leave_nothing_running(tmp_path: Path) -> None:
    def llog(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "llog", "loadtest", *args, "--results", str(tmp_path)],
                              capture_output=True, text=True, timeout=120)

    up = llog("up", str(SCENARIOS / "ci.toml"))
    assert up.returncode == 0, up.stderr
    run_dir = orchestrator.current(tmp_path)
    pids = [v["pid"] for v in json.loads((run_dir / "layout.json").read_text()).values() if isinstance(v, dict)]
    assert len(pids) == 5  # etcd, s3, two brokers, compactor
    try:
        status = llog("status")
        assert status.returncode == 0, status.stdout
        assert all(p["alive"] for p in json.loads(status.stdout)["processes"].values())
        assert "LLOG_ETCD_ENDPOINTS" in (run_dir / "env.sh").read_text()
    finally:
        down = llog("down")
    assert down.returncode == 0, down.stdout + down.stderr
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids)
    assert not (tmp_path / "current").exists()


def test_down_never_signals_a_process_that_took_a_gone_members_pid(tmp_path: Path) -> None:
    """``down`` and ``status`` know a process by its pid and start time: a member that
    exited left its pid to the kernel, which gives it to another process (pids go round
    in minutes on a busy machine), and that one is not the cluster's to stop."""
    # Not this test's child, as `up`'s processes are not `down`'s: its exit is reaped elsewhere.
    pid = int(subprocess.run(["sh", "-c", "sleep 120 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True,
                             check=True).stdout)
    try:
        stat = proc_stat(pid)
        assert stat is not None
        started = int(stat[19])
        run_dir = tmp_path / "run"
        run_dir.mkdir()
        (tmp_path / "current").write_text("run")
        layout = {"broker-0": {"pid": pid, "started": started - 1}, "network": None}  # another process, same pid
        (run_dir / "layout.json").write_text(json.dumps(layout))
        assert orchestrator.status(tmp_path)["processes"]["broker-0"]["alive"] is False
        assert orchestrator.down(tmp_path, timeout=5) == {"broker-0": True}  # gone, as far as the cluster goes
        assert (proc_stat(pid) or [])[19:20] == [str(started)]  # untouched
        # With its own start time it is the member: stopped.
        (tmp_path / "current").write_text("run")
        (run_dir / "layout.json").write_text(json.dumps({**layout, "broker-0": {"pid": pid, "started": started}}))
        assert orchestrator.status(tmp_path)["processes"]["broker-0"]["alive"] is True
        assert orchestrator.down(tmp_path, timeout=30) == {"broker-0": True}
        assert not Path(f"/proc/{pid}").exists()
    finally:
        if Path(f"/proc/{pid}/stat").exists() and Path(f"/proc/{pid}/stat").read_text().split()[1] == "(sleep)":
            os.kill(pid, signal.SIGKILL)


def test_up_and_down_of_a_cluster_in_namespaces_leave_no_namespace_behind(tmp_path: Path) -> None:
    from llog.nemesis.network import available

    if available() is not None:
        pytest.fail(f"{available()}: CI runs as root with iproute2 (make test installs it)")

    def llog(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "llog", "loadtest", *args, "--results", str(tmp_path)],
                              capture_output=True, text=True, timeout=120)

    def namespaces() -> str:
        return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout

    up = llog("up", str(SCENARIOS / "partitions-ci.toml"))
    assert up.returncode == 0, up.stderr
    assert "network 10." in up.stdout
    net = json.loads((orchestrator.current(tmp_path) / "layout.json").read_text())["network"]
    ours = [n["netns"] for n in net["nodes"].values() if n["netns"]]
    try:
        assert len(ours) == 9 and all(ns in namespaces() for ns in ours)  # 3 etcd, s3, proxy, 3 brokers, compactor
        status = llog("status")
        assert all(p["alive"] and p.get("healthy", True) for p in json.loads(status.stdout)["processes"].values())
    finally:
        down = llog("down")
    assert down.returncode == 0, down.stdout + down.stderr
    assert not any(ns in namespaces() for ns in ours)
