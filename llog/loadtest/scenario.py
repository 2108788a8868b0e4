"""Load-test scenarios: TOML files under ``loadtest/scenarios/`` loaded into frozen
dataclasses. Unknown keys are errors, so a typo never silently runs the default."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, get_type_hints

from llog.errors import ConfigError, InvalidTopicName
from llog.names import check_topic

ROUTING_POLICIES = ("round_robin", "least_inflight")
_TYPE_NAMES: dict[object, str] = {float: "a number", int: "an integer", str: "a string", bool: "true or false"}
STORES = ("s3", "file")


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int


@dataclass(frozen=True)
class ClusterSpec:
    brokers: int = 2
    store: str = "s3"
    compactor: bool = True
    #: WAL entries this old are compacted: short, so compaction runs during the test.
    compact_min_age_ms: int = 5000


@dataclass(frozen=True)
class LoadSpec:
    processes: int = 2
    threads: int = 4
    #: Offered records/s over all processes; 0 runs flat out.
    rate: float = 0.0
    record_bytes: int = 128
    records_per_partition: int = 20
    routing: str = "round_robin"
    #: Brokers in each partition's owner set (capped at the broker count).
    owners: int = 2
    request_timeout_s: float = 10.0
    #: Seconds a dead broker sits out before it is tried again.
    revive_after_s: float = 1.0
    #: After the run ends, seconds an unacknowledged batch keeps being retried.
    drain_s: float = 20.0


@dataclass(frozen=True)
class ChaosEvent:
    at_s: float
    target: str  # "broker-<i>" or "compactor"
    action: str = "kill"  # kill -9
    #: Seconds after the kill to start it again; negative: leave it dead.
    restart_after_s: float = 3.0


@dataclass(frozen=True)
class Scenario:
    name: str
    duration_s: float
    topics: tuple[TopicSpec, ...]
    interval_s: float = 1.0
    seed: int = 0
    cluster: ClusterSpec = field(default_factory=ClusterSpec)
    load: LoadSpec = field(default_factory=LoadSpec)
    chaos: tuple[ChaosEvent, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def partitions(self) -> list[tuple[str, int]]:
        return [(t.name, p) for t in self.topics for p in range(t.partitions)]


def load_scenario(path: Path) -> Scenario:
    import tomllib  # Python 3.11+; imported here so the rest of llog still runs on 3.10

    try:
        doc = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"scenario {path}: {exc}") from exc
    return parse_scenario(doc, str(path))


def parse_scenario(doc: dict[str, Any], where: str = "scenario") -> Scenario:
    try:
        top = dict(doc)
        cluster = ClusterSpec(**top.pop("cluster", {}))
        load = LoadSpec(**top.pop("load", {}))
        topics = tuple(TopicSpec(**t) for t in top.pop("topics", []))
        chaos = tuple(ChaosEvent(**c) for c in top.pop("chaos", []))
        s = Scenario(topics=topics, cluster=cluster, load=load, chaos=chaos, **top)
    except TypeError as exc:  # unknown or missing keys, or a section that is not a table
        raise ConfigError(f"{where}: {exc}") from None
    _check_types(s, where)
    _check(s, where)
    return s


def _type_ok(value: object, expected: object) -> bool:
    # TOML has no int/float distinction worth failing on: 60 is a fine duration_s.
    if expected is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if expected is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, expected) if isinstance(expected, type) else True


def _check_types(obj: Any, where: str, section: str = "") -> None:
    """Every scalar field has its declared type (``duration_s = "sixty"`` is an error
    naming the key, not a crash later)."""
    hints = get_type_hints(type(obj))
    for f in fields(obj):
        value = getattr(obj, f.name)
        key = f"{section}{f.name}"
        if is_dataclass(value):
            _check_types(value, where, f"{key}.")
        elif isinstance(value, tuple):
            for i, item in enumerate(value):
                _check_types(item, where, f"{key}[{i}].")
        elif not _type_ok(value, hints[f.name]):
            raise ConfigError(f"{where}: {key} = {value!r} must be {_TYPE_NAMES[hints[f.name]]}")


def _check(s: Scenario, where: str) -> None:
    problems = []
    for t in s.topics:
        try:
            check_topic(t.name)
        except InvalidTopicName as exc:
            problems.append(str(exc))
    if not s.topics or any(t.partitions <= 0 for t in s.topics):
        problems.append("needs at least one topic with partitions > 0")
    if s.duration_s <= 0 or s.interval_s <= 0:
        problems.append("duration_s and interval_s must be > 0")
    if s.cluster.brokers <= 0:
        problems.append("cluster.brokers must be > 0")
    if s.cluster.store not in STORES:
        problems.append(f"cluster.store must be one of {STORES}")
    if s.load.routing not in ROUTING_POLICIES:
        problems.append(f"load.routing must be one of {ROUTING_POLICIES}")
    if min(s.load.processes, s.load.threads, s.load.records_per_partition, s.load.owners) <= 0:
        problems.append("load.processes, threads, records_per_partition and owners must be > 0")
    if s.load.rate < 0 or s.load.record_bytes < 16:
        problems.append("load.rate must be >= 0 and load.record_bytes >= 16 (room for the record id)")
    for c in s.chaos:
        if c.action != "kill":
            problems.append(f"chaos action {c.action!r}: only 'kill' is supported")
        if c.target == "compactor" and not s.cluster.compactor:
            problems.append("chaos targets the compactor but cluster.compactor is false")
        elif c.target != "compactor" and not (
            c.target.startswith("broker-") and c.target[7:].isdigit() and int(c.target[7:]) < s.cluster.brokers
        ):
            problems.append(f"chaos target {c.target!r} is not compactor or broker-0..{s.cluster.brokers - 1}")
    if problems:
        raise ConfigError(f"{where}: " + "; ".join(problems))
