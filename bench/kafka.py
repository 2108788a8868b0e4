"""The Kafka listener against llog's own SDK, same stack, same run.

Starts a local stack (real etcd + moto S3, ``bench/common.py``) and one broker child
process with its Kafka listener, then measures, alternating runs:

- produce: confluent-kafka (librdkafka) producing ``--records`` records of ``--size``
  bytes over 8 partitions through the Kafka listener (``linger.ms`` 5, acks all,
  idempotent), against the same records through ``BatchingProducer.send_group`` in
  groups of 100, all in flight (the SDK in-process, no network).
  ``kafka_over_sdk_produce`` = Kafka / SDK records/s, median of per-run ratios.
- transactions: the same confluent-kafka producer, transactional, committing
  transactions of 1,000 and of 10 records over the 8 partitions (``--records``
  records, a tenth of them at 10 a transaction); transactions/s and records/s, and
  ``txn1000_over_kafka_produce`` = transactional / non-transactional records/s of
  the same client in the same run.
- fetch: a confluent-kafka consumer reading those records from the start (assign, no
  group; timed from its first record, after connecting), against ``Reader.scan_many``
  over the same partitions. ``kafka_over_sdk_consume``.
- the same records through the same broker's HTTP API (8 clients, 100 records a
  request), for ``kafka_over_http_produce``.
- the listener's own capacity, with native clients (unless ``--no-native``): Kafka's
  Java ``kafka-producer-perf-test`` (acks all, ``linger.ms`` 5, 256 KiB batches, no
  compression) producing 30 x ``--records`` records as fast as they go, then
  ``kafka-consumer-perf-test`` reading them (its fetch rate, the group join left out);
  ``native_over_sdk_produce`` against the same run's SDK rate, and the broker's CPU per
  record meanwhile (``native_broker_cpu_us_per_record``: its records per core-second). The Python client above is
  bound by its own per-record loop; these are not (Java 17 and the Maven artifacts,
  ``tests/java_client.py``).
- latency at a fixed offered load (``--rate`` records/s for ``--seconds``, one
  producer with ``--linger-ms``): produce-ack p50/p99 from the delivery reports, and
  end to end, produce call to a consumer in another process (assigned at the end)
  receiving the record.
- the broker's CPU per record, in-process, for what a produce costs now (checking a
  batch to store it as it came: ``check_batches``, CRC-32C and the record length
  prefixes) against converting the batch into llog records (what every produce cost
  before batches were stored as they came; what a non-Kafka reader's decode of such a
  body costs now: ``kafka_body.decode``) (docs/kafka.md, "Storage").

The last line is one JSON object.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time
import timeit
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# Run as a file (python bench/kafka.py), sys.path[0] is this directory, where this file
# would shadow the kafka package: the repository root takes its place.
sys.path[:] = [p for p in sys.path if p != str(Path(__file__).resolve().parent)]  # not in spawned children
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import confluent_kafka
from kafka.record.default_records import DefaultRecordBatchBuilder

from bench.broker import Client, broker_process, pct, run_clients
from bench.common import LocalStack, bench_args, cpu_seconds, emit_json, median, print_table
from llog.codec import kafka_body
from llog.config import LlogConfig
from llog.connection import Connection
from llog.producer import BatchingProducer
from llog.reader import Reader
from llog.topic.admin import Topics

PARTITIONS = 8


@contextmanager
def kafka_broker_process(cfg: LlogConfig, env: Mapping[str, str] | None = None,
                         ) -> Iterator[tuple[str, str, subprocess.Popen[str]]]:
    """A broker child process with a Kafka listener (``env``: more ``LLOG_*`` settings):
    its bootstrap address, HTTP URL and process."""
    with broker_process(cfg, None, "--kafka-port", "0", env=env) as (url, proc):
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if "Kafka listener on port " not in line:
            raise RuntimeError(f"broker did not start its Kafka listener: {line!r}")
        yield f"127.0.0.1:{int(line.rsplit(' ', 1)[1])}", url, proc


def kafka_produce(bootstrap: str, topic: str, n: int, size: int, conf: Mapping[str, Any] | None = None) -> float:
    """Seconds to produce ``n`` records and have every one acknowledged (``conf``: more
    client settings, SASL's say)."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all",
                                         "enable.idempotence": True, "queue.buffering.max.messages": 1_000_000,
                                         **(conf or {})})
    value = b"x" * size
    failed: list[object] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            failed.append(err)

    for p in range(PARTITIONS):  # connecting, Metadata and InitProducerId: not the produce rate
        producer.produce(topic, value=value, partition=p)
    producer.flush(60)
    n -= PARTITIONS
    t0 = time.perf_counter()
    for i in range(n):
        while True:
            try:
                producer.produce(topic, value=value, partition=i % PARTITIONS, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(300) != 0 or failed:
        raise RuntimeError(f"produce failed: {failed[:3]}")
    return time.perf_counter() - t0


def sdk_produce(conn: Connection, topic: str, n: int, size: int) -> float:
    value = b"x" * size
    with BatchingProducer(conn) as producer:
        for f in [producer.send(topic, p, value) for p in range(PARTITIONS)]:  # warm, like the Kafka client
            f.result()
        # The SDK's fast path: groups of 100 records (as the HTTP rows send them), all in
        # flight at once; one send() per record costs ~25 us of Python each.
        t0 = time.perf_counter()
        left, i = n - PARTITIONS, 0
        pending = []
        while left > 0:
            group = min(100, left)
            pending.append(producer.send_group(topic, i % PARTITIONS, [value] * group))
            left -= group
            i += 1
        for done in pending:
            done.result()
        return time.perf_counter() - t0


def kafka_fetch(bootstrap: str, topic: str, n: int) -> float:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-unused",
                                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                     for p in range(PARTITIONS)])
    got = 0
    first = consumer.consume(1, timeout=30)  # connecting, Metadata and ListOffsets: not the read rate
    if not first or first[0].error() is not None:
        raise RuntimeError(f"no first record: {first}")
    t0 = time.perf_counter()
    while got < n - 1:
        for msg in consumer.consume(10_000, timeout=0.05):  # returns early only with 10,000 records
            if msg.error() is None:
                got += 1
    elapsed = time.perf_counter() - t0
    consumer.close()
    return elapsed


