"""One region, three zones: the bytes that cross a zone, llog against Apache Kafka.

Builds a region on this machine (:mod:`llog.nemesis.region`: a network namespace per
zone ``a``, ``b``, ``c`` and one for the object store, joined pairwise by veth links
whose counters are the bytes each zone pair exchanges, split by TCP port into causes),
then, one system after the other, in the same run:

- **llog**: an etcd member and a broker (``--zone``, its zone's etcd member listed
  first) per zone, the compactor in zone ``a``, moto's S3 in the region namespace; the
  brokers' PUT budget without its saved-up burst (the steady state). Each zone's
  clients name their zone in their ``client.id`` (``llog_zone=<zone>``) and bootstrap
  from their zone's broker. Twice in a full run: with llog's defaults, and set for
  cost (:data:`COST_TUNED`).
- **Apache Kafka** (the suite's Maven jars, KRaft): three combined broker/controller
  nodes, one per zone (``broker.rack``), RF=3, ``min.insync.replicas=2``, replication on
  a listener of its own; once plainly, and once at its best: consumers name
  ``client.rack`` and the brokers' ``RackAwareReplicaSelector`` sends them to a replica in
  their zone (KIP-392 follower fetching).

The load is the same for each: in every zone a librdkafka producer (confluent-kafka,
acks=all, idempotent, no compression: random bytes) sends ``--records`` records of
``--size`` bytes to one topic of ``--partitions`` partitions, and a consumer of one
shared group reads; the clients of all zones run at once, and a run ends when the group
has read every acknowledged record (for llog, once the compactor has merged them too:
its requests and etcd traffic count). Counted: the bytes on the zone↔zone links from
the clients' start to that end, over the bytes produced + consumed (record values),
by cause: ``etcd`` (client and peer ports), ``kafka`` (Kafka protocol: client↔broker;
for llog only the group coordinator's and the brokers' peer-health traffic crosses),
``broker_http`` (llog's peer reads), ``replication`` and ``controller`` (Kafka's).

Cost (``usd_per_gib``, per GiB produced and consumed once): inter-zone bytes at
$0.01/GB each way ($0.02 for every byte that crosses), plus for llog its brokers' and
compactor's object-store requests at S3 Standard's prices (``LlogConfig.s3_price_*``).
Disks, instances and storage are left out of both.

``--quick``: 20,000 records of 1 KiB per zone, llog with its defaults only (about a
minute). The last line is one JSON object naming ``llog_inter_zone_share``,
``kafka_inter_zone_share``, ``kafka_rack_aware_inter_zone_share`` and each system's
``usd_per_gib``.
Needs root (network namespaces), ``tc`` and Java 17+. bench/README.md has figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

sys.path[:] = [p for p in sys.path if p != str(Path(__file__).resolve().parent)]  # bench/kafka.py shadows kafka
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import bench_args, emit_json, print_table
from bench.kafka_peer import requests, usd
from compactor.planner import read_cursor
from llog.connection import Connection
from llog.devstack import LocalStack, scratch_dir
from llog.loadtest.process import ManagedProcess
from llog.nemesis.region import REGION, Region, delta, inter_zone
from llog.state.control import read_control
from llog.topic.admin import Topics
from tests.apache_kafka import await_listening, format_storage, new_cluster_id, stop

ZONES = ("a", "b", "c")
GB, GIB = 10**9, 1024**3
#: Every byte crossing a zone: AWS's $0.01/GB out of one zone and $0.01/GB into the other.
USD_PER_INTER_ZONE_GB = 0.02
BROKER_HTTP, KAFKA, KAFKA_CONTROLLER, KAFKA_REPLICATION, COMPACTOR_HTTP = 8080, 9092, 9093, 9094, 8081
GROUP = "zones-bench"
#: llog's compactor takes WAL entries this old (its default is 2 minutes): the bench
#: waits for it to merge the run's records, and counts what that costs.
COMPACT_MIN_AGE_MS = 10_000
#: llog set for cost (the full run's second llog row): a WAL PUT a second per broker
#: at most while batches fill (up to 4 MiB), where the default budget allows four a
#: second and closes a batch at 1 MiB. Produce latency grows to about a second.
COST_TUNED = {"LLOG_BROKER_PUT_RATE": "1", "LLOG_BATCH_MAX_BYTES": str(4 * 1024 * 1024)}


def main() -> None:
    if sys.argv[1:2] == ["--client"]:
        client(sys.argv[2:])
        return
    p = bench_args("inter-zone bytes: llog and Apache Kafka in a three-zone region on this machine")
    p.add_argument("--records", type=int, default=None, help="records each zone's producer sends")
    p.add_argument("--size", type=int, default=1024, help="bytes per record")
    p.add_argument("--partitions", type=int, default=12)
    args = p.parse_args()
    records = args.records or (20_000 if args.quick else 100_000)
    from tests import java_client

    classpath = java_client.classpath()
    placement = {**{f"etcd-m{i}": z for i, z in enumerate(ZONES)}, "s3": REGION}
    workdir = scratch_dir("llog-zones-")
    try:
        with Region(ZONES, placement) as region:
            load = Load(region, workdir, records, args.size, args.partitions)
            runs = {"llog": run_llog(load, "llog", {})}
            if not args.quick:
                runs["llog_cost_tuned"] = run_llog(load, "llog_cost_tuned", COST_TUNED)
            runs.update(run_kafka(load, classpath))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    report(runs, records, args.size)


class Load:
    """The clients of one run: a producer and a consumer per zone, in its namespace."""

    def __init__(self, region: Region, workdir: Path, records: int, size: int, partitions: int) -> None:
        self.region, self.workdir = region, workdir
        self.records, self.size, self.partitions = records, size, partitions

    def run(self, name: str, topic: str, bootstrap: Callable[[str], str], client_id: Callable[[str], str],
            rack: bool, settle: Callable[[], None] = lambda: None) -> dict[str, Any]:
        """Produce and consume ``topic`` from every zone at once, then ``settle`` (the
        work the load leaves behind); the bytes each link carried meanwhile, and the
        records and bytes produced and consumed."""
        d = self.workdir / f"clients-{name}"
        d.mkdir()
        before = self.region.counters()
        started = time.monotonic()
        consumers = [self._client(z, "consume", bootstrap(z), topic, client_id(z), str(d / f"count-{z}"),
                                  str(d / "stop"), z if rack else "") for z in ZONES]
        producers = [self._client(z, "produce", bootstrap(z), topic, client_id(z), str(self.records),
                                  str(self.size)) for z in ZONES]
        produced = [json.loads(_finish(p, f"{name}: producer")) for p in producers]
        acked = sum(r["acked"] for r in produced)
        while sum(_count(d / f"count-{z}")["records"] for z in ZONES) < acked:
            if any(c.poll() is not None for c in consumers):
                raise RuntimeError(f"{name}: a consumer exited early: {[_finish(c, 'consumer') for c in consumers]}")
            time.sleep(0.2)
        (d / "stop").touch()
        consumed = [json.loads(_finish(c, f"{name}: consumer")) for c in consumers]
        clients_s = time.monotonic() - started
        settle()
        links = delta(self.region.counters(), before)
        return {"seconds": clients_s, "settle_seconds": time.monotonic() - started - clients_s, "links": links,
                "inter_zone": inter_zone(links, self.region.links),
                "produced_records": acked, "produced_bytes": sum(r["bytes"] for r in produced),
                "produce_errors": sum(r["errors"] for r in produced),
                "consumed_records": sum(r["records"] for r in consumed),
                "consumed_bytes": sum(r["bytes"] for r in consumed)}

    def _client(self, zone: str, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(self.region.wrap(zone, [sys.executable, __file__, "--client", *args]),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def run_llog(load: Load, name: str, settings: dict[str, str]) -> dict[str, Any]:
    """llog in the region with ``settings`` (``LLOG_*``) beside its defaults."""
    region = load.region
    with ExitStack() as stack:
        servers = LocalStack(load.workdir / name, s3=True, etcd_members=len(ZONES), network=region)
        servers.start(timeout=60)
        stack.callback(servers.stop)
        # The steady state: no saved-up PUT budget (a broker's first minute flushes at will).
        env = {**os.environ, **servers.env(), "LLOG_COMPACT_MIN_AGE_MS": str(COMPACT_MIN_AGE_MS),
               "LLOG_BROKER_PUT_BURST": "1", **settings}
        members: list[ManagedProcess] = []
        for i, z in enumerate(ZONES):
            own = servers.etcds[i].endpoint  # a zone's processes start on its own member
            endpoints = ",".join([own, *(m.endpoint for m in servers.etcds if m.endpoint != own)])
            zone_env = {**env, "LLOG_ETCD_ENDPOINTS": endpoints}
            host = region.address(z)
            members.append(ManagedProcess(f"broker-{z}", region.wrap(z, [
                sys.executable, "-m", "llog", "broker", "--host", host, "--port", str(BROKER_HTTP),
                "--kafka-port", str(KAFKA), "--zone", z]), zone_env, BROKER_HTTP,
                load.workdir / f"{name}-broker-{z}.log", host))
            if i == 0:
                members.append(ManagedProcess("compactor", region.wrap(z, [
                    sys.executable, "-m", "llog", "compactor", "--host", host, "--port", str(COMPACTOR_HTTP),
                    "--zone", z, "--discovery-interval", "2"]), zone_env, COMPACTOR_HTTP,
                    load.workdir / f"{name}-compactor.log", host))
        for m in members:
            m.start()
            stack.callback(m.stop)
        for m in members:
            m.wait_healthy(120)
        with Connection(servers.config) as conn:
            Topics(conn).create("zones", load.partitions)
        etcd_ports = [int(m.endpoint.rsplit(":", 1)[1]) for m in servers.etcds] + [m.peer_port for m in servers.etcds]
        region.count("etcd", etcd_ports)
        region.count("kafka", [KAFKA])
        region.count("broker_http", [BROKER_HTTP, COMPACTOR_HTTP])
        before = {m.name: requests(m.url) for m in members}
        with Connection(servers.config) as conn:
            out = load.run(name, "zones", lambda z: f"{region.address(z)}:{KAFKA}",
                           lambda z: f"zones-bench-{z},llog_zone={z}", rack=False,
                           settle=lambda: _await_compacted(conn, "zones", load.partitions))
        s3 = {m.name: {k: v - before[m.name][k] for k, v in requests(m.url).items()} for m in members}
        out["s3_requests"] = s3
        out["s3_puts"], out["s3_gets"] = sum(f["put"] for f in s3.values()), sum(f["get"] for f in s3.values())
        return out


def _await_compacted(conn: Connection, topic: str, partitions: int) -> None:
    """Until the compactor has merged every record of ``topic`` into partition blobs."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if all(read_cursor(conn, topic, p)[0] == read_control(conn, topic, p).control.next_offset
               for p in range(partitions)):
            return
        time.sleep(1)
    raise RuntimeError(f"{topic} not compacted after 300 s")


