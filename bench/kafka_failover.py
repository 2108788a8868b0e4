"""Kafka clients through a broker or etcd-member fault: a confluent-kafka producer
(idempotent or not) and a consumer group of 3 members, against 2 brokers on 3 etcd
members, while one broker is SIGSTOPped (``--fault pause``), killed with SIGKILL
(``kill``), or one etcd member is SIGSTOPped (``etcd-pause``).

The producer sends ``--rate`` records/s round-robin over ``--partitions`` partitions
with the client settings the docs recommend (:data:`llog.kafka.client_settings`,
``--defaults`` for librdkafka's own). Per partition, the longest time without a
delivery report (producer) or a received record (consumers) from one second before
the fault to five seconds after it ends; fatal errors; and, read back through the SDK,
records acknowledged but missing and records stored twice.

The last line is one JSON object.
"""

from __future__ import annotations

import itertools
import os
import signal
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

sys.path[:] = [p for p in sys.path if p != str(Path(__file__).resolve().parent)]
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Consumer, KafkaError, Producer  # noqa: E402

from bench.common import bench_args, emit_json, print_table  # noqa: E402
from llog.connection import Connection  # noqa: E402
from llog.devstack import BrokerProcess, LocalStack  # noqa: E402
from llog.kafka.client_settings import CONSUMER, PRODUCER  # noqa: E402
from llog.reader import Reader  # noqa: E402
from llog.topic.admin import Topics  # noqa: E402

TOPIC, GROUP = "failover", "failover-group"