def sdk_fetch(conn: Connection, topic: str, n: int) -> float:
    t0 = time.perf_counter()
    with Reader(conn) as reader:
        got = sum(1 for _ in reader.scan_many([(topic, p, 0, None) for p in range(PARTITIONS)]))
    if got != n:
        raise RuntimeError(f"read {got} of {n}")
    return time.perf_counter() - t0


def http_produce(url: str, topic: str, n: int, size: int, clients: int = 8, per_request: int = 100) -> float:
    """Seconds for ``clients`` keep-alive connections to POST ``n`` records to /produce."""
    value = "x" * size
    requests = n // per_request
    conns = [Client(url) for _ in range(clients)]

    def send(c: int, i: int) -> None:
        status, resp = conns[c].post("/produce", {"topic_partitions": [
            {"topic": topic, "partition": (c + i) % PARTITIONS, "records": [value] * per_request}]})
        if status != 200:
            raise RuntimeError(f"produce failed: {status} {resp}")

    try:
        return run_clients(clients, requests // clients, send)
    finally:
        for c in conns:
            c.close()


def _e2e_consumer(bootstrap: str, topic: str, ready: Any, stop: Any, out: Any) -> None:
    """In its own process: read ``topic`` from its end; put each record's end-to-end
    latency (ms, from the monotonic send time in its value) on ``out``."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-e2e",
                                         "enable.auto.commit": False, "fetch.wait.max.ms": 500,
                                         "fetch.min.bytes": 1})
    consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_END) for p in range(PARTITIONS)])
    consumer.consume(1, timeout=2)  # connect and position before the producer starts
    ready.set()
    lat: list[float] = []
    while not stop.is_set():
        msg = consumer.poll(0.1)  # not consume(n): that waits for n records or its timeout
        if msg is None or msg.error() is not None:
            continue
        value = msg.value()
        if value is not None and not value.startswith(b"warm"):
            lat.append((time.monotonic() - float(value.split(b":")[1])) * 1000)
    consumer.close()
    out.put(lat)


def latency(bootstrap: str, topic: str, rate: float, seconds: float, linger_ms: int) -> tuple[list[float], list[float]]:
    """(produce-ack ms, end-to-end ms) at ``rate`` records/s."""
    ctx = multiprocessing.get_context("spawn")
    ready, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
    proc = ctx.Process(target=_e2e_consumer, args=(bootstrap, topic, ready, stop, out))
    proc.start()
    ready.wait(60)
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": linger_ms, "acks": "all",
                                         "enable.idempotence": True})
    acks: list[float] = []

    def on_delivery(err: object, msg: Any) -> None:
        if err is None and not msg.value().startswith(b"warm"):
            acks.append((time.monotonic() - float(msg.value().split(b":")[1])) * 1000)

    # Connecting, Metadata and InitProducerId first: the figures are of the steady state.
    for p in range(PARTITIONS):
        producer.produce(topic, value=b"warm-up:0", partition=p)
    producer.flush(60)

    t0 = time.monotonic()
    for i in range(int(rate * seconds)):
        delay = t0 + i / rate - time.monotonic()
        if delay > 0:
            producer.poll(delay)  # pacing the offered load (and serving delivery reports)
        producer.produce(topic, value=f"{i}:{time.monotonic()}".encode(), partition=i % PARTITIONS,
                         on_delivery=on_delivery)
    producer.flush(120)
    time.sleep(1.0)  # let the consumer see the last records (it stops on the event)
    stop.set()
    e2e: list[float] = out.get(timeout=60)
    proc.join()
    return acks, e2e


def native_produce(classpath: str, bootstrap: str, conn: Connection, topic: str, n: int, size: int,
                   broker_pid: int) -> tuple[float, float]:
    """Records/s of Kafka's Java perf producer through the listener (bench/kafka_peer.py's
    run of it), and the broker's CPU microseconds per record meanwhile."""
    from bench.kafka_peer import produce  # bench/kafka_peer.py builds on this module

    Topics(conn).create(topic, PARTITIONS)
    cpu = cpu_seconds([broker_pid])
    rate = produce(classpath, bootstrap, topic, n, size, "none")["records_s"]
    return rate, (cpu_seconds([broker_pid]) - cpu) / n * 1e6


