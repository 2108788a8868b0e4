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
from functools import partial
from typing import Any

from llog.kafka.client_settings import PRODUCER
from llog.loadtest.generator_state import ProcessState
from llog.names import TopicPartition

log = logging.getLogger(__name__)


def run_thread(proc: ProcessState, thread: int, parts: list[TopicPartition]) -> None:
    """One generator thread's load, paced like the HTTP client's, then a drain of up to
    ``drain_s`` for the deliveries still outstanding."""
    _KafkaThread(proc, thread).run(parts)


class _KafkaThread:
    def __init__(self, proc: ProcessState, thread: int) -> None:
        import confluent_kafka  # the optional client: only a Kafka scenario needs it

        self.proc = proc
        plan, load = proc.plan, proc.plan.load
        self.prefix = f"g{proc.index}t{thread}"
        self.pad = "x" * max(0, load.record_bytes - len(self.prefix) - 12)
        self.producer = confluent_kafka.Producer({
            "bootstrap.servers": ",".join(addr for _, addr in plan.kafka),
            "enable.idempotence": True, "acks": "all", "linger.ms": 5,
            # What docs/kafka.md advises: a silent broker noticed in seconds, not 30.
            **PRODUCER,
            # Undelivered by the end of the drain: reported failed, never silently dropped.
            "message.timeout.ms": int((plan.duration_s + load.drain_s) * 1000),
            # A zoned cluster's clients name their zone, so they are led to its brokers.
            "client.id": f"llog-loadtest-{self.prefix}"
                         + ("" if (zone := plan.zone_of(proc.index)) is None else f",llog_zone={zone}"),
            # librdkafka's own log (a killed broker's refused connections) goes to the
            # generator's log file, not the terminal.
            "logger": log,
        })

    def run(self, parts: list[TopicPartition]) -> None:
        proc, load = self.proc, self.proc.plan.load
        n = sent = 0
        try:
            while proc.next_round(sent):
                for topic, partition in parts:
                    for _ in range(load.records_per_partition):
                        self._produce(topic, partition, n)
                        n += 1
                count = len(parts) * load.records_per_partition
                sent += count
                with proc.stats.lock:
                    proc.stats.intent_batches += count
                    proc.stats.intent_records += count
                self.producer.poll(0)
        finally:
            self._failed(self.producer.flush(max(0.0, proc.end + load.drain_s - time.monotonic())),
                         "undelivered_at_drain_end")

    def _produce(self, topic: str, partition: int, n: int) -> None:
        value = f"{self.prefix}-{n} {self.pad}".encode()
        on_delivery = partial(self._delivered, n, time.perf_counter())
        while True:
            try:
                self.producer.produce(topic, value=value, partition=partition, on_delivery=on_delivery)
                return
            except BufferError:  # librdkafka's queue is full: let it drain
                self.producer.poll(0.05)

    def _delivered(self, n: int, t: float, err: Any, msg: Any) -> None:
        if err is not None:
            self._failed(1, err.name())
            return
        ms = (time.perf_counter() - t) * 1000
        stats, off = self.proc.stats, msg.offset()
        with stats.lock:
            self.proc.acks.write(f"{msg.topic()}\t{msg.partition()}\t{off}\t{off}\t{self.prefix}\t{n}\t-1\tkafka\t-\t0\n")
            stats.acked_batches += 1
            stats.acked_records += 1
            stats.hist.add(ms)
            stats.interval_hist.add(ms)

    def _failed(self, records: int, why: str) -> None:
        if records:
            stats = self.proc.stats
            with stats.lock:
                stats.errors[f"kafka:{why}"] += records
                stats.failed_batches += records
                stats.failed_records += records
