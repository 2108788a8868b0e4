"""The Kafka listener against llog's own SDK, same stack, same run.

Starts a local stack (real etcd + moto S3, ``bench/common.py``) and one broker child
process with its Kafka listener, then measures, alternating runs:

- produce: confluent-kafka (librdkafka) producing ``--records`` records of ``--size``
  bytes over 8 partitions through the Kafka listener (``linger.ms`` 5, acks all,
  idempotent), against the same records through ``BatchingProducer.send`` in-process
  (the SDK, no network). ``produce_ratio`` = Kafka / SDK records/s, median of per-run
  ratios.
- fetch: a confluent-kafka consumer reading those records from the start (assign, no
  group), against ``Reader.scan_many`` over the same partitions. ``fetch_ratio``.
- the broker's CPU per record converting a produced batch (``decode_batches``: CRC,
  decompress, one llog record each) against only checking its CRC — what storing
  client batches as they came would still cost (docs/kafka.md, "Storage"), in-process.

The last line is one JSON object.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import timeit
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a file: python bench/...

import confluent_kafka
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from bench.common import LocalStack, bench_args, emit_json, median, print_table
from llog.config import LlogConfig
from llog.connection import Connection
from llog.kafka.record_batches import decode_batches
from llog.producer import BatchingProducer
from llog.reader import Reader
from llog.topics import Topics

PARTITIONS = 8


@contextmanager
def kafka_broker(cfg: LlogConfig) -> Iterator[str]:
    """A broker child process with a Kafka listener; its bootstrap address."""
    env = {**os.environ, "LLOG_ETCD_ENDPOINTS": ",".join(cfg.etcd_endpoints), "LLOG_OBJECT_STORE": cfg.object_store,
           "LLOG_ROOT_PREFIX": cfg.root_prefix, "LLOG_S3_ENDPOINT_URL": cfg.s3_endpoint_url or ""}
    proc = subprocess.Popen([sys.executable, "-m", "llog", "broker", "--port", "0", "--kafka-port", "0"], env=env,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        proc.stdout.readline()
        line = proc.stdout.readline()
        if "Kafka listener on port " not in line:
            raise RuntimeError(f"broker did not start its Kafka listener: {line!r}")
        yield f"127.0.0.1:{int(line.rsplit(' ', 1)[1])}"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def kafka_produce(bootstrap: str, topic: str, n: int, size: int) -> float:
    """Seconds to produce ``n`` records and have every one acknowledged."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all",
                                         "enable.idempotence": True, "queue.buffering.max.messages": 1_000_000})
    value = b"x" * size
    failed: list[object] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            failed.append(err)

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
    t0 = time.perf_counter()
    with BatchingProducer(conn) as producer:
        futures = [producer.send(topic, i % PARTITIONS, value) for i in range(n)]
        for f in futures:
            f.result()
    return time.perf_counter() - t0


def kafka_fetch(bootstrap: str, topic: str, n: int) -> float:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-unused",
                                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                     for p in range(PARTITIONS)])
    got = 0
    t0 = time.perf_counter()
    while got < n:
        for msg in consumer.consume(10_000, timeout=5):
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


def convert_cost(size: int, records: int = 1000) -> tuple[float, float]:
    """µs per record: decoding a batch into llog records, and only checking its CRC."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=2**31 - 1)
    for i in range(records):
        builder.append(i, 1_700_000_000_000 + i, None, b"x" * size, [])
    data = bytes(builder.build())
    decode = min(timeit.repeat(lambda: decode_batches(data), number=20, repeat=5)) / 20 / records * 1e6
    crc = min(timeit.repeat(lambda: DefaultRecordBatch(data).validate_crc(), number=20, repeat=5)) / 20 / records * 1e6
    return decode, crc


def main() -> None:
    p = bench_args("Kafka listener produce and fetch against the SDK")
    p.add_argument("--records", type=int, default=None, help="records per run (default 50000, 20000 with --quick)")
    p.add_argument("--size", type=int, default=100)
    args = p.parse_args()
    runs = args.runs or (3 if args.quick else 5)
    n = args.records or (20_000 if args.quick else 50_000)
    rows = []
    produce_ratios, fetch_ratios = [], []
    kafka_p, sdk_p, kafka_f, sdk_f = [], [], [], []
    with LocalStack() as stack:
        cfg = stack.config("s3")
        with Connection(cfg) as conn, kafka_broker(cfg) as bootstrap:
            for run in range(runs):
                tk, ts = f"k{run}", f"s{run}"
                Topics(conn).create(tk, PARTITIONS)
                Topics(conn).create(ts, PARTITIONS)
                if run % 2:  # alternate, so drift hits both
                    s = sdk_produce(conn, ts, n, args.size)
                    k = kafka_produce(bootstrap, tk, n, args.size)
                else:
                    k = kafka_produce(bootstrap, tk, n, args.size)
                    s = sdk_produce(conn, ts, n, args.size)
                kafka_p.append(n / k)
                sdk_p.append(n / s)
                produce_ratios.append(s / k)
                kf = kafka_fetch(bootstrap, tk, n)
                sf = sdk_fetch(conn, ts, n)
                kafka_f.append(n / kf)
                sdk_f.append(n / sf)
                fetch_ratios.append(sf / kf)
                print(f"run {run}: produce {n / k:,.0f} vs {n / s:,.0f} rec/s, fetch {n / kf:,.0f} vs "
                      f"{n / sf:,.0f} rec/s", file=sys.stderr)
    decode_us, crc_us = convert_cost(args.size)
    rows.append(["produce rec/s", f"{median(kafka_p):,.0f}", f"{median(sdk_p):,.0f}", f"{median(produce_ratios):.2f}"])
    rows.append(["fetch rec/s", f"{median(kafka_f):,.0f}", f"{median(sdk_f):,.0f}", f"{median(fetch_ratios):.2f}"])
    print_table(["", "Kafka listener", "SDK", "ratio"], rows)
    print(f"batch to llog records: {decode_us:.2f} us/record; CRC check alone: {crc_us:.3f} us/record",
          file=sys.stderr)
    emit_json({
        "records": n, "size": args.size, "runs": runs,
        "kafka_produce_rec_s": round(median(kafka_p)), "sdk_produce_rec_s": round(median(sdk_p)),
        "produce_ratio": round(median(produce_ratios), 3),
        "kafka_fetch_rec_s": round(median(kafka_f)), "sdk_fetch_rec_s": round(median(sdk_f)),
        "fetch_ratio": round(median(fetch_ratios), 3),
        "decode_us_per_record": round(decode_us, 3), "crc_only_us_per_record": round(crc_us, 4),
    })


if __name__ == "__main__":
    main()