class Timeline:
    """Event times per partition, thread-safe."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.times: dict[int, list[float]] = defaultdict(list)

    def add(self, partition: int, t: float) -> None:
        with self.lock:
            self.times[partition].append(t)

    def longest_gap(self, partitions: int, start: float, end: float, origin: float) -> dict[int, list[float]]:
        """Per partition: the longest gap in seconds, and where it began relative to ``origin``."""
        out = {}
        for p in range(partitions):
            ts = sorted(t for t in self.times.get(p, []) if start <= t <= end)
            edges = [start, *ts, end]
            gap, at = max((b - a, a) for a, b in itertools.pairwise(edges))
            out[p] = [round(gap, 3), round(at - origin, 3)]
        return out


def run(args: Any) -> dict[str, Any]:
    with LocalStack(s3=True, etcd_members=3) as stack:
        env = {**stack.env(), "LLOG_SESSION_TTL_S": "4"}
        with Connection(stack.config) as conn:
            Topics(conn).create(TOPIC, args.partitions)
        brokers = [BrokerProcess(env, kafka_port=0) for _ in range(2)]
        try:
            return _exercise(args, stack, brokers)
        finally:
            for b in brokers:
                with _ignored():
                    os.kill(b.proc.pid, signal.SIGCONT)
                b.stop()


class _ignored:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return True


def _exercise(args: Any, stack: LocalStack, brokers: list[BrokerProcess]) -> dict[str, Any]:
    bootstrap = ",".join(b.kafka_bootstrap or "" for b in brokers)
    tuned = {} if args.defaults else dict(PRODUCER)
    pconf = {"bootstrap.servers": bootstrap, "enable.idempotence": args.idempotent, "linger.ms": 5, **tuned}
    fatal: list[str] = []
    errors: Counter[str] = Counter()
    acked: dict[int, set[str]] = defaultdict(set)
    produced_at = Timeline()
    consumed_at = Timeline()
    consumed: Counter[tuple[int, str]] = Counter()
    stop = threading.Event()

    def on_error(err: KafkaError) -> None:
        if err.fatal():
            fatal.append(str(err))
        else:
            errors[err.name()] += 1

    def delivered(err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            errors[f"delivery:{err.name()}"] += 1
            return
        acked[msg.partition()].add(msg.value().decode())
        produced_at.add(msg.partition(), time.monotonic())

    if args.debug:
        pconf["debug"] = args.debug
    producer = Producer({**pconf, "error_cb": on_error})

    def produce() -> None:
        seq = 0
        next_at = time.monotonic()
        while not stop.is_set() and not fatal:
            p = seq % args.partitions
            producer.produce(TOPIC, f"r{seq}".encode(), partition=p, on_delivery=delivered)
            seq += 1
            producer.poll(0)
            next_at += 1 / args.rate
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        producer.flush(60)

    cconf = {"bootstrap.servers": bootstrap, "group.id": GROUP, "auto.offset.reset": "earliest",
             **({} if args.defaults else dict(CONSUMER))}

    def consume(name: str) -> None:
        c = Consumer({**cconf, "client.id": name, "error_cb": on_error})
        c.subscribe([TOPIC])
        try:
            while not stop.is_set() or not _caught_up():
                msg = c.poll(0.2)
                if msg is None or msg.error():
                    continue
                consumed_at.add(msg.partition(), time.monotonic())
                with consumed_at.lock:
                    consumed[(msg.partition(), msg.value().decode())] += 1
        finally:
            c.close()

    drained = threading.Event()

    def _caught_up() -> bool:
        return drained.is_set()

    threads = [threading.Thread(target=produce, name="producer")]
    threads += [threading.Thread(target=consume, args=(f"c{i}",), name=f"consumer{i}") for i in range(3)]
    for t in threads:
        t.start()
    time.sleep(args.warmup)
    fault_start = time.monotonic()
    print(f"fault at {time.time():.3f}", file=sys.stderr, flush=True)
    victim = brokers[0].proc.pid if args.fault in ("pause", "kill") else stack.etcds[1].proc.pid
    if args.fault == "kill":
        os.kill(victim, signal.SIGKILL)
        time.sleep(args.pause)
    else:
        os.kill(victim, signal.SIGSTOP)
        time.sleep(args.pause)
        os.kill(victim, signal.SIGCONT)
    fault_end = time.monotonic()
    time.sleep(args.after)
    stop.set()
    threads[0].join()
    produced_end = time.monotonic()
    want = {(p, v) for p, vs in acked.items() for v in vs}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with consumed_at.lock:
            if want <= set(consumed):
                break
        time.sleep(0.2)
    drained.set()
    for t in threads[1:]:
        t.join()
    window = (fault_start - 1, fault_end + 5)
    stored: Counter[tuple[int, str]] = Counter()
    with Connection(stack.config) as conn, Reader(conn) as r:
        for p in range(args.partitions):
            for rec in r.scan(TOPIC, p):
                stored[(p, rec.value.decode())] += 1
    lost = len(want - set(stored))
    twice = sum(1 for n in stored.values() if n > 1)
    return {
        "fault": args.fault, "pause_s": args.pause, "idempotent": args.idempotent,
        "settings": "librdkafka defaults" if args.defaults else "llog.kafka.client_settings",
        "acked": len(want), "lost": lost, "stored_twice": twice, "fatal": fatal,
        "errors": dict(errors),
        "consumed_missing": len(want - set(consumed)),
        "producer_longest_stall_s": produced_at.longest_gap(args.partitions, *window, fault_start),
        "consumer_longest_stall_s": consumed_at.longest_gap(args.partitions, *window, fault_start),
        "producer_ran_s": round(produced_end - fault_start + args.warmup, 1),
    }


def main() -> None:
    p = bench_args(__doc__.split("\n\n")[0])
    p.add_argument("--fault", choices=("pause", "kill", "etcd-pause"), default="pause")
    p.add_argument("--pause", type=float, default=30.0, help="seconds the fault lasts")
    p.add_argument("--idempotent", action="store_true")
    p.add_argument("--defaults", action="store_true", help="librdkafka's own settings, not llog's advice")
    p.add_argument("--debug", default="", help="librdkafka debug contexts for the producer")
    p.add_argument("--rate", type=float, default=500.0)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--warmup", type=float, default=5.0)
    p.add_argument("--after", type=float, default=8.0)
    args = p.parse_args()
    if args.quick:
        args.pause = min(args.pause, 10.0)
    out = run(args)
    prod, cons = out["producer_longest_stall_s"], out["consumer_longest_stall_s"]
    rows = [[f"p{p}", f"{prod[p][0]:.2f}", f"{prod[p][1]:+.1f}", f"{cons[p][0]:.2f}", f"{cons[p][1]:+.1f}"]
            for p in range(args.partitions)]
    print_table(["partition", "producer stall s", "from s", "consumer stall s", "from s"], rows)
    print(f"acked {out['acked']}, lost {out['lost']}, stored twice {out['stored_twice']}, "
          f"fatal {out['fatal']}, errors {out['errors']}")
    emit_json(out)


if __name__ == "__main__":
    main()
