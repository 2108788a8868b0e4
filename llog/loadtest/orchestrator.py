"""``llog loadtest up|run|status|down``: a cluster of local processes on loopback
(etcd, the S3 server, N brokers, a compactor), driven by the generator, sampled by the
collector, broken by chaos, reconciled at the end.

Each run writes ``loadtest/results/<utc>-<scenario>/``: ``scenario.json`` (resolved),
``layout.json`` (ports, pids, argv, logs), ``env.json``, ``git.json``, ``routing.json``,
``logs/``, ``client/`` (generator files), ``collector.jsonl``, ``chaos.json``,
``summary.json``, and ``report.html`` with its PNG charts (:mod:`llog.loadtest.report`).
``up`` leaves the cluster running and points ``loadtest/results/current`` at its
directory for ``status`` and ``down``."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import platform
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from llog.config import LlogConfig
from llog.connection import Connection
from llog.devstack import DevStackError, LocalStack, etcd_nodes, node_argv, node_host
from llog.loadtest.chaos import Chaos, skew_env
from llog.loadtest.collector import Collector, Target, proc_stat
from llog.loadtest.generator import LoadGenerator
from llog.loadtest.generator_state import GeneratorPlan
from llog.loadtest.live import LiveProgress, Report
from llog.loadtest.loss_report import loss_report, lost_batches
from llog.loadtest.process import ManagedProcess, release_env
from llog.loadtest.reconcile import Reconciliation, read_acks, reconcile
from llog.loadtest.releases import checkout
from llog.loadtest.report import write_report
from llog.loadtest.routing import Router
from llog.loadtest.scenario import DEFAULT_RESULTS, Scenario
from llog.loadtest.summary import build_summary
from llog.loadtest.transactional import TxnLog, Workload, client_log, run_workload
from llog.loadtest.txn_check import check
from llog.local_ports import free_port
from llog.nemesis.control import ProxyFaults, proxy_state, set_faults
from llog.nemesis.faults import FaultPlan
from llog.nemesis.network import Network
from llog.state.keys import prefix_range_end
from llog.topic.admin import Topics

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]


def new_run_dir(root: Path, scenario: Scenario) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    d = root / f"{stamp}-{scenario.name}"
    (d / "logs").mkdir(parents=True)
    (d / "client").mkdir()
    return d


class Cluster:
    """The processes of one run. :meth:`up` starts them and waits until every one is
    healthy; :meth:`down` stops them in reverse order."""

    def __init__(self, scenario: Scenario, run_dir: Path) -> None:
        self.scenario = scenario
        self.run_dir = run_dir
        self.logs = run_dir / "logs"
        c = scenario.cluster
        #: Every process in a network namespace of its own, when partitions are asked for.
        self.network: Network | None = None
        if c.network:
            nodes = [*etcd_nodes(c.etcd_members), *(["s3"] if c.store == "s3" else []),
                     *(["s3-proxy"] if scenario.needs_s3_proxy else []),
                     *(f"broker-{i}" for i in range(c.brokers)), *(["compactor"] if c.compactor else [])]
            self.network = Network(nodes).up()
        try:
            self.stack = LocalStack(self.logs, s3=c.store == "s3", seed=scenario.seed,
                                    s3_latency=scenario.s3.profile if scenario.needs_s3_proxy else None,
                                    etcd_members=c.etcd_members, network=self.network)
        except BaseException:
            if self.network is not None:
                self.network.down()
            raise
        self.members: dict[str, ManagedProcess] = {}
        #: Broker id -> its Kafka listener's host:port, when the load speaks Kafka.
        self.kafka_addresses: dict[str, str] = {}
        #: What chaos ``upgrade`` and ``rollback`` start a member on: (release, PYTHONPATH).
        self.releases: dict[str, tuple[str, str | None]] = {}

    def up(self) -> Cluster:
        s = self.scenario
        self.stack.start()
        try:
            self.env = {**os.environ, **self.stack.env(), **s.cluster.env}
            with Connection(self.stack.config) as conn:
                for t in s.topics:
                    Topics(conn).create(t.name, t.partitions)
            self._check_out_release()
            py = [sys.executable, "-m", "llog"]
            for i in range(s.cluster.brokers):
                port, host = free_port(), node_host(self.network, f"broker-{i}")
                argv = [*py, "broker", "--host", host, "--port", str(port), *self._zone_args(i)]
                if s.load.protocol in ("kafka", "kafka-txn"):  # a fixed port: a restarted broker keeps it
                    kafka_port = free_port()
                    argv += ["--kafka-port", str(kafka_port)]
                    self.kafka_addresses[f"broker-{i}"] = f"{host}:{kafka_port}"
                self._member(f"broker-{i}", argv, port, **self._zone_env(i))
            if s.cluster.compactor:
                port = free_port()
                self._member("compactor", [
                    *py, "compactor", "--host", node_host(self.network, "compactor"), "--port", str(port),
                    "--pass-interval", "1", "--discovery-interval", "2",
                    "--vacuum-interval", str(s.cluster.vacuum_interval_s), *self._zone_args(0),
                ], port, **self._zone_env(0), LLOG_COMPACT_MIN_AGE_MS=str(s.cluster.compact_min_age_ms),
                    LLOG_VACUUM_GRACE_S=str(s.cluster.vacuum_grace_s))
            for m in self.members.values():
                m.start()
            for m in self.members.values():
                m.wait_healthy()
            if self.stack.s3_proxy is not None and s.s3.faults:
                set_faults(self.stack.s3_proxy.endpoint_url, FaultPlan(s.s3.faults))
        except BaseException:
            self.down()
            raise
        self._write_layout()
        return self

    def _check_out_release(self) -> None:
        """The scenario's release, for the members to start on (this tree's own
        ``PYTHONPATH``, if any, after it)."""
        release = self.scenario.cluster.release
        if not release:
            return
        tree = checkout(release, self.run_dir)
        outer = os.environ.get("PYTHONPATH")
        self.releases = {"rollback": (release, os.pathsep.join([str(tree), *([outer] if outer else [])])),
                         "upgrade": ("", outer)}

    def _zone_args(self, i: int) -> list[str]:
        zone = self.scenario.cluster.zone_of(i)
        return [] if zone is None else ["--zone", zone]

    def _zone_env(self, i: int) -> dict[str, str]:
        """A zone's process starts on its zone's etcd member: listed first (docs/zones.md)."""
        c = self.scenario.cluster
        if not c.zones:
            return {}
        own = [m.endpoint for j, m in enumerate(self.stack.etcds) if c.zone_of(j) == c.zone_of(i)]
        rest = [m.endpoint for m in self.stack.etcds if m.endpoint not in own]
        return {"LLOG_ETCD_ENDPOINTS": ",".join(own + rest)}

    @property
    def node_zones(self) -> dict[str, str]:
        """Each zoned node's zone (brokers, etcd members, the compactor)."""
        c = self.scenario.cluster
        if not c.zones:
            return {}
        out = {f"broker-{i}": str(c.zone_of(i)) for i in range(c.brokers)}
        out.update({n: str(c.zone_of(i)) for i, n in enumerate(etcd_nodes(c.etcd_members))})
        if c.compactor:
            out["compactor"] = c.zones[0]
        return out

    def _member(self, name: str, argv: list[str], port: int, **env: str) -> None:
        skew = self.scenario.cluster.clock_skew.get(name)
        if skew is not None:
            env = {**env, **skew_env(skew)}
        if self.releases:
            env = {**env, **release_env(str(self.releases["rollback"][1]))}
        m = ManagedProcess(name, node_argv(self.network, name, argv), {**self.env, **env}, port,
                           self.logs / f"{name}.log", node_host(self.network, name))
        m.release = self.scenario.cluster.release
        self.members[name] = m

    @property
    def brokers(self) -> list[ManagedProcess]:
        return [m for n, m in self.members.items() if n.startswith("broker-")]

    def targets(self) -> list[Target]:
        out = [Target(m.name, m.proc.pid, None) for m in self.stack.etcds if m.proc.poll() is None]
        if self.stack.s3 is not None:
            out.append(Target("s3", self.stack.s3.proc.pid, None))
        if self.stack.s3_proxy is not None:
            out.append(Target("s3-proxy", self.stack.s3_proxy.proc.pid, None))
        for name, m in self.members.items():
            if m.alive() and m.pid is not None:
                out.append(Target(name, m.pid, f"{m.url}/metrics"))
        return out

    def layout(self) -> dict[str, Any]:
        stack: dict[str, Any] = {m.name: {"pid": m.proc.pid, "endpoint": m.endpoint, "log": str(m.log_path)}
                                 for m in self.stack.etcds}
        if self.stack.s3 is not None:
            stack["s3"] = {"pid": self.stack.s3.proc.pid, "url": self.stack.s3.endpoint_url,
                           "log": str(self.stack.s3.log_path)}
        if self.stack.s3_proxy is not None:
            stack["s3-proxy"] = {"pid": self.stack.s3_proxy.proc.pid, "url": self.stack.s3_proxy.endpoint_url,
                                 "log": str(self.stack.s3_proxy.log_path)}
        skews = self.scenario.cluster.clock_skew
        net = self.network
        processes = {**stack, **{n: {**m.describe(), "clock_skew": skews.get(n)} for n, m in self.members.items()}}
        for node, zone in self.node_zones.items():
            processes[node]["zone"] = zone
        for entry in processes.values():
            entry["started"] = _started(entry["pid"]) if entry.get("pid") else None
        return {**processes,
                "object_store": self.stack.config.object_store,
                "network": None if net is None else {
                    "tag": net.tag, "bridge": net.bridge, "subnet": f"{net.subnet}.0/24",
                    "nodes": {n.name: {"address": n.address, "netns": n.netns} for n in net.nodes.values()}}}

    def _write_layout(self) -> None:
        _write(self.run_dir / "layout.json", self.layout())
        _write(self.run_dir / "env.json", {
            "children": {k: ("<redacted>" if "SECRET" in k or "TOKEN" in k else v)
                         for k, v in sorted(self.stack.env().items())},
            "python": sys.version, "platform": platform.platform(), "cpus": os.cpu_count(),
        })

    def down(self) -> dict[str, int | None]:
        codes = {n: m.stop() for n, m in reversed(self.members.items())}
        self.stack.stop()
        if self.network is not None:
            self.network.down()
        return codes


