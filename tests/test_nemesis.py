"""The short nemesis (``loadtest/scenarios/nemesis-ci.toml``): every fault type the
long one has, at least once, against a real cluster under load, then every
acknowledged record reconciled; the network partitions
(``loadtest/scenarios/partitions-ci.toml``), each kind of cut once; and a zone cut off
(``loadtest/scenarios/zones-ci.toml``). The long run is ``llog loadtest run
loadtest/scenarios/nemesis.toml`` (loadtest/README.md)."""

from __future__ import annotations

import glob
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from llog.loadtest import orchestrator
from llog.loadtest.scenario import Scenario, load_scenario
from llog.nemesis.network import available as network_available

SCENARIOS = Path(__file__).resolve().parent.parent / "loadtest" / "scenarios"


@pytest.mark.timeout(420)
def test_short_nemesis_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    if not glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1"):
        pytest.fail("libfaketime is missing: `make test` installs Debian's faketime package")
    scenario = load_scenario(SCENARIOS / "nemesis-ci.toml")
    run_dir, summary = orchestrator.run(scenario, tmp_path)
    v = summary["verdict"]
    _nothing_lost(summary)
    assert v["acked"] > 0 and v["verified"] == v["acked"] and v["all_acked_verified"]
    # Every step of the plan ran, and every fault type was injected.
    assert all(e["ok"] for e in summary["chaos"]), summary["chaos"]
    injected = summary["faults_injected"]
    for kind in ("pause:broker", "pause:compactor", "pause:etcd", "kill:broker", "kill:compactor", "kill:etcd",
                 "faults:error_503", "faults:error_500", "faults:drop", "faults:timeout", "faults:slow"):
        assert injected.get(kind, 0) >= 1, (kind, injected)
    leader_kills = [e for e in summary["chaos"] if e["action"] == "kill" and e["target"] == "etcd-leader"]
    assert len(leader_kills) == 1 and len(leader_kills[0]["members"]) == 1
    # broker-2 ran with its wall clock ten minutes ahead.
    layout = json.loads((run_dir / "layout.json").read_text())
    assert layout["broker-2"]["clock_skew"] == "+600s"
    # The proxy saw the faults it was told to inject.
    assert sum(summary["s3_proxy"]["injected"].values()) > 0
    # etcd's size at both ends is reported.
    state = summary["etcd"]["state"]
    assert state["start"]["keys"] > 0 and state["end"]["db_size"] > 0
    # Availability per kind of fault, from the same run (figures, not a pass mark: the
    # closing notes and loadtest/README.md carry them).
    a = summary["availability"]
    assert set(a["by_kind"]) >= {"pause:broker", "kill:broker", "kill:etcd-leader", "kill:etcd-all",
                                 "pause:etcd-member", "faults:s3-drop"}
    assert set(a["zero_ack_intervals_unexcused"]) <= set(a["zero_ack_intervals"])
    assert a["steady_rate_rec_s"] > 0
    # A paused broker no longer stops the log for the length of its pause: its requests
    # are cut and re-sent elsewhere (4 s of pause; it used to be 7 zero-ack seconds).
    assert a["by_kind"]["pause:broker"]["longest_gap_s"] < 4


def _nothing_lost(summary: dict[str, Any]) -> None:
    """No acknowledged record lost, misplaced or duplicated, none unreadable; a loss
    fails with what etcd's history said of the lost batches (llog/loadtest/loss_report.py)."""
    rec, v = summary["reconciliation"], summary["verdict"]
    assert v["lost"] == 0, json.dumps(summary.get("loss_report"), indent=1)[:20_000]
    assert rec["mismatches"] == [] and rec["unreadable"] == []
    assert v["duplicated"] == 0


def _networked_run(name: str, tmp_path: Path) -> tuple[Scenario, Path, dict[str, Any]]:
    """A scenario whose processes each run in a network namespace, run: every
    acknowledged record read back, none lost or duplicated."""
    why = network_available()
    if why is not None:
        pytest.fail(f"{why}: CI runs as root with iproute2 (make test installs it)")
    scenario = load_scenario(SCENARIOS / name)
    run_dir, summary = orchestrator.run(scenario, tmp_path)
    v = summary["verdict"]
    _nothing_lost(summary)
    assert v["acked"] > 0 and v["verified"] == v["acked"] and v["all_acked_verified"]
    return scenario, run_dir, summary