def native_consume(classpath: str, bootstrap: str, topic: str, n: int) -> float:
    """Records/s of Kafka's Java perf consumer's fetches through the listener."""
    from bench.kafka_peer import consume

    return consume(classpath, bootstrap, topic, n)["records_s"]


def convert_cost(size: int, records: int = 1000) -> tuple[float, float]:
    """µs per record: decoding a stored batch into llog records, and checking a
    produced batch to store it as it came."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=2**31 - 1)
    for i in range(records):
        builder.append(i, 1_700_000_000_000 + i, None, b"x" * size, [])
    data = bytes(builder.build())
    body = kafka_body.encode_body(kafka_body.check_batches(data)).tobytes()
    decode = min(timeit.repeat(lambda: kafka_body.decode(body), number=20, repeat=5)) / 20 / records * 1e6
    check = min(timeit.repeat(lambda: kafka_body.check_batches(data), number=20, repeat=5)) / 20 / records * 1e6
    return decode, check


def transactional_produce(bootstrap: str, topic: str, n: int, size: int, per_txn: int) -> float:
    """Seconds to produce ``n`` records in committed transactions of ``per_txn``."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                                         "transactional.id": f"bench-{topic}-{per_txn}",
                                         "queue.buffering.max.messages": 1_000_000})
    value = b"x" * size
    producer.init_transactions(60)
    producer.begin_transaction()  # connecting and the first commit: not the rate
    for p in range(PARTITIONS):
        producer.produce(topic, value=value, partition=p)
    producer.commit_transaction(60)
    t0 = time.perf_counter()
    for start in range(0, n, per_txn):
        producer.begin_transaction()
        produce_range(producer, topic, value, start, min(n, start + per_txn))
        producer.commit_transaction(120)
    return time.perf_counter() - t0


def produce_range(producer: Any, topic: str, value: bytes, first: int, end: int) -> None:
    """Records ``first`` to ``end`` (exclusive), round robin over the partitions by
    number, waiting out a full queue."""
    for i in range(first, end):
        while True:
            try:
                producer.produce(topic, value=value, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.01)


