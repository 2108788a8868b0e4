"""Apache Kafka as the yardstick: the same native clients against Kafka and llog.

Starts, on this machine, Apache Kafka 4.1.1 (KRaft, one combined broker/controller
node, local disk; the jars the suite fetches from Maven Central into ``.cache/java``)
and llog (a local stack, real etcd + moto S3, and one broker child process with its
Kafka listener), then drives both with Kafka's own Java perf tools, alternating the
systems run by run:

- produce: ``kafka-producer-perf-test`` (``org.apache.kafka.tools.ProducerPerformance``)
  sending ``--records`` records of 100 B and of 1 KiB, acks=all, ``linger.ms`` 5, as
  fast as the system takes them, without compression and with lz4, to a topic of 8
  partitions: records/s and MiB/s, and its own ack latency p50/p99.
- consume: ``kafka-consumer-perf-test`` (``ConsumerPerformance``) reading those records
  back: MiB/s and records/s.
- CPU: the seconds of CPU the system's server processes spent (Kafka: its JVM; llog: the
  broker, etcd and the S3 server) per GiB produced and consumed, from ``/proc``.

Each figure is the median of ``--runs`` runs; ``llog_over_kafka_*`` are medians of the
per-run ratios (llog / Kafka, measured next to each other). Not measured here yet
(issue 38): produce latency at a fixed rate, end-to-end latency, S3 requests and their
price per GiB. The last line is one JSON object.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

sys.path[:] = [p for p in sys.path if p != str(Path(__file__).resolve().parent)]  # bench/kafka.py shadows kafka
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import LocalStack, bench_args, emit_json, median, print_table
from bench.kafka import kafka_broker_process
from llog.devstack import free_port
from tests import java_client

PARTITIONS = 8
GIB = 1024**3
_PRODUCED = re.compile(r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\).*?"
                       r"(\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th")
_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: Sequence[int]) -> float:
    """User + system CPU seconds the processes ``pids`` (and their waited-for children)
    have used so far."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
    return total / _TICKS