def _write(path: Path, doc: Any) -> None:
    path.write_text(json.dumps(doc, indent=2, default=str) + "\n")


def git_snapshot() -> dict[str, Any]:
    def git(*args: str) -> str | None:
        try:
            return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True,
                                  check=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None

    status = git("status", "--porcelain")
    return {"commit": git("rev-parse", "HEAD"), "branch": git("rev-parse", "--abbrev-ref", "HEAD"),
            "dirty": None if status is None else bool(status),
            "changed": None if status is None else status.splitlines()}


def _prepare(scenario: Scenario, root: Path) -> tuple[Path, Cluster]:
    run_dir = new_run_dir(root, scenario)
    _write(run_dir / "scenario.json", scenario.to_dict())
    _write(run_dir / "git.json", git_snapshot())
    return run_dir, Cluster(scenario, run_dir)


def _routing(scenario: Scenario, cluster: Cluster) -> dict[str, Any]:
    router = Router([m.name for m in cluster.brokers], scenario.load.owners, scenario.seed, scenario.load.routing)
    manifest = router.manifest(scenario.partitions)
    manifest["urls"] = {m.name: m.url for m in cluster.brokers}
    _write(cluster.run_dir / "routing.json", manifest)
    return manifest


@dataclass(frozen=True)
class _LoadOutcome:
    """What the load phase leaves for the reconcile and the summary."""

    client: dict[str, Any]
    collector: Collector
    chaos: Chaos
    load_s: float