def main() -> None:
    p = bench_args("Kafka listener produce and fetch against the SDK")
    p.add_argument("--records", type=int, default=None, help="records per run (default 50000, 20000 with --quick)")
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--rate", type=float, default=500.0, help="records/s of the latency phase")
    p.add_argument("--seconds", type=float, default=None, help="length of the latency phase (10, 5 with --quick)")
    p.add_argument("--linger-ms", type=int, default=5, help="the latency phase producer's linger.ms")
    p.add_argument("--no-native", action="store_true", help="skip the Java perf tools (no Java or Maven here)")
    args = p.parse_args()
    classpath = None
    if not args.no_native:
        from tests import java_client

        classpath = java_client.classpath()
    runs = args.runs or (3 if args.quick else 5)
    n = args.records or (20_000 if args.quick else 50_000)
    rows = []
    produce_ratios, fetch_ratios = [], []
    kafka_p, sdk_p, http_p, kafka_f, sdk_f = [], [], [], [], []
    http_ratios = []
    native_p: list[float] = []
    native_f: list[float] = []
    native_ratios: list[float] = []
    native_cpu: list[float] = []
    txn_big: list[float] = []  # records/s at 1,000 records a transaction
    txn_small: list[float] = []  # records/s at 10
    txn_ratios: list[float] = []
    with LocalStack() as stack:
        cfg = stack.config("s3")
        with Connection(cfg) as conn, kafka_broker_process(cfg) as (bootstrap, url, broker):
            for run in range(runs):
                tk, ts, th = f"k{run}", f"s{run}", f"h{run}"
                for t in (tk, ts, th):
                    Topics(conn).create(t, PARTITIONS)
                order = [("k", tk), ("s", ts), ("h", th)]
                if run % 2:  # alternate, so drift hits each
                    order.reverse()
                took = {}
                for kind, topic in order:
                    took[kind] = {"k": lambda t=topic: kafka_produce(bootstrap, t, n, args.size),
                                  "s": lambda t=topic: sdk_produce(conn, t, n, args.size),
                                  "h": lambda t=topic: http_produce(url, t, n, args.size)}[kind]()
                k, s, h = took["k"], took["s"], took["h"]
                timed = n - PARTITIONS  # the warm-up records are not timed
                kafka_p.append(timed / k)
                sdk_p.append(timed / s)
                http_p.append(n / h)
                produce_ratios.append(kafka_p[-1] / sdk_p[-1])
                http_ratios.append(kafka_p[-1] / http_p[-1])
                Topics(conn).create(f"x{run}", PARTITIONS)
                txn_big.append(n / transactional_produce(bootstrap, f"x{run}", n, args.size, 1000))
                txn_small.append(n // 10 / transactional_produce(bootstrap, f"x{run}", n // 10, args.size, 10))
                txn_ratios.append(txn_big[-1] / kafka_p[-1])
                print(f"run {run}: transactional produce {txn_big[-1]:,.0f} rec/s at 1,000 a transaction "
                      f"({txn_ratios[-1]:.2f}x the same client's), {txn_small[-1]:,.0f} rec/s at 10",
                      file=sys.stderr)
                kf = kafka_fetch(bootstrap, tk, n)
                sf = sdk_fetch(conn, ts, n)
                kafka_f.append(n / kf)
                sdk_f.append(n / sf)
                fetch_ratios.append(sf / kf)
                print(f"run {run}: produce {n / k:,.0f} vs {n / s:,.0f} rec/s, fetch {n / kf:,.0f} vs "
                      f"{n / sf:,.0f} rec/s", file=sys.stderr)
                if classpath is not None:
                    rate, cpu_us = native_produce(classpath, bootstrap, conn, f"n{run}", 30 * n, args.size, broker.pid)
                    native_p.append(rate)
                    native_cpu.append(cpu_us)
                    native_f.append(native_consume(classpath, bootstrap, f"n{run}", 30 * n))
                    native_ratios.append(native_p[-1] / sdk_p[-1])
                    print(f"run {run}: native produce {rate:,.0f} rec/s ({cpu_us:.2f} us of broker CPU a record), "
                          f"fetch {native_f[-1]:,.0f} rec/s", file=sys.stderr)
            Topics(conn).create("lat", PARTITIONS)
            acks, e2e = latency(bootstrap, "lat", args.rate, args.seconds or (5.0 if args.quick else 10.0),
                                args.linger_ms)
    decode_us, crc_us = convert_cost(args.size)
    mib = args.size / 2**20
    rows.append(["produce rec/s", f"{median(kafka_p):,.0f}", f"{median(sdk_p):,.0f}", f"{median(http_p):,.0f}",
                 f"{median(produce_ratios):.2f}"])
    rows.append(["fetch rec/s", f"{median(kafka_f):,.0f}", f"{median(sdk_f):,.0f}", "", f"{median(fetch_ratios):.2f}"])
    rows.append(["transactional produce rec/s, 1,000 a txn", f"{median(txn_big):,.0f}", "", "", ""])
    rows.append(["transactions/s, 1,000 records each", f"{median(txn_big) / 1000:,.1f}", "", "", ""])
    rows.append(["transactional produce rec/s, 10 a txn", f"{median(txn_small):,.0f}", "", "", ""])
    rows.append(["transactions/s, 10 records each", f"{median(txn_small) / 10:,.1f}", "", "", ""])
    if native_p:
        rows.append(["produce rec/s, Java perf tool", f"{median(native_p):,.0f}", f"{median(sdk_p):,.0f}", "",
                     f"{median(native_ratios):.2f}"])
        rows.append(["fetch rec/s, Java perf tool", f"{median(native_f):,.0f}", f"{median(sdk_f):,.0f}", "", ""])
    print_table(["", "Kafka listener", "SDK", "HTTP API", "Kafka / SDK"], rows)
    print(f"transactional (1,000 a transaction) / non-transactional produce, same client: "
          f"{median(txn_ratios):.2f}", file=sys.stderr)
    print(f"latency at {args.rate:.0f} rec/s, linger.ms {args.linger_ms}: produce-ack p50 {pct(acks, 0.5):.1f} / "
          f"p99 {pct(acks, 0.99):.1f} ms; end to end p50 {pct(e2e, 0.5):.1f} / p99 {pct(e2e, 0.99):.1f} ms "
          f"({len(e2e)} of {len(acks)} seen)", file=sys.stderr)
    print(f"stored batch to llog records: {decode_us:.2f} us/record; produce check: {crc_us:.3f} us/record",
          file=sys.stderr)
    emit_json({
        "records": n, "size": args.size, "runs": runs, "s3_profile": os.environ.get("LLOG_BENCH_S3_PROFILE"),
        "kafka_produce_rec_s": round(median(kafka_p)), "kafka_produce_mib_s": round(median(kafka_p) * mib, 2),
        "sdk_produce_rec_s": round(median(sdk_p)), "http_produce_rec_s": round(median(http_p)),
        "kafka_over_sdk_produce": round(median(produce_ratios), 3),
        "kafka_over_http_produce": round(median(http_ratios), 3),
        "kafka_consume_rec_s": round(median(kafka_f)), "kafka_consume_mib_s": round(median(kafka_f) * mib, 2),
        "sdk_consume_rec_s": round(median(sdk_f)), "kafka_over_sdk_consume": round(median(fetch_ratios), 3),
        "txn1000_produce_rec_s": round(median(txn_big)), "txn1000_txn_s": round(median(txn_big) / 1000, 2),
        "txn10_produce_rec_s": round(median(txn_small)), "txn10_txn_s": round(median(txn_small) / 10, 1),
        "txn1000_over_kafka_produce": round(median(txn_ratios), 3),
        "linger_ms": args.linger_ms, "rate": args.rate,
        "produce_p50_ms": round(pct(acks, 0.5), 2), "produce_p99_ms": round(pct(acks, 0.99), 2),
        "e2e_p50_ms": round(pct(e2e, 0.5), 2), "e2e_p99_ms": round(pct(e2e, 0.99), 2),
        "e2e_seen": len(e2e), "e2e_sent": len(acks),
        "decode_us_per_record": round(decode_us, 3), "produce_check_us_per_record": round(crc_us, 4),
        **({} if not native_p else {
            "native_produce_rec_s": round(median(native_p)), "native_produce_mib_s": round(median(native_p) * mib, 2),
            "native_consume_rec_s": round(median(native_f)), "native_consume_mib_s": round(median(native_f) * mib, 2),
            "native_over_sdk_produce": round(median(native_ratios), 3),
            "native_broker_cpu_us_per_record": round(median(native_cpu), 3),
        }),
    })


if __name__ == "__main__":
    main()