@pytest.mark.timeout(420)
def test_network_partitions_lose_and_duplicate_nothing(tmp_path: Path) -> None:
    scenario, run_dir, summary = _networked_run("partitions-ci.toml", tmp_path)
    cuts = [e for e in summary["chaos"] if e["action"] == "partition"]
    assert all(e["ok"] for e in summary["chaos"]), summary["chaos"]
    assert len(cuts) == len(scenario.chaos) and all(e["side_a"] and e["side_b"] for e in cuts)
    kinds = set(summary["availability"]["by_kind"])
    assert kinds >= {"partition:broker|etcd", "partition:broker|s3", "partition:etcd-member|etcd",
                     "partition:etcd-leader|etcd", "partition:clients|broker", "partition:broker>s3"}
    # The network is gone with the cluster: no namespace of this run is left.
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    layout = json.loads((run_dir / "layout.json").read_text())
    assert not any(layout["network"]["tag"] in line for line in left.splitlines())


@pytest.mark.timeout(420)
def test_transactional_nemesis_has_no_anomaly(tmp_path: Path) -> None:
    """``loadtest/scenarios/txn-ci.toml``: exactly-once consume-transform-produce
    transactions through broker pauses and kills, the etcd leader's death and S3 faults."""
    scenario = load_scenario(SCENARIOS / "txn-ci.toml")
    _, summary = orchestrator.run(scenario, tmp_path)
    v = summary["verdict"]
    assert summary["drained"], summary
    assert v["anomalies"] == {k: [] for k in ("lost", "duplicated", "unexpected", "aborted_read", "torn",
                                               "out_of_order")}
    assert v["input_records"] > 0 and v["output_records"] == {"out-a": v["input_records"],
                                                                "out-b": v["input_records"]}
    assert v["transactions"]["committed"] > 0
    assert all(e["ok"] for e in summary["chaos"]), summary["chaos"]
    injected = summary["faults_injected"]
    for kind in ("pause:broker", "kill:broker", "kill:etcd", "pause:compactor", "faults:error_503", "faults:drop"):
        assert injected.get(kind, 0) >= 1, (kind, injected)


@pytest.mark.timeout(420)
def test_a_zone_cut_off_loses_nothing_and_stops_no_other_zone(tmp_path: Path) -> None:
    """``loadtest/scenarios/zones-ci.toml``: three zones, zone a's broker and etcd member
    cut off from everything for 12 s under Kafka load from every zone. About 50 s: the
    scenario's 30 s of load (the cut needs steady load before it, 12 s of cut and the
    heal after), nine processes' start and the read-back of every record."""
    _, run_dir, summary = _networked_run("zones-ci.toml", tmp_path)
    (cut,) = [e for e in summary["chaos"] if e["action"] == "partition"]
    layout = json.loads((run_dir / "layout.json").read_text())
    in_a = sorted(n for n, v in layout.items() if isinstance(v, dict) and v.get("zone") == "a")
    assert cut["ok"] and sorted(cut["side_a"]) == in_a
    assert {"broker-0", "etcd-m0", "compactor"} <= set(cut["side_a"]) and "clients" in cut["side_b"]
    (heal,) = [e for e in summary["chaos"] if e["action"] == "heal"]
    a = summary["availability"]
    assert "partition:zone|rest" in a["by_kind"]
    # The other zones' clients were never stopped for the cut's length (figures in the
    # closing notes: none at all in the runs measured) ...
    for zone in ("b", "c"):
        assert a["by_zone"][zone]["longest_gap_s"] < heal["done_s"] - cut["done_s"], a["by_zone"]
    # ... and zone a's clients, which still reach the other zones, moved there during
    # the cut instead of waiting for it to heal.
    samples = [json.loads(line) for line in (run_dir / "client" / "client_samples.jsonl").read_text().splitlines()]
    during = [s["acked_by_zone"]["a"] for s in samples if cut["done_s"] + 1 <= s["t"] <= heal["done_s"]]
    assert during and during[-1] > during[0], during