def _load(scenario: Scenario, cluster: Cluster, say: Report, live_progress: bool) -> _LoadOutcome:
    """Drive the generators for the scenario's duration with the collector and chaos
    running; stop them all (whatever happens) and record chaos.json."""
    run_dir = cluster.run_dir
    plan = GeneratorPlan(
        run_id=run_dir.name.split("-", 1)[0].replace(".", ""),
        brokers=tuple((m.name, m.url) for m in cluster.brokers),
        partitions=tuple(scenario.partitions), load=scenario.load, seed=scenario.seed,
        duration_s=scenario.duration_s, interval_s=scenario.interval_s, out_dir=str(run_dir / "client"),
        kafka=tuple(cluster.kafka_addresses.items()), zones=scenario.cluster.zones,
    )
    gen = LoadGenerator(plan)
    t0 = gen.start()
    gen_targets = [Target(f"generator-{i}", pid, None) for i, pid in enumerate(gen.pids)]
    collector = Collector(lambda: cluster.targets() + gen_targets, run_dir / "collector.jsonl",
                          scenario.interval_s, t0).start()
    proxy = cluster.stack.s3_proxy
    s3_faults = None if proxy is None else ProxyFaults(proxy.endpoint_url, FaultPlan(scenario.s3.faults))
    chaos = Chaos(scenario.chaos, cluster.members, t0, stack=cluster.stack, s3_faults=s3_faults,
                  network=cluster.network, zones=cluster.node_zones,
                  releases=cluster.releases).start()
    live = LiveProgress(run_dir / "client", scenario.load.processes, scenario.duration_s,
                        scenario.interval_s, lambda: sum(chaos.injected().values()), say)
    if live_progress:
        live.start()
    try:
        gen.wait()
    finally:
        live.stop()
        chaos.stop()
        collector.stop()
        gen.stop()
    load_s = time.monotonic() - t0
    _write(run_dir / "chaos.json", chaos.events)
    return _LoadOutcome(gen.summarize(), collector, chaos, load_s)


