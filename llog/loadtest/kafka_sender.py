"""The load generator's Kafka client (``[load] protocol = "kafka"``): each generator
thread produces its partitions' records through one confluent-kafka (librdkafka)
producer, idempotent with ``acks=all``, bootstrapped from every broker's Kafka
listener. librdkafka batches, retries across a killed broker and keeps each
partition's order itself; every delivery report becomes one acknowledgement line
(offset, record id), so reconciliation checks Kafka-produced records exactly as it
checks the HTTP ones: present at the acknowledged offset, exactly once."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from llog.names import TopicPartition

if TYPE_CHECKING:
    from llog.loadtest.generator import _Process

log = logging.getLogger(__name__)


def _report(delivered: Callable[[Any, Any, int, float], None], n: int, t: float, err: Any, msg: Any) -> None:
    delivered(err, msg, n, t)


def run_thread(proc: _Process, thread: int, parts: list[TopicPartition]) -> None:
    """One generator thread's load, paced like the HTTP client's, then a drain of up to
    ``drain_s`` for the deliveries still outstanding."""
    import confluent_kafka  # the optional client: only a Kafka scenario needs it

    plan, stats = proc.plan, proc.stats
    load = plan.load
    prefix = f"g{proc.index}t{thread}"
    pad = "x" * max(0, load.record_bytes - len(prefix) - 12)
    producer = confluent_kafka.Producer({
        "bootstrap.servers": ",".join(addr for _, addr in plan.kafka),
        "enable.idempotence": True, "acks": "all", "linger.ms": 5,
        # Undelivered by the end of the drain: reported failed, never silently dropped.
        "message.timeout.ms": int((plan.duration_s + load.drain_s) * 1000),
        "client.id": f"llog-loadtest-{prefix}",
        # librdkafka's own log (a killed broker's refused connections) goes to the
        # generator's log file, not the terminal.
        "logger": log,
    })

    def delivered(err: Any, msg: Any, n: int, t: float) -> None:
        ms = (time.perf_counter() - t) * 1000
        with stats.lock:
            if err is not None:
                stats.errors[f"kafka:{err.name()}"] += 1
                stats.failed_batches += 1
                stats.failed_records += 1
                return
            off = msg.offset()
            proc.acks.write(f"{msg.topic()}\t{msg.partition()}\t{off}\t{off}\t{prefix}\t{n}\t-1\tkafka\n")
            stats.acked_batches += 1
            stats.acked_records += 1
            stats.hist.add(ms)
            stats.interval_hist.add(ms)

    n = sent = 0
    try:
        while not proc.stop.is_set() and time.monotonic() < proc.end:
            if proc.thread_rate > 0:
                due = proc.t0 + sent / proc.thread_rate
                if proc.stop.wait(max(0.0, due - time.monotonic())) or time.monotonic() >= proc.end:
                    break
            for topic, partition in parts:
                for _ in range(load.records_per_partition):
                    t = time.perf_counter()
                    value = f"{prefix}-{n} {pad}".encode()
                    while True:
                        try:
                            producer.produce(topic, value=value, partition=partition,
                                             on_delivery=partial(_report, delivered, n, t))
                            break
                        except BufferError:  # librdkafka's queue is full: let it drain
                            producer.poll(0.05)
                    n += 1
            count = len(parts) * load.records_per_partition
            sent += count
            with stats.lock:
                stats.intent_batches += count
                stats.intent_records += count
            producer.poll(0)
    finally:
        left = producer.flush(max(0.0, proc.end + load.drain_s - time.monotonic()))
        if left:
            with stats.lock:
                stats.errors["kafka:undelivered_at_drain_end"] += left
                stats.failed_batches += left
                stats.failed_records += left