def run_kafka(load: Load, classpath: str) -> dict[str, dict[str, Any]]:
    region = load.region
    with kafka_cluster(region, load.workdir / "kafka", classpath) as bootstrap:
        _create_topics(bootstrap, ["plain", "rack"], load.partitions)
        region.count("kafka", [KAFKA])
        region.count("controller", [KAFKA_CONTROLLER])
        region.count("replication", [KAFKA_REPLICATION])
        out = {}
        for name, rack in (("kafka", False), ("kafka_rack_aware", True)):
            out[name] = load.run(name, "rack" if rack else "plain", lambda z: f"{region.address(z)}:{KAFKA}",
                                 lambda z: f"zones-bench-{z}", rack=rack)
        return out


@contextmanager
def kafka_cluster(region: Region, workdir: Path, classpath: str) -> Iterator[str]:
    """Three KRaft nodes (broker and controller each), node ``i`` in zone ``ZONES[i]``;
    yields the bootstrap list."""
    voters = ",".join(f"{i + 1}@{region.address(z)}:{KAFKA_CONTROLLER}" for i, z in enumerate(ZONES))
    cluster = new_cluster_id()
    java = ["java", "-Xms768m", "-Xmx768m", "-cp", classpath]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for i, z in enumerate(ZONES):
            host, d = region.address(z), workdir / z
            d.mkdir(parents=True)
            props = d / "server.properties"
            props.write_text("\n".join((
                "process.roles=broker,controller", f"node.id={i + 1}", f"controller.quorum.voters={voters}",
                f"listeners=PLAINTEXT://{host}:{KAFKA},REPLICATION://{host}:{KAFKA_REPLICATION},"
                f"CONTROLLER://{host}:{KAFKA_CONTROLLER}",
                f"advertised.listeners=PLAINTEXT://{host}:{KAFKA},REPLICATION://{host}:{KAFKA_REPLICATION}",
                "inter.broker.listener.name=REPLICATION", "controller.listener.names=CONTROLLER",
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,REPLICATION:PLAINTEXT,CONTROLLER:PLAINTEXT",
                f"log.dirs={d / 'logs'}", f"broker.rack={z}",
                "replica.selector.class=org.apache.kafka.common.replica.RackAwareReplicaSelector",
                "offsets.topic.replication.factor=3", "transaction.state.log.replication.factor=3",
                "default.replication.factor=3", "min.insync.replicas=2", "group.initial.rebalance.delay.ms=0", "",
            )))
            format_storage(java, cluster, props)
            with open(d / "server.log", "wb") as log:
                procs.append(subprocess.Popen(region.wrap(z, [*java, "kafka.Kafka", str(props)]), stdout=log,
                                              stderr=subprocess.STDOUT))
        bootstrap = ",".join(f"{region.address(z)}:{KAFKA}" for z in ZONES)
        for z, proc in zip(ZONES, procs, strict=True):
            await_listening(region.address(z), KAFKA, proc, workdir / z / "server.log", timeout_s=180)
        yield bootstrap
    finally:
        for proc in procs:  # all asked at once, then each waited for
            proc.terminate()
        for proc in procs:
            stop(proc)