def _reconcile(
    scenario: Scenario, cluster: Cluster, client: dict[str, Any], say: Report
) -> tuple[Reconciliation, float, dict[str, Any] | None]:
    """Read back every acknowledged record; the reconcile result, its duration and, if
    records were lost, what etcd's history says of their batches (``loss_report.json``)."""
    say(f"reconcile: reading back {client['acked_records']:,} acknowledged records")
    t_rec = time.monotonic()
    report = None
    with Connection(cluster.stack.config) as conn:
        acks = read_acks(sorted((cluster.run_dir / "client").glob("acks-*.tsv")))
        rec = reconcile(conn, acks, scenario.partitions)
        if rec.lost:
            report = loss_report(conn, lost_batches(acks, rec.mismatches))
            _write(cluster.run_dir / "loss_report.json", report)
    return rec, time.monotonic() - t_rec, report


def _add_states(
    summary: dict[str, Any], chaos: Chaos, etcd_start: dict[str, int], etcd_end: dict[str, int],
    s3_proxy: dict[str, Any] | None,
) -> None:
    """Faults injected (chaos and S3 proxy), etcd state at both ends, S3 proxy counters."""
    summary["faults_injected"] = chaos.injected()
    summary["etcd"]["state"] = {"start": etcd_start, "end": etcd_end}
    if s3_proxy is not None:  # faults injected by kind, requests by operation, latency drawn
        summary["s3_proxy"] = {k: s3_proxy[k] for k in ("faults", "latency", "requests", "injected")}
        for kind, n in s3_proxy["injected"].items():
            if n:
                summary["faults_injected"][f"s3:{kind}"] = n


def run(
    scenario: Scenario, root: Path = DEFAULT_RESULTS, progress: Report | None = None
) -> tuple[Path, dict[str, Any]]:
    """One full run; returns the run directory and the summary. ``progress`` gets a
    line per phase and, during the load, one per interval (:class:`LiveProgress`)."""
    say: Report = progress or (lambda _line: None)
    run_dir, cluster = _prepare(scenario, root)
    with _logging_to(run_dir / "logs" / "orchestrator.log"):
        return _run(scenario, run_dir, cluster, say, progress is not None)


