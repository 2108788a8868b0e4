"""Scenario files with wrong types or shapes are a :class:`ConfigError` naming the key,
never a crash while the scenario is checked or run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from llog.errors import ConfigError
from llog.loadtest.scenario import load_scenario, parse_scenario

SCENARIOS = Path(__file__).resolve().parent.parent / "loadtest" / "scenarios"


def _doc(**changes: Any) -> dict[str, Any]:
    return {"name": "x", "duration_s": 60, "topics": [{"name": "t", "partitions": 2}], **changes}


@pytest.mark.parametrize(
    ("doc", "says"),
    [
        (_doc(duration_s="sixty"), "duration_s = 'sixty' must be a number"),
        (_doc(duration_s=True), "duration_s = True must be a number"),
        (_doc(seed=1.5), "seed = 1.5 must be an integer"),
        (_doc(name=7), "name = 7 must be a string"),
        (_doc(topics=[{"name": "t", "partitions": "two"}]), "topics[0].partitions = 'two' must be an integer"),
        (_doc(topics=[{"name": "a/b", "partitions": 1}]), "invalid topic name 'a/b'"),
        (_doc(topics="t"), "scenario: "),
        (_doc(cluster={"brokers": "2"}), "cluster.brokers = '2' must be an integer"),
        (_doc(cluster={"compactor": "yes"}), "cluster.compactor = 'yes' must be true or false"),
        (_doc(cluster=3), "scenario: "),
        (_doc(load={"rate": "fast"}), "load.rate = 'fast' must be a number"),
        (_doc(chaos=[{"at_s": "soon", "target": "broker-0"}]), "chaos[0].at_s = 'soon' must be a number"),
        (_doc(chaos=[1]), "scenario: "),
        (_doc(cluster={"zones": ["a", "a"], "brokers": 2}), "cluster.zones names a zone twice"),
        (_doc(cluster={"zones": ["a", "b c"], "brokers": 2}), "'b c' is not a zone name"),
        (_doc(cluster={"zones": ["a", "b", "c"], "brokers": 2}), "must be at least one per zone"),
        (_doc(cluster={"zones": ["a", "b"], "brokers": 2, "network": True},
              chaos=[{"at_s": 1, "target": "zone-c", "peer": "rest", "action": "partition", "duration_s": 1}]),
         "chaos partition side 'zone-c' is not one of"),
        (_doc(cluster={"network": True},
              chaos=[{"at_s": 1, "target": "rest", "peer": "etcd", "action": "partition", "duration_s": 1}]),
         "chaos partition side 'rest' is not one of"),
        (_doc(cluster={"release": "0.0.9"}), "cluster.release '0.0.9' is not in RELEASES.md"),
        (_doc(chaos=[{"at_s": 1, "target": "broker-0", "action": "upgrade"}]),
         "chaos upgrade needs cluster.release"),
        (_doc(cluster={"release": "0.2.0"}, chaos=[{"at_s": 1, "target": "etcd", "action": "rollback"}]),
         "chaos rollback target 'etcd' is not one of ['broker-0', 'broker-1', 'compactor']"),
        (_doc(chaos=[{"at_s": 1, "target": "broker-0", "action": "finalize"}]),
         "chaos finalize targets 'cluster', not 'broker-0'"),
    ],
)
def test_badly_typed_scenario_is_a_config_error(doc: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_scenario(doc)
    assert says in str(info.value)


def test_shipped_scenarios_and_whole_numbers_still_parse() -> None:
    for path in SCENARIOS.glob("*.toml"):
        load_scenario(path)
    s = parse_scenario(_doc(interval_s=2, load={"rate": 100}))
    assert (s.duration_s, s.interval_s, s.load.rate) == (60, 2, 100)


def test_unreadable_scenario_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes(b'name = "caf\xe9"\n')
    with pytest.raises(ConfigError, match=r"latin1\.toml"):
        load_scenario(path)