def _create_topics(bootstrap: str, topics: list[str], partitions: int) -> None:
    """``topics`` created (RF=3, min.insync.replicas=2), each partition led and in sync;
    the admin client gone before the cluster stops (it would log every broker's exit)."""
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = [NewTopic(t, partitions, 3, config={"min.insync.replicas": "2"}) for t in topics]
    for future in admin.create_topics(new).values():
        future.result(60)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        meta = admin.list_topics(timeout=10).topics
        if all(t in meta and len(meta[t].partitions) == partitions
               and all(p.leader >= 0 and len(p.isrs) == 3 for p in meta[t].partitions.values()) for t in topics):
            return
        time.sleep(0.2)
    raise RuntimeError(f"topics {topics} have no leader and full ISR after 120 s")


def _finish(proc: subprocess.Popen[str], what: str) -> str:
    out, err = proc.communicate(timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed ({proc.returncode}): {err[-2000:]}")
    return out.strip().splitlines()[-1]


def _count(path: Path) -> dict[str, int]:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):  # not written yet, or caught mid-write
        return {"records": 0, "bytes": 0}


def report(runs: dict[str, dict[str, Any]], records: int, size: int) -> None:
    rows: list[list[object]] = []
    result: dict[str, object] = {"zones": len(ZONES), "records_per_zone": records, "record_bytes": size}
    usds: dict[str, float] = {}
    for name, r in runs.items():
        crossing = r["inter_zone"]
        moved = r["produced_bytes"] + r["consumed_bytes"]
        share = crossing["total"] / moved
        usd_total = crossing["total"] / GB * USD_PER_INTER_ZONE_GB + usd(r.get("s3_puts", 0), r.get("s3_gets", 0))
        usd_per_gib = usd_total / (r["produced_bytes"] / GIB)
        causes = ", ".join(f"{c} {n / moved:.2%}" for c, n in sorted(crossing.items()) if c != "total" and n)
        rows.append([name, r["produced_records"], r["consumed_records"], f"{r['seconds']:.1f}",
                     f"{moved / 2**20:.0f}", f"{crossing['total'] / 2**20:.1f}", f"{share:.2%}",
                     f"{usd_per_gib:.5f}", causes])
        result[f"{name}_inter_zone_share"] = round(share, 5)
        result[f"{name}_usd_per_gib"] = usds[name] = round(usd_per_gib, 6)
        result[f"{name}_inter_zone_bytes"] = crossing
        result[f"{name}_moved_bytes"] = moved
        result[f"{name}_produce_errors"] = r["produce_errors"]
        if "s3_puts" in r:
            result[f"{name}_s3_puts"], result[f"{name}_s3_gets"] = r["s3_puts"], r["s3_gets"]
            result[f"{name}_s3_requests"] = r["s3_requests"]
    print_table(["system", "produced", "consumed", "s", "MiB moved", "MiB inter-zone", "share", "$/GiB",
                 "inter-zone by cause (share of bytes moved)"], rows)
    for llog in (n for n in usds if n.startswith("llog")):
        result[f"{llog}_over_kafka_usd"] = round(usds[llog] / usds["kafka"], 4)
        result[f"{llog}_over_kafka_rack_aware_usd"] = round(usds[llog] / usds["kafka_rack_aware"], 4)
    emit_json(result)