def _run(scenario: Scenario, run_dir: Path, cluster: Cluster, say: Report,
         live_progress: bool) -> tuple[Path, dict[str, Any]]:
    say(f"run directory {run_dir}")
    say(f"cluster: starting etcd, the object store, {scenario.cluster.brokers} broker(s)"
        f"{' and a compactor' if scenario.cluster.compactor else ''}")
    t_setup = time.monotonic()
    cluster.up()
    if scenario.load.protocol == "kafka-txn":
        return run_dir, _run_transactional(scenario, cluster, say)
    try:
        _routing(scenario, cluster)
        setup_s = time.monotonic() - t_setup
        say(f"cluster: up in {setup_s:.1f} s; {scenario.duration_s:.0f} s of load from "
            f"{scenario.load.processes} generator process(es)")
        etcd_start = etcd_state(cluster.stack.config)
        load = _load(scenario, cluster, say, live_progress)
        rec, reconcile_s, lost = _reconcile(scenario, cluster, load.client, say)
        etcd_end = etcd_state(cluster.stack.config)
        s3_proxy = None if cluster.stack.s3_proxy is None else proxy_state(cluster.stack.s3_proxy.endpoint_url)
    finally:
        exits = cluster.down()
    samples = [json.loads(line) for line in (run_dir / "client" / "client_samples.jsonl").read_text().splitlines()]
    summary = build_summary(
        scenario, load.client, rec, load.collector, load.chaos.events, cluster.stack.config,
        timings={"setup_s": setup_s, "load_s": load.load_s, "reconcile_s": reconcile_s}, exits=exits,
        samples=samples,
    )
    _add_states(summary, load.chaos, etcd_start, etcd_end, s3_proxy)
    if lost is not None:
        summary["loss_report"] = lost
    _write(run_dir / "summary.json", summary)
    say(f"report: {write_report(run_dir)}")
    return run_dir, summary


def _run_transactional(scenario: Scenario, cluster: Cluster, say: Report) -> dict[str, Any]:
    """The ``kafka-txn`` load (:mod:`llog.loadtest.transactional`) under the scenario's
    chaos, then its check; the summary (also in ``summary.json``)."""
    load, run_dir = scenario.load, cluster.run_dir
    topic = scenario.topics[0]
    w = Workload(",".join(cluster.kafka_addresses.values()), topic.name, topic.partitions, f"{topic.name}-eos")
    txns = TxnLog()
    client_log.propagate = False
    clients = logging.FileHandler(run_dir / "logs" / "txn-clients.log")
    client_log.addHandler(clients)
    try:
        proxy = cluster.stack.s3_proxy
        s3_faults = None if proxy is None else ProxyFaults(proxy.endpoint_url, FaultPlan(scenario.s3.faults))
        chaos = Chaos(scenario.chaos, cluster.members, time.monotonic(), stack=cluster.stack, s3_faults=s3_faults,
                      network=cluster.network, zones=cluster.node_zones,
                      releases=cluster.releases).start()
        say(f"load: {load.processes * load.threads} transactional workers, input at {load.rate:.0f} rec/s for "
            f"{scenario.duration_s:.0f} s, then up to {load.drain_s:.0f} s of drain")
        with Connection(cluster.stack.config) as conn:
            try:
                ran = run_workload(conn, w, load.processes * load.threads, load.rate, scenario.duration_s,
                                   load.drain_s, txns, on_load_end=chaos.stop)
            finally:
                chaos.stop()
            say("check: reading the input and both outputs back")
            verdict = check(conn, w, txns)
    finally:
        exits = cluster.down()
        client_log.removeHandler(clients)  # this run's clients only (see _logging_to)
        clients.close()
    summary = {"scenario": scenario.name, "protocol": load.protocol, **ran, "verdict": verdict,
               "chaos": chaos.events, "faults_injected": chaos.injected(), "exits": exits}
    _write(run_dir / "chaos.json", chaos.events)
    _write(run_dir / "summary.json", summary)
    return summary


