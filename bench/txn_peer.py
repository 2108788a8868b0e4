"""Transactional produce against Apache Kafka and llog, with the same client.

Starts Apache Kafka (as ``bench/kafka_peer.py`` does: KRaft, one node, local disk) and
llog (a local stack, the ``file://`` store, one broker child process with its Kafka
listener) and drives both with confluent-kafka (librdkafka), ``linger.ms`` 5, 100 B
records over 8 partitions:

- plain: idempotent, acks=all, ``--records`` records as fast as they are taken;
- transactional: the same records in committed transactions of 1,000 (each producer
  begins, produces 1,000, commits; a transaction's records go to all 8 partitions).

Each with 1 producer and with ``--producers`` (8) producer processes at once, each
sending its share (the figure: all records over the time from the first start to the
last end). A transactional producer runs one transaction at a time, so 1 producer
measures a transaction's latency as much as the system's throughput; several measure
what the system takes. Runs alternate the systems; each ratio is the median of the
per-run ratios (transactional / plain records/s, same system, same run). The last line
is one JSON object: ``{kafka,llog}_txn1000_over_plain_{1,N}`` and
``llog_over_kafka_txn1000_{1,N}``.
"""

from __future__ import annotations

import multiprocessing as mp
import sys
import tempfile
import time
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

sys.path[:] = [p for p in sys.path if p != str(Path(__file__).resolve().parent)]  # bench/kafka.py shadows kafka
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import confluent_kafka

from bench.common import LocalStack, bench_args, emit_json, median, print_table
from bench.kafka import kafka_broker_process, produce_range
from bench.kafka_peer import PARTITIONS, create_topic
from llog.connection import Connection
from llog.topic.admin import Topics
from tests import java_client
from tests.apache_kafka import apache_kafka

PER_TXN = 1000
VALUE = b"x" * 100


def _producer(bootstrap: str, topic: str, n: int, per_txn: int, name: str, start: Barrier, out: Any) -> None:
    """One producer process: warm up (connect, InitProducerId, a first commit), wait for
    the others, send ``n`` records, report (start, end)."""
    conf: dict[str, object] = {"bootstrap.servers": bootstrap, "linger.ms": 5,
                               "queue.buffering.max.messages": 1_000_000}
    conf.update({"transactional.id": name} if per_txn else {"acks": "all", "enable.idempotence": True})
    p = confluent_kafka.Producer(conf)
    if per_txn:
        p.init_transactions(60)
        p.begin_transaction()
    for q in range(PARTITIONS):
        p.produce(topic, value=VALUE, partition=q)
    if per_txn:
        p.commit_transaction(60)
    elif p.flush(60):
        raise RuntimeError("warm-up records not acknowledged")
    start.wait()
    t0 = time.perf_counter()
    step = per_txn or n
    for first in range(0, n, step):
        if per_txn:
            p.begin_transaction()
        produce_range(p, topic, VALUE, first, min(n, first + step))
        if per_txn:
            p.commit_transaction(120)
        elif p.flush(300):
            raise RuntimeError("records not acknowledged")
    out.put((t0, time.perf_counter()))


def records_s(bootstrap: str, topic: str, n: int, per_txn: int, producers: int) -> float:
    """Records/s of ``producers`` processes sending ``n`` records in all to ``topic``."""
    start = mp.Barrier(producers)
    out: mp.Queue[tuple[float, float]] = mp.Queue()
    procs = [mp.Process(target=_producer, args=(bootstrap, topic, n // producers, per_txn, f"{topic}-{i}", start, out))
             for i in range(producers)]
    for proc in procs:
        proc.start()
    spans = [out.get(timeout=600) for _ in procs]
    for proc in procs:
        proc.join()
        if proc.exitcode:
            raise RuntimeError(f"a producer exited with {proc.exitcode}")
    return float(n // producers * producers / (max(e for _, e in spans) - min(s for s, _ in spans)))


def main() -> None:
    p = bench_args("transactional produce, Apache Kafka and llog, same client")
    p.add_argument("--records", type=int, default=None, help="records per figure (200000; 100000 with --quick)")
    p.add_argument("--producers", type=int, default=8)
    args = p.parse_args()
    runs = args.runs or (1 if args.quick else 3)
    n = args.records or (100_000 if args.quick else 200_000)
    counts = (1, args.producers)
    got: dict[tuple[str, int, str], list[float]] = {}
    classpath = java_client.classpath()
    with (tempfile.TemporaryDirectory() as work, apache_kafka(Path(work), classpath) as (kafka, _),
          LocalStack() as stack):
        cfg = stack.config("file")
        with Connection(cfg) as conn, kafka_broker_process(cfg) as (llog, _url, _proc):
            for run in range(runs):
                for system, bootstrap in (("kafka", kafka), ("llog", llog)):
                    for k in counts:
                        for kind, per_txn in (("plain", 0), ("txn", PER_TXN)):
                            topic = f"{kind}-{k}-{run}"
                            if system == "kafka":
                                create_topic(bootstrap, topic)
                            else:
                                Topics(conn).create(topic, PARTITIONS)
                            rate = records_s(bootstrap, topic, n, per_txn, k)
                            got.setdefault((system, k, kind), []).append(rate)
                            print(f"run {run} {system} producers {k} {kind}: {rate:,.0f} records/s", file=sys.stderr)
    result: dict[str, object] = {"records": n, "runs": runs, "producers": args.producers}
    rows = []
    for system in ("kafka", "llog"):
        for k in counts:
            plain, txn = got[(system, k, "plain")], got[(system, k, "txn")]
            ratio = median([t / q for t, q in zip(txn, plain, strict=True)])
            result[f"{system}_txn1000_over_plain_{k}"] = round(ratio, 3)
            rows.append([system, k, f"{median(plain):,.0f}", f"{median(txn):,.0f}", f"{median(txn) / PER_TXN:,.1f}",
                         round(ratio, 2)])
    for k in counts:
        result[f"llog_over_kafka_txn1000_{k}"] = round(median(
            [q / t for q, t in zip(got[("llog", k, "txn")], got[("kafka", k, "txn")], strict=True)]), 3)
    print_table(["system", "producers", "plain rec/s", "txn rec/s (1,000 a txn)", "txn/s", "txn / plain"], rows)
    emit_json(result)


if __name__ == "__main__":
    main()