def client(argv: list[str]) -> None:
    """A zone's producer or consumer (run by :class:`Load` inside the zone's namespace)."""
    p = argparse.ArgumentParser(prog="zones.py --client")
    sub = p.add_subparsers(dest="role", required=True)
    prod = sub.add_parser("produce")
    for a in ("bootstrap", "topic", "client_id"):
        prod.add_argument(a)
    prod.add_argument("records", type=int)
    prod.add_argument("size", type=int)
    cons = sub.add_parser("consume")
    for a in ("bootstrap", "topic", "client_id", "count_file", "stop_file", "rack"):
        cons.add_argument(a)
    args = p.parse_args(argv)
    if args.role == "produce":
        print(json.dumps(_produce(args.bootstrap, args.topic, args.client_id, args.records, args.size)))
    else:
        print(json.dumps(_consume(args.bootstrap, args.topic, args.client_id, Path(args.count_file),
                                  Path(args.stop_file), args.rack)))


def _produce(bootstrap: str, topic: str, client_id: str, records: int, size: int) -> dict[str, int]:
    from confluent_kafka import KafkaError, Message, Producer

    producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 20, "batch.size": 1_000_000,
                         "compression.type": "none", "message.timeout.ms": 120_000})
    block = os.urandom(size * 257)  # random: nothing a link or a codec could shrink
    done = {"acked": 0, "errors": 0, "bytes": 0}

    def delivered(err: KafkaError | None, msg: Message) -> None:
        if err is None:
            done["acked"] += 1
            done["bytes"] += len(msg.value() or b"")
        else:
            done["errors"] += 1

    for i in range(records):
        value = block[(i % 256) * size:(i % 256) * size + size]
        while True:
            try:
                producer.produce(topic, value, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    producer.flush(300)
    return done


def _consume(bootstrap: str, topic: str, client_id: str, count_file: Path, stop_file: Path,
             rack: str) -> dict[str, int]:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "client.id": client_id, "group.id": f"{GROUP}-{topic}",
                         "auto.offset.reset": "earliest", **({"client.rack": rack} if rack else {})})
    consumer.subscribe([topic])
    seen = {"records": 0, "bytes": 0}
    written = 0.0
    while not stop_file.exists():
        for msg in consumer.consume(1000, 0.2):
            if msg.error() is None:
                seen["records"] += 1
                seen["bytes"] += len(msg.value() or b"")
        if time.monotonic() - written > 0.2:
            tmp = count_file.with_suffix(".tmp")
            tmp.write_text(json.dumps(seen))
            tmp.replace(count_file)
            written = time.monotonic()
    consumer.close()
    return seen


if __name__ == "__main__":
    main()