def etcd_state(config: LlogConfig) -> dict[str, int]:
    """etcd's revision, DB size and number of keys under llog's root, right now."""
    with Connection(config) as conn:
        st = conn.etcd.status()
        root = conn.keys.all_prefix()
        return {**st, "keys": conn.etcd.count(root, prefix_range_end(root))}


@contextlib.contextmanager
def _logging_to(path: Path) -> Iterator[None]:
    """The load test's log lines into ``path`` for one run, and no longer: a handler
    left behind writes the next run's lines into this one's log, and once this run's
    directory is gone it raises in whichever thread logs (the chaos thread died of it)."""
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("llog.loadtest")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        handler.close()


# -- up / status / down: a cluster that outlives the command ----------------------------------


def up(scenario: Scenario, root: Path = DEFAULT_RESULTS) -> Path:
    """Start the cluster and leave it running; ``root/current`` names its run directory."""
    run_dir, cluster = _prepare(scenario, root)
    cluster.up()
    _routing(scenario, cluster)
    # For a shell: `. env.sh`. The AWS keys are the local S3 server's fixed dummy ones.
    (run_dir / "env.sh").write_text("".join(f"export {k}={v}\n" for k, v in sorted(cluster.stack.env().items())))
    (root / "current").write_text(run_dir.name + "\n")
    return run_dir


def current(root: Path = DEFAULT_RESULTS) -> Path:
    try:
        return root / (root / "current").read_text().strip()
    except OSError:
        raise DevStackError(f"no cluster is up (no {root / 'current'}); run `llog loadtest up SCENARIO`") from None


def _pids(layout: dict[str, Any]) -> dict[str, tuple[int, int | None]]:
    """Each process's pid and start time (``None`` in a layout from before they were kept)."""
    return {n: (int(v["pid"]), v.get("started")) for n, v in layout.items() if isinstance(v, dict) and v.get("pid")}


def _started(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot: ``/proc/<pid>/stat``'s 22nd
    field), or ``None`` when there is no such process."""
    fields = proc_stat(pid)
    return None if fields is None else int(fields[19])


def _pid_alive(pid: int, started: int | None) -> bool:
    """Whether the process ``up`` started as ``pid`` still runs. Its pid alone does not
    say: once it has exited the kernel gives the pid to another process (a machine's
    32,768 pids go round in minutes under a test suite), which ``down`` must not kill."""
    if started is not None:
        return _started(pid) == started
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def status(root: Path = DEFAULT_RESULTS) -> dict[str, Any]:
    run_dir = current(root)
    layout = json.loads((run_dir / "layout.json").read_text())
    out: dict[str, Any] = {"run_dir": str(run_dir), "processes": {}}
    for name, (pid, started) in _pids(layout).items():
        entry: dict[str, Any] = {"pid": pid, "alive": _pid_alive(pid, started)}
        url = layout[name].get("url")
        if url and entry["alive"] and name not in ("s3", "s3-proxy"):
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                    entry["healthy"] = r.status == 200
            except OSError:
                entry["healthy"] = False
        out["processes"][name] = entry
    return out


def down(root: Path = DEFAULT_RESULTS, timeout: float = 30.0) -> dict[str, bool]:
    """SIGTERM every process ``up`` started (members first, etcd last); returns which stopped."""
    run_dir = current(root)
    layout = json.loads((run_dir / "layout.json").read_text())
    stopped: dict[str, bool] = {}
    for name, (pid, started) in reversed(list(_pids(layout).items())):
        if _pid_alive(pid, started):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _pid_alive(pid, started) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _pid_alive(pid, started):
            os.kill(pid, signal.SIGKILL)
        stopped[name] = not _pid_alive(pid, started)
    net = layout.get("network")
    if net:  # the processes are gone: their namespaces and the bridge can go too
        Network.remove([n["netns"] for n in net["nodes"].values() if n["netns"]], net["bridge"])
    (root / "current").unlink()
    return stopped
