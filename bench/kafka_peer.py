"""Apache Kafka as the yardstick: the same native clients against Kafka and llog.

Starts, on this machine, Apache Kafka 4.1.1 (KRaft, one combined broker/controller
node, local disk; the jars the suite fetches from Maven Central into ``.cache/java``)
and llog (a local stack, real etcd and the ``file://`` store, and one broker child
process with its Kafka listener), then drives both with Kafka's own Java perf tools, alternating the
systems run by run:

- produce: ``kafka-producer-perf-test`` (``org.apache.kafka.tools.ProducerPerformance``)
  sending ``--records`` records of 100 B and of 1 KiB, acks=all, ``linger.ms`` 5, as
  fast as the system takes them, without compression and with lz4, to a topic of 8
  partitions: records/s and MiB/s, and its own ack latency p50/p99.
- consume: ``kafka-consumer-perf-test`` (``ConsumerPerformance``) reading those records
  back: MiB/s and records/s while fetching (its ``fetch.*`` columns: joining the
  consumer group, reported apart as ``consume_join_ms``, is left out).
- CPU: the seconds of CPU the system's server processes spent (Kafka: its JVM; llog: the
  broker, etcd and the idle S3 server) per GiB produced and consumed, from ``/proc``.

- requests: for llog, the object-store requests (PUTs; GETs) and etcd requests its
  broker made per GiB produced and per GiB consumed (its ``/metrics``), and what those
  S3 requests would cost at S3 Standard's prices (``LlogConfig.s3_price_*``) per GiB
  written and read once: ``llog_usd_per_gib``. llog runs on the ``file://`` store here
  (Kafka writes its local disk; the request counts are the same on S3); the compactor
  is not running (it adds about one GET per WAL slice and one PUT per 16 MiB).

Then, at a fixed rate (``--rate`` records/s for ``--seconds``), librdkafka
(confluent-kafka, ``linger.ms`` 5, acks=all, idempotent) against Kafka, llog with its
defaults but for a saved-up PUT budget of 1 (``LLOG_BROKER_PUT_BURST``: the rows show
the steady state, not a broker's first minute), and llog without its WAL PUT budget
(``LLOG_BROKER_PUT_RATE=0``, a second broker on the same stack, in a cluster of its
own): produce-ack and end-to-end p50/p99, and llog's PUTs/s and
S3 request $ per GiB at that load (``--cost-rates``: more loads, llog only, 1 KiB
records through ``kafka-producer-perf-test --throughput``).

Each figure is the median of ``--runs`` runs; ``llog_over_kafka_*`` are medians of the
per-run ratios (llog / Kafka, measured next to each other). ``--quick``: 1 KiB records
with lz4 and 100 B without, one run. The last line is one JSON object, whose headline
fields (issue 38) are ``llog_over_kafka_produce_mib_s`` and
``llog_over_kafka_consume_mib_s`` (1 KiB, lz4), ``kafka_cpu_s_per_gib`` and
``llog_cpu_s_per_gib`` (produce + consume) and ``llog_usd_per_gib``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

sys.path[:] = [p for p in sys.path if p != str(Path(__file__).resolve().parent)]  # bench/kafka.py shadows kafka
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from prometheus_client.parser import text_string_to_metric_families

from bench.broker import pct
from bench.common import LocalStack, bench_args, cpu_seconds, emit_json, median, print_table
from bench.kafka import kafka_broker_process, latency
from llog.config import LlogConfig
from llog.store.billing import request_classes, request_usd
from tests import java_client
from tests.apache_kafka import apache_kafka

PARTITIONS = 8
GIB = 1024**3
_PRODUCED = re.compile(r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\).*?"
                       r"(\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th")
_PRICES = LlogConfig(etcd_endpoints=("127.0.0.1:2379",))


def create_topic(bootstrap: str, topic: str) -> None:
    java_client.tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", bootstrap, "--create",
                     "--topic", topic, "--partitions", str(PARTITIONS), "--replication-factor", "1")


def produce(classpath: str, bootstrap: str, topic: str, n: int, size: int, codec: str,
            throughput: int = -1) -> dict[str, float]:
    """``n`` records through ``kafka-producer-perf-test``, offered at ``throughput``
    records/s (-1: as fast as they go)."""
    out = _java(classpath, "org.apache.kafka.tools.ProducerPerformance", "--topic", topic, "--num-records", str(n),
                "--record-size", str(size), "--throughput", str(throughput), "--producer-props",
                f"bootstrap.servers={bootstrap}", "acks=all", "linger.ms=5", "batch.size=262144",
                f"compression.type={codec}")
    m = _PRODUCED.findall(out)
    if not m:
        raise RuntimeError(f"ProducerPerformance printed no summary: {out[-2000:]}")
    sent, rate, mb, p50, _p95, p99 = m[-1]
    return {"records_s": float(rate), "mib_s": float(mb), "p50_ms": float(p50), "p99_ms": float(p99),
            "records": float(sent)}


def consume(classpath: str, bootstrap: str, topic: str, n: int) -> dict[str, float]:
    out = _java(classpath, "org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", bootstrap,
                "--topic", topic, "--messages", str(n), "--timeout", "120000", "--hide-header")
    # start, end, MB, MB/s, records, records/s, rebalance ms, fetch ms, fetch MB/s, fetch records/s:
    # the fetch rates leave out joining the group (a consumer group's start-up, not reading).
    row = [line for line in out.splitlines() if line.count(",") >= 9][-1].split(",")
    return {"mib_s": float(row[8]), "records_s": float(row[9]), "records": float(row[4]),
            "rebalance_ms": float(row[6])}


def requests(url: str) -> dict[str, float]:
    """The broker's object-store requests by class (``put``: PUT and LIST; ``get``: GET
    and HEAD) and its etcd requests, so far (its Prometheus ``/metrics``)."""
    with urllib.request.urlopen(f"{url}/metrics/prometheus", timeout=30) as resp:
        text = resp.read().decode()
    s3_ops: dict[str, float] = {}
    etcd = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "llog_s3_ops_total":
                op = sample.labels.get("op", "")
                s3_ops[op] = s3_ops.get(op, 0.0) + sample.value
            elif sample.name == "llog_etcd_ops_total":
                etcd += sample.value
    put, get = request_classes(s3_ops)
    return {"put": put, "get": get, "etcd": etcd}


def usd(puts: float, gets: float) -> float:
    """What ``puts`` PUT-class and ``gets`` GET-class requests cost at S3 Standard."""
    return sum(request_usd(_PRICES, puts, gets))


def _java(classpath: str, main: str, *args: str) -> str:
    proc = subprocess.run(["java", "-Xmx1g", "-cp", classpath, main, *args], capture_output=True, text=True,
                          timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"{main} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return proc.stdout


def one_run(classpath: str, bootstrap: str, pids: Sequence[int], topic: str, n: int, size: int,
            codec: str, metrics_url: str | None) -> dict[str, float]:
    """Produce then consume ``n`` records on a new topic; the figures, CPU s/GiB and
    (with ``metrics_url``, llog's broker) requests per GiB."""
    create_topic(bootstrap, topic)
    req0 = requests(metrics_url) if metrics_url else None
    cpu0 = cpu_seconds(pids)
    p = produce(classpath, bootstrap, topic, n, size, codec)
    cpu1 = cpu_seconds(pids)
    req1 = requests(metrics_url) if metrics_url else None
    c = consume(classpath, bootstrap, topic, n)
    cpu2 = cpu_seconds(pids)
    req2 = requests(metrics_url) if metrics_url else None
    gib = n * size / GIB
    out = {"produce_records_s": p["records_s"], "produce_mib_s": p["mib_s"], "produce_p50_ms": p["p50_ms"],
           "produce_p99_ms": p["p99_ms"], "consume_records_s": c["records_s"], "consume_mib_s": c["mib_s"],
           "consumed": c["records"], "consume_join_ms": c["rebalance_ms"], "produce_cpu_s_gib": (cpu1 - cpu0) / gib,
           "consume_cpu_s_gib": (cpu2 - cpu1) / gib}
    if req0 is not None and req1 is not None and req2 is not None:
        written = {k: (req1[k] - req0[k]) / gib for k in req0}
        read = {k: (req2[k] - req1[k]) / gib for k in req0}
        out |= {"puts_per_gib_in": written["put"], "gets_per_gib_out": read["get"],
                "etcd_per_gib_in": written["etcd"], "etcd_per_gib_out": read["etcd"],
                "usd_per_gib": usd(written["put"] + read["put"], written["get"] + read["get"])}
    return out


def fixed_rate(bootstrap: str, topic: str, rate: float, seconds: float, metrics_url: str | None) -> dict[str, float]:
    """librdkafka at ``rate`` records/s: produce-ack and end-to-end p50/p99 (ms), and for
    llog the PUTs/s its broker made meanwhile."""
    create_topic(bootstrap, topic)
    req0, t0 = (requests(metrics_url) if metrics_url else None), time.monotonic()
    acks, e2e = latency(bootstrap, topic, rate, seconds, linger_ms=5)
    req1, t1 = (requests(metrics_url) if metrics_url else None), time.monotonic()
    out = {"produce_p50_ms": pct(acks, 0.5), "produce_p99_ms": pct(acks, 0.99), "e2e_p50_ms": pct(e2e, 0.5),
           "e2e_p99_ms": pct(e2e, 0.99), "acked": float(len(acks)), "seen": float(len(e2e))}
    if req0 is not None and req1 is not None:
        out["puts_per_s"] = (req1["put"] - req0["put"]) / (t1 - t0)
    return out


def cost_at_rate(classpath: str, bootstrap: str, metrics_url: str, topic: str, rate: int,
                 seconds: float) -> dict[str, float]:
    """llog's S3 requests while ``kafka-producer-perf-test`` offers ``rate`` 1 KiB
    records/s (lz4) for ``seconds``: PUTs/s and S3 request $ per GiB written."""
    create_topic(bootstrap, topic)
    req0, t0 = requests(metrics_url), time.monotonic()
    p = produce(classpath, bootstrap, topic, int(rate * seconds), 1024, "lz4", throughput=rate)
    req1, t1 = requests(metrics_url), time.monotonic()
    gib = p["records"] * 1024 / GIB
    return {"offered_records_s": float(rate), "records_s": p["records_s"], "p50_ms": p["p50_ms"],
            "p99_ms": p["p99_ms"], "puts_per_s": (req1["put"] - req0["put"]) / (t1 - t0),
            "usd_per_gib": usd(req1["put"] - req0["put"], req1["get"] - req0["get"]) / gib}


def main() -> None:
    p = bench_args(__doc__.splitlines()[0])
    p.add_argument("--rate", type=float, default=1000.0, help="records/s of the fixed-rate latency rows")
    p.add_argument("--seconds", type=float, default=None, help="length of each fixed-rate row (10, 5 with --quick)")
    p.add_argument("--cost-rates", default=None, metavar="N,N,...",
                   help="1 KiB records/s at which to measure llog's PUTs/s and $ per GiB (default 1000,10000,"
                        "100000; 1000,10000 with --quick)")
    args = p.parse_args()
    runs = args.runs or (1 if args.quick else 3)
    seconds = args.seconds or (5.0 if args.quick else 10.0)
    cost_rates = [int(r) for r in (args.cost_rates or ("1000,10000" if args.quick else "1000,10000,100000")).split(",")]
    cases = ([(100, 50_000, "none"), (1024, 20_000, "lz4")] if args.quick
             else [(size, n, codec) for size, n in ((100, 300_000), (1024, 100_000)) for codec in ("none", "lz4")])
    classpath = java_client.classpath()
    rows: list[list[object]] = []
    result: dict[str, object] = {"runs": runs}
    with LocalStack() as stack, apache_kafka(stack.workdir, classpath) as (kafka, kafka_pid):
        cfg = stack.config("file")
        # The second broker on a key root of its own: one cluster would spread each
        # topic's partition leaders over both brokers.
        # A saved-up PUT budget of 1 (default: a minute's worth): the fixed-rate rows then
        # show a broker's steady state under that load, not its first minute.
        with kafka_broker_process(cfg, {"LLOG_BROKER_PUT_BURST": "1"}) as (llog, url, broker), \
                kafka_broker_process(stack.config("file"), {"LLOG_BROKER_PUT_RATE": "0"}) as (
                    unbudgeted, unbudgeted_url, _):
            # The stack's servers (the S3 server idles: llog is on the file store) and the broker.
            llog_pids = [*stack.pids(), broker.pid]
            for size, n, codec in cases:
                figures: dict[str, list[dict[str, float]]] = {"kafka": [], "llog": []}
                for r in range(runs):
                    order = [("kafka", kafka, [kafka_pid], None), ("llog", llog, llog_pids, url)]
                    for name, bootstrap, pids, metrics_url in order if r % 2 == 0 else order[::-1]:
                        topic = f"perf-{size}-{codec}-{r}"
                        figures[name].append(one_run(classpath, bootstrap, pids, topic, n, size, codec, metrics_url))
                _report(rows, result, f"{size}B {codec}", figures)
            latency_rows: list[list[object]] = []
            for name, slug, bootstrap, metrics_url in (
                ("kafka", "kafka", kafka, None), ("llog", "llog", llog, url),
                ("llog, no PUT budget", "llog_unbudgeted", unbudgeted, unbudgeted_url),
            ):
                fig = fixed_rate(bootstrap, f"latency-{len(latency_rows)}", args.rate, seconds, metrics_url)
                latency_rows.append([name, *(round(fig.get(k, 0.0), 1) for k in
                                             ("produce_p50_ms", "produce_p99_ms", "e2e_p50_ms", "e2e_p99_ms",
                                              "puts_per_s"))])
                result.update({f"{slug}_fixed_{k}": v for k, v in fig.items()})
            cost_rows: list[list[object]] = []
            for rate in cost_rates:
                fig = cost_at_rate(classpath, llog, url, f"cost-{rate}", rate, seconds * 2)
                cost_rows.append([rate, *(round(fig[k], 4) for k in
                                          ("records_s", "p50_ms", "p99_ms", "puts_per_s", "usd_per_gib"))])
                result.update({f"llog_cost_{rate}_{k}": v for k, v in fig.items()})
    print_table(["records, system", "produce rec/s", "MiB/s", "p50 ms", "p99 ms", "consume rec/s", "MiB/s",
                 "CPU s/GiB in", "CPU s/GiB out", "PUTs/GiB", "$/GiB"], rows)
    print_table([f"{args.rate:g} rec/s, system", "produce p50 ms", "p99 ms", "e2e p50 ms", "e2e p99 ms", "PUTs/s"],
                latency_rows)
    print_table(["1 KiB rec/s offered", "achieved", "p50 ms", "p99 ms", "llog PUTs/s", "$/GiB"], cost_rows)
    headline = "1024b_lz4"
    result |= {
        "llog_over_kafka_produce_mib_s": result[f"llog_over_kafka_{headline}_produce_mib_s"],
        "llog_over_kafka_consume_mib_s": result[f"llog_over_kafka_{headline}_consume_mib_s"],
        "kafka_cpu_s_per_gib": _cpu(result, "kafka", headline), "llog_cpu_s_per_gib": _cpu(result, "llog", headline),
        "llog_usd_per_gib": result[f"llog_{headline}_usd_per_gib"],
    }
    emit_json(result)


def _cpu(result: dict[str, object], name: str, slug: str) -> float:
    return float(result[f"{name}_{slug}_produce_cpu_s_gib"]) + float(result[f"{name}_{slug}_consume_cpu_s_gib"])  # type: ignore[arg-type]


def _report(rows: list[list[object]], result: dict[str, object], label: str,
            figures: dict[str, list[dict[str, float]]]) -> None:
    keys = ("produce_records_s", "produce_mib_s", "produce_p50_ms", "produce_p99_ms", "consume_records_s",
            "consume_mib_s", "produce_cpu_s_gib", "consume_cpu_s_gib")
    costs = ("consume_join_ms", "puts_per_gib_in", "gets_per_gib_out", "etcd_per_gib_in", "etcd_per_gib_out",
             "usd_per_gib")
    slug = label.replace(" ", "_").lower()
    for name, runs in figures.items():
        med = {k: median([r[k] for r in runs]) for k in (*keys, *costs) if k in runs[0]}
        rows.append([f"{label}, {name}", *(med[k] for k in keys), med.get("puts_per_gib_in", "-"),
                     round(med["usd_per_gib"], 4) if "usd_per_gib" in med else "-"])
        result.update({f"{name}_{slug}_{k}": v for k, v in med.items()})
    for k in ("produce_records_s", "produce_mib_s", "consume_records_s", "consume_mib_s", "produce_cpu_s_gib"):
        result[f"llog_over_kafka_{slug}_{k}"] = median(
            [a[k] / b[k] for a, b in zip(figures["llog"], figures["kafka"], strict=True) if b[k] > 0])


if __name__ == "__main__":
    if shutil.which("java") is None:
        sys.exit("bench/kafka_peer.py needs java (make test installs a JDK)")
    main()
