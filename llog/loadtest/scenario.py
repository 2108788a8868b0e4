"""Load-test scenarios: TOML files under ``loadtest/scenarios/`` loaded into frozen
dataclasses. Unknown keys are errors, so a typo never silently runs the default."""

from __future__ import annotations

import importlib.util
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, get_type_hints

from llog.errors import ConfigError, InvalidTopicName
from llog.name_rules import ZONE_PATTERN, ZONE_RE
from llog.names import TopicPartition, check_topic
from llog.nemesis.faults import KINDS, FaultPlan, FaultRule
from llog.nemesis.latency import profile

#: Where each run's directory goes unless told (relative to the working directory).
DEFAULT_RESULTS = Path("loadtest/results")

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
    #: etcd members on loopback (3 for a cluster whose leader chaos can kill).
    etcd_members: int = 1
    #: The compactor's vacuum: every this many seconds (0: never), with this grace.
    vacuum_interval_s: float = 0.0
    vacuum_grace_s: float = 3600.0
    #: Extra LLOG_* settings for every broker and the compactor (e.g. short TTLs).
    env: dict[str, str] = field(default_factory=dict)
    #: Member name -> wall-clock offset it runs with under Debian's libfaketime
    #: (``"+600s"``, ``"-10m"``): a writer whose clock is minutes off.
    clock_skew: dict[str, str] = field(default_factory=dict)
    #: Each etcd member, broker, the compactor and the S3 server in a network namespace
    #: of its own (llog/nemesis/network.py; needs root): what ``partition`` chaos cuts.
    network: bool = False
    #: Zones the cluster spreads over (docs/zones.md): broker ``i``, etcd member ``i``
    #: and generator process ``i`` run in zone ``zones[i % len(zones)]``, the compactor
    #: in the first; partition sides ``zone-<zone>`` name a zone's nodes.
    zones: tuple[str, ...] = ()
    #: The release (RELEASES.md) every broker and the compactor start on; empty: this
    #: tree. Chaos ``upgrade`` moves a member to this tree, ``rollback`` back to it.
    release: str = ""

    def zone_of(self, i: int) -> str | None:
        """The zone of broker, etcd member or generator process ``i`` (``None``: no zones)."""
        return self.zones[i % len(self.zones)] if self.zones else None


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
    #: The most a produce request waits for its answer; the timeout used follows the
    #: latencies seen (4 x their p99, at least 0.5 s: :class:`AdaptiveTimeout`) up to this.
    request_timeout_s: float = 10.0
    #: Seconds a broker whose request failed sits out before it is tried again.
    revive_after_s: float = 1.0
    #: Every broker's ``GET /health`` is asked this often; one silent for
    #: ``health_timeout_s`` is out of rotation, and the requests waiting on it are cut
    #: and re-sent elsewhere, until it answers again (:class:`BrokerWatch`). 0: no checks.
    health_interval_s: float = 0.25
    health_timeout_s: float = 0.5
    #: A request not answered within 4 x the median latency (at least 0.25 s) goes to a
    #: second owner too, and the first answer is taken (:class:`Hedger`).
    hedge: bool = True
    #: After the run ends, seconds an unacknowledged batch keeps being retried.
    drain_s: float = 20.0
    #: ``http`` (the brokers' HTTP API, idempotent batches routed by ``routing``),
    #: ``kafka`` (confluent-kafka producers on the brokers' Kafka listeners) or
    #: ``kafka-txn`` (exactly-once consume-transform-produce transactions on the first
    #: topic: :mod:`llog.loadtest.transactional`).
    protocol: str = "http"


#: What chaos can do, and to which targets (``broker-<i>`` and the numbered etcd
#: members are checked against the cluster's size).
CHAOS_ACTIONS = {
    "kill": "kill -9, then start again after restart_after_s (negative: leave it dead)",
    "pause": "SIGSTOP for duration_s, then SIGCONT",
    "faults": "the S3 proxy injects `fault` (llog/nemesis/faults.py KINDS) into a `rate` share of requests "
              "for duration_s",
    "partition": "drop every packet between `target` and `peer` (from target to peer only with one_way) for "
                 "duration_s, then heal; needs cluster.network",
    "clean-restart": "stop `target` (SIGTERM: a broker drains) and start it again on the same ports, release "
                     "and settings",
    "upgrade": "stop `target` (SIGTERM) and start it again on this tree; needs cluster.release",
    "rollback": "stop `target` (SIGTERM) and start it again on cluster.release",
    "finalize": "`llog upgrade finalize` (target `cluster`): raise the cluster's format",
}
#: Chaos actions that replace a process by another release's.
RELEASE_ACTIONS = ("upgrade", "rollback")
#: Chaos actions that stop a process cleanly and start it again: a broker or the compactor.
STOP_START_ACTIONS = ("clean-restart", *RELEASE_ACTIONS)
#: Partition sides besides the members' own names: every broker, every etcd member,
#: the S3 server (and its proxy), the load generators and the orchestrator; and, as a
#: peer, ``rest``: every node not on the target's side (``zone-<zone>`` names a zone's).
PARTITION_GROUPS = ("brokers", "etcd", "s3", "clients", "rest")
S3_FAULTS = KINDS