@contextmanager
def apache_kafka(workdir: Path, classpath: str) -> Iterator[tuple[str, int]]:
    """A one-node KRaft Kafka on loopback ports: its bootstrap address and pid."""
    port, controller = free_port(), free_port()
    data = workdir / "kafka"
    props = data / "server.properties"
    data.mkdir(parents=True)
    props.write_text("\n".join((
        "process.roles=broker,controller", "node.id=1", f"controller.quorum.voters=1@127.0.0.1:{controller}",
        f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}",
        f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}", "controller.listener.names=CONTROLLER",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT", f"log.dirs={data / 'logs'}",
        "offsets.topic.replication.factor=1", "transaction.state.log.replication.factor=1",
        "transaction.state.log.min.isr=1", "group.initial.rebalance.delay.ms=0", "",
    )))
    cluster = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    java = ["java", "-Xms1g", "-Xmx1g", "-cp", classpath]
    subprocess.run([*java, "kafka.tools.StorageTool", "format", "-t", cluster, "-c", str(props)],
                   check=True, capture_output=True, timeout=120)
    log = open(data / "server.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([*java, "kafka.Kafka", str(props)], stdout=log, stderr=subprocess.STDOUT)
    try:
        _await_listening(port, proc, data / "server.log")
        yield f"127.0.0.1:{port}", proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _await_listening(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    import socket

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"Kafka exited with {proc.returncode}: {log.read_text()[-2000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise RuntimeError(f"Kafka not listening on {port} after 120 s")


def create_topic(bootstrap: str, topic: str) -> None:
    java_client.tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", bootstrap, "--create",
                     "--topic", topic, "--partitions", str(PARTITIONS), "--replication-factor", "1")


def produce(classpath: str, bootstrap: str, topic: str, n: int, size: int, codec: str) -> dict[str, float]:
    out = _java(classpath, "org.apache.kafka.tools.ProducerPerformance", "--topic", topic, "--num-records", str(n),
                "--record-size", str(size), "--throughput", "-1", "--producer-props", f"bootstrap.servers={bootstrap}",
                "acks=all", "linger.ms=5", "batch.size=262144", f"compression.type={codec}")
    m = _PRODUCED.findall(out)
    if not m:
        raise RuntimeError(f"ProducerPerformance printed no summary: {out[-2000:]}")
    sent, rate, mb, p50, _p95, p99 = m[-1]
    return {"records_s": float(rate), "mib_s": float(mb), "p50_ms": float(p50), "p99_ms": float(p99),
            "records": float(sent)}


def consume(classpath: str, bootstrap: str, topic: str, n: int) -> dict[str, float]:
    out = _java(classpath, "org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", bootstrap,
                "--topic", topic, "--messages", str(n), "--timeout", "120000", "--hide-header")
    row = [line for line in out.splitlines() if line.count(",") >= 5][-1].split(",")
    return {"mib_s": float(row[3]), "records_s": float(row[5]), "records": float(row[4])}


def _java(classpath: str, main: str, *args: str) -> str:
    proc = subprocess.run(["java", "-Xmx1g", "-cp", classpath, main, *args], capture_output=True, text=True,
                          timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"{main} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return proc.stdout


def one_run(classpath: str, bootstrap: str, pids: Sequence[int], topic: str, n: int, size: int,
            codec: str) -> dict[str, float]:
    """Produce then consume ``n`` records on a new topic; the figures and CPU s/GiB."""
    create_topic(bootstrap, topic)
    cpu0 = cpu_seconds(pids)
    p = produce(classpath, bootstrap, topic, n, size, codec)
    cpu1 = cpu_seconds(pids)
    c = consume(classpath, bootstrap, topic, n)
    cpu2 = cpu_seconds(pids)
    gib = n * size / GIB
    return {"produce_records_s": p["records_s"], "produce_mib_s": p["mib_s"], "produce_p50_ms": p["p50_ms"],
            "produce_p99_ms": p["p99_ms"], "consume_records_s": c["records_s"], "consume_mib_s": c["mib_s"],
            "consumed": c["records"], "produce_cpu_s_gib": (cpu1 - cpu0) / gib,
            "consume_cpu_s_gib": (cpu2 - cpu1) / gib}


def main() -> None:
    args = bench_args(__doc__.splitlines()[0]).parse_args()
    runs = args.runs or (1 if args.quick else 3)
    shapes = [(100, 50_000 if args.quick else 300_000), (1024, 20_000 if args.quick else 100_000)]
    codecs = ["none"] if args.quick else ["none", "lz4"]
    classpath = java_client.classpath()
    rows: list[list[object]] = []
    result: dict[str, object] = {"runs": runs}
    with LocalStack() as stack, apache_kafka(stack.workdir, classpath) as (kafka, kafka_pid):
        cfg = stack.config("s3")
        with kafka_broker_process(cfg) as (llog, _url, broker):
            llog_pids = [*stack.pids(), broker.pid]
            for size, n in shapes:
                for codec in codecs:
                    figures: dict[str, list[dict[str, float]]] = {"kafka": [], "llog": []}
                    for r in range(runs):
                        order = [("kafka", kafka, [kafka_pid]), ("llog", llog, llog_pids)]
                        for name, bootstrap, pids in order if r % 2 == 0 else order[::-1]:
                            topic = f"perf-{size}-{codec}-{r}"
                            figures[name].append(one_run(classpath, bootstrap, pids, topic, n, size, codec))
                    _report(rows, result, f"{size}B {codec}", figures)
    print_table(["records, system", "produce rec/s", "MiB/s", "p50 ms", "p99 ms", "consume rec/s", "MiB/s",
                 "CPU s/GiB in", "CPU s/GiB out"], rows)
    emit_json(result)


def _report(rows: list[list[object]], result: dict[str, object], label: str,
            figures: dict[str, list[dict[str, float]]]) -> None:
    keys = ("produce_records_s", "produce_mib_s", "produce_p50_ms", "produce_p99_ms", "consume_records_s",
            "consume_mib_s", "produce_cpu_s_gib", "consume_cpu_s_gib")
    slug = label.replace(" ", "_").lower()
    for name, runs in figures.items():
        med = {k: median([r[k] for r in runs]) for k in keys}
        rows.append([f"{label}, {name}", *(med[k] for k in keys)])
        result.update({f"{name}_{slug}_{k}": v for k, v in med.items()})
    for k in ("produce_records_s", "consume_records_s", "produce_cpu_s_gib"):
        result[f"llog_over_kafka_{slug}_{k}"] = median(
            [a[k] / b[k] for a, b in zip(figures["llog"], figures["kafka"], strict=True) if b[k] > 0])


if __name__ == "__main__":
    if shutil.which("java") is None:
        sys.exit("bench/kafka_peer.py needs java (make test installs a JDK)")
    main()