@dataclass(frozen=True)
class S3Spec:
    """The nemesis S3 proxy between every process and the S3 server (docs/nemesis.md)."""

    #: Latency profile: ``standard``, ``express``, ``none`` or ``fixed:<ms>``.
    profile: str = "none"
    #: Run the proxy even with profile ``none`` and no faults (to switch faults on
    #: through its control API; ``layout.json`` gives its URL).
    proxy: bool = False
    #: ``[[s3.faults]]`` rules applied from the start (``kind``, ``probability``, ``ops``,
    #: ``delay_ms``; see llog/nemesis/faults.py).
    faults: tuple[FaultRule, ...] = ()

    @property
    def enabled(self) -> bool:
        return self.proxy or self.profile != "none" or bool(self.faults)


@dataclass(frozen=True)
class ChaosEvent:
    at_s: float
    #: "broker-<i>", "compactor", "etcd" (every member), "etcd-leader", "etcd-<i>"
    #: or, for faults, "s3".
    target: str
    action: str = "kill"
    #: kill: seconds until it is started again; negative: leave it dead.
    restart_after_s: float = 3.0
    #: pause and faults: how long they last.
    duration_s: float = 0.0
    #: faults: one of S3_FAULTS, injected into this share of requests.
    fault: str = ""
    rate: float = 0.0
    #: partition: the other side (a target name or one of PARTITION_GROUPS; a member of
    #: both sides stays with ``target``), and whether only packets from target to peer drop.
    peer: str = ""
    one_way: bool = False


@dataclass(frozen=True)
class Scenario:
    name: str
    duration_s: float
    topics: tuple[TopicSpec, ...]
    interval_s: float = 1.0
    seed: int = 0
    cluster: ClusterSpec = field(default_factory=ClusterSpec)
    load: LoadSpec = field(default_factory=LoadSpec)
    s3: S3Spec = field(default_factory=S3Spec)
    chaos: tuple[ChaosEvent, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def needs_s3_proxy(self) -> bool:
        """The S3 proxy runs for a latency profile or fault plan, or for chaos faults."""
        return self.s3.enabled or any(c.action == "faults" for c in self.chaos)

    @property
    def partitions(self) -> list[TopicPartition]:
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
        cluster_doc = dict(top.pop("cluster", {}))
        zones = tuple(cluster_doc.pop("zones", ()))
        cluster = ClusterSpec(**cluster_doc, zones=zones)
        load = LoadSpec(**top.pop("load", {}))
        s3_doc = dict(top.pop("s3", {}))
        s3_faults = FaultPlan.from_json({"rules": s3_doc.pop("faults", [])}).rules
        s3 = S3Spec(**s3_doc, faults=s3_faults)
        topics = tuple(TopicSpec(**t) for t in top.pop("topics", []))
        chaos = tuple(ChaosEvent(**c) for c in top.pop("chaos", []))
        s = Scenario(topics=topics, cluster=cluster, load=load, s3=s3, chaos=chaos, **top)
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
                if is_dataclass(item):
                    _check_types(item, where, f"{key}[{i}].")
        elif isinstance(value, dict):
            bad = [k for k, v in value.items() if not (isinstance(k, str) and isinstance(v, str))]
            if bad:
                raise ConfigError(f"{where}: {key}.{bad[0]} must be a string (quote it)")
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
    if s.s3.enabled and s.cluster.store != "s3":
        problems.append("[s3] needs cluster.store = 's3'")
    try:
        profile(s.s3.profile)
    except ConfigError as exc:
        problems.append(f"s3.profile: {exc}")
    if s.load.protocol not in ("http", "kafka", "kafka-txn"):
        problems.append("load.protocol must be http, kafka or kafka-txn")
    elif s.load.protocol != "http" and importlib.util.find_spec("confluent_kafka") is None:
        problems.append(f"load.protocol = {s.load.protocol} needs confluent-kafka (pip install confluent-kafka)")
    if s.load.routing not in ROUTING_POLICIES:
        problems.append(f"load.routing must be one of {ROUTING_POLICIES}")
    if min(s.load.processes, s.load.threads, s.load.records_per_partition, s.load.owners) <= 0:
        problems.append("load.processes, threads, records_per_partition and owners must be > 0")
    if s.load.rate < 0 or s.load.record_bytes < 16:
        problems.append("load.rate must be >= 0 and load.record_bytes >= 16 (room for the record id)")
    if s.cluster.etcd_members not in (1, 3, 5):
        problems.append("cluster.etcd_members must be 1, 3 or 5")
    members = {f"broker-{i}" for i in range(s.cluster.brokers)} | ({"compactor"} if s.cluster.compactor else set())
    for name in s.cluster.clock_skew:
        if name not in members:
            problems.append(f"cluster.clock_skew names {name!r}, not one of {sorted(members)}")
    etcds = {"etcd", "etcd-leader", *(f"etcd-{i}" for i in range(s.cluster.etcd_members))}
    problems.extend(_zone_problems(s.cluster))
    zones = {f"zone-{z}" for z in s.cluster.zones}
    if s.cluster.release:
        from llog.loadtest.releases import releases

        if s.cluster.release not in releases():
            problems.append(f"cluster.release {s.cluster.release!r} is not in RELEASES.md ({sorted(releases())})")
    for c in s.chaos:
        problems.extend(_chaos_problems(c, members | zones, etcds, s.cluster.store, s.cluster.network))
        if c.action in RELEASE_ACTIONS and not s.cluster.release:
            problems.append(f"chaos {c.action} needs cluster.release (the release the cluster starts on)")
    if problems:
        raise ConfigError(f"{where}: " + "; ".join(problems))


def _zone_problems(c: ClusterSpec) -> list[str]:
    if not c.zones:
        return []
    bad = [z for z in c.zones if not isinstance(z, str) or not ZONE_RE.fullmatch(z)]
    if bad:
        return [f"cluster.zones: {bad[0]!r} is not a zone name ({ZONE_PATTERN})"]
    if len(set(c.zones)) != len(c.zones):
        return ["cluster.zones names a zone twice"]
    if c.brokers < len(c.zones):
        return [f"cluster.brokers ({c.brokers}) must be at least one per zone ({len(c.zones)})"]
    return []


def _chaos_problems(c: ChaosEvent, members: set[str], etcds: set[str], store: str, network: bool) -> list[str]:
    if c.action not in CHAOS_ACTIONS:
        return [f"chaos action {c.action!r}: one of {sorted(CHAOS_ACTIONS)}"]
    if c.action == "faults":
        out = [] if c.target == "s3" else [f"chaos faults target 's3', not {c.target!r}"]
        if store != "s3":
            out.append("chaos faults need cluster.store = 's3'")
        if c.fault not in S3_FAULTS:
            out.append(f"chaos fault {c.fault!r}: one of {S3_FAULTS}")
        if not 0 < c.rate <= 1 or c.duration_s <= 0:
            out.append("chaos faults need 0 < rate <= 1 and duration_s > 0")
        return out
    if c.action == "partition":
        sides = members | etcds | set(PARTITION_GROUPS)
        out = [f"chaos partition side {x!r} is not one of {sorted(sides)}" for x in (c.target, c.peer)
               if x not in sides or (x == "rest" and x == c.target)]
        if not network:
            out.append("chaos partition needs cluster.network = true")
        if c.duration_s <= 0 or c.target == c.peer:
            out.append("chaos partition needs duration_s > 0 and a peer other than its target")
        return out
    if c.action == "finalize":
        return [] if c.target == "cluster" else [f"chaos finalize targets 'cluster', not {c.target!r}"]
    if c.action in STOP_START_ACTIONS:
        procs = {m for m in members if not m.startswith("zone-")}
        return [] if c.target in procs else [f"chaos {c.action} target {c.target!r} is not one of {sorted(procs)}"]
    if c.target not in members | etcds:
        return [f"chaos target {c.target!r} is not one of {sorted(members | etcds)}"]
    if c.action == "pause" and c.duration_s <= 0:
        return ["chaos pause needs duration_s > 0"]
    return []
