"""The transactional workload (``[load] protocol = "kafka-txn"``, protocol §15): while
chaos runs, an input producer writes ``in-{n}`` records to the scenario's first topic
and ``processes x threads`` workers run Kafka's exactly-once loop on it — consume
(read_committed, one group), write each record to two output topics and commit the
input offsets, all in one transaction (confluent-kafka). After the drain the logs are
checked, Elle-style, against what the workers saw happen:

* no lost write: every input record is in each output, and every transaction a worker
  saw commit has all its records there;
* exactly once: no input record is in an output twice;
* no aborted read: no record of a transaction a worker saw abort is in an output;
* no torn transaction: each transaction's records are all in both outputs or none
  (one whose end the worker could not learn, ``unknown``, may be either, never half);
* order: each output partition holds its input partition's records in input order.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from llog.connection import Connection
from llog.groups.offsets import GroupOffsets
from llog.kafka.client_settings import CONSUMER, PRODUCER
from llog.producer import BatchingProducer
from llog.state.control import read_control
from llog.topic.admin import Topics

log = logging.getLogger(__name__)
#: librdkafka's own log (refused connections to a killed broker, ...): the orchestrator
#: sends it to ``logs/txn-clients.log``, not the terminal.
client_log = logging.getLogger(f"{__name__}.clients")

OUTPUTS = ("out-a", "out-b")
#: How often a worker resumes a commit_transaction that timed out before giving it up.
COMMIT_RESUMES = 5
#: A worker's consumer that has not polled for this long leaves the group, and its
#: partitions go to the others: a worker stuck in one librdkafka call (its
#: coordinator lookup can wait forever, librdkafka #5456/#5511) must not stop the drain.
#: It is longer than a transaction's calls take through the scenario's faults.
MAX_POLL_INTERVAL_MS = 45_000
#: After the drain, how long a worker may take to finish its transaction and stop;
#: one still in a call then is reported stuck (``stuck_workers``) and left behind.
STOP_S = 60.0


@dataclass
class TxnLog:
    """What the workers saw of their transactions: tag -> (outcome, records)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    outcomes: dict[str, tuple[str, int]] = field(default_factory=dict)
    closed: bool = False

    def note(self, tag: str, outcome: str, n: int) -> None:
        with self.lock:
            if not self.closed:  # a stuck worker that wakes after the check has nothing to add
                self.outcomes[tag] = (outcome, n)

    def close(self) -> None:
        """No more notes: the check reads the outcomes from now on."""
        with self.lock:
            self.closed = True

    def counts(self) -> dict[str, int]:
        return dict(Counter(o for o, _ in self.outcomes.values()))


@dataclass(frozen=True)
class Workload:
    """Where the workload runs: the Kafka listeners, the topics and the group."""

    bootstrap: str
    input: str
    partitions: int
    group: str

    def output(self, which: str) -> str:
        return f"{self.input}-{which}"


class Worker(threading.Thread):
    """One consume-transform-produce loop under transactional id ``txn-{index}``."""

    def __init__(self, w: Workload, index: int, txns: TxnLog, stop: threading.Event) -> None:
        super().__init__(name=f"llog-txn-worker-{index}", daemon=True)
        self.w, self.index, self.txns, self.stop_event = w, index, txns, stop
        self.number = 0
        #: The transaction under way: its tag, records, and the call it is in since when.
        self.current: tuple[str, int] | None = None
        self.call: tuple[str, float] | None = None

    def _in(self, call: str) -> None:
        self.call = (call, time.monotonic())

    def stuck(self) -> dict[str, Any]:
        """What a worker that did not stop is doing (for ``stuck_workers``)."""
        call, since = self.call or ("", time.monotonic())
        return {"worker": self.index, "transaction": self.current[0] if self.current else None, "call": call,
                "for_s": round(time.monotonic() - since, 1)}

    def _producer(self) -> Any:
        import confluent_kafka

        p = confluent_kafka.Producer({**PRODUCER, "bootstrap.servers": self.w.bootstrap, "linger.ms": 5,
                                      "transactional.id": f"txn-{self.index}", "logger": client_log})
        while not self.stop_event.is_set():
            try:
                self._in("init_transactions")
                p.init_transactions(10)
                return p
            except confluent_kafka.KafkaException as exc:  # no coordinator yet: a broker is down
                log.info("worker %d: init_transactions: %s", self.index, exc)
        return None

    def _consumer(self) -> Any:
        import confluent_kafka

        consumer = confluent_kafka.Consumer({
            **CONSUMER, "bootstrap.servers": self.w.bootstrap, "group.id": self.w.group,
            "isolation.level": "read_committed", "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "max.poll.interval.ms": MAX_POLL_INTERVAL_MS, "logger": client_log})
        consumer.subscribe([self.w.input])
        return consumer

    def run(self) -> None:
        consumer = self._consumer()
        producer = self._producer()
        try:
            while producer is not None and not self.stop_event.is_set():
                msgs = [m for m in consumer.consume(200, 0.5) if m.error() is None]
                if not msgs:
                    continue
                producer, rewound = self._transact(consumer, producer, msgs)
                if not rewound:  # its position is past records no transaction wrote: start over
                    consumer.close()
                    consumer = self._consumer()
        finally:
            consumer.close()

    def _transact(self, consumer: Any, producer: Any, msgs: list[Any]) -> tuple[Any, bool]:
        """One transaction of ``msgs``; the producer to go on with, and whether the
        consumer's position is right for the next one (else it must be replaced)."""
        import confluent_kafka

        self.number += 1
        tag = f"{self.index}.{self.number}"
        self.current = (tag, len(msgs))
        try:
            self._in("begin_transaction")
            producer.begin_transaction()
            for m in msgs:
                value = m.value() + b"|" + tag.encode()
                for which in OUTPUTS:
                    producer.produce(self.w.output(which), value=value, partition=m.partition())
            self._in("send_offsets_to_transaction")
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                 consumer.consumer_group_metadata(), 30)
            self._commit(producer)
            self.txns.note(tag, "committed", len(msgs))
            return producer, True
        except confluent_kafka.KafkaException as exc:
            outcome, producer = self._recover(producer, exc.args[0])
            self.txns.note(tag, outcome, len(msgs))
            self._in("consumer.committed")
            return producer, self._rewind(consumer)
        finally:
            self.current = self.call = None

    def _commit(self, producer: Any) -> None:
        """commit_transaction, resumed after a timeout as librdkafka asks (an abort then
        would conflict with the commit still under way)."""
        import confluent_kafka

        self._in("commit_transaction")
        for _ in range(COMMIT_RESUMES):
            try:
                producer.commit_transaction(30)
                return
            except confluent_kafka.KafkaException as exc:
                err = exc.args[0]
                if not err.retriable() or err.txn_requires_abort() or err.fatal():
                    raise
                log.info("worker %d: commit resumed after: %s", self.index, err)
        producer.commit_transaction(30)

    def _recover(self, producer: Any, err: Any) -> tuple[str, Any]:
        """After a failed transaction: ``aborted`` if an abort went through, else
        ``unknown`` (its end unseen) with a new producer instance, which fences the old."""
        import confluent_kafka

        if not err.fatal():
            try:
                self._in("abort_transaction")
                producer.abort_transaction(30)
                return "aborted", producer
            except confluent_kafka.KafkaException as exc:
                log.info("worker %d: abort failed: %s", self.index, exc)
        return "unknown", self._producer()

    def _rewind(self, consumer: Any) -> bool:
        """Back to the group's committed offsets, where the next transaction starts;
        whether that worked."""
        import confluent_kafka

        try:
            committed = consumer.committed(consumer.assignment(), 30)
            failed = [tp for tp in committed if tp.error is not None]
            if failed:  # UNSTABLE_OFFSET_COMMIT past the client's retries: no offset known, not "none"
                log.info("worker %d: rewind: %s", self.index, failed[0].error)
                return False
            for tp in committed:
                if tp.offset < 0:  # the group never committed one
                    tp.offset = confluent_kafka.OFFSET_BEGINNING
                consumer.seek(tp)
            return True
        except confluent_kafka.KafkaException as exc:
            log.info("worker %d: rewind: %s", self.index, exc)
            return False


def feed(conn: Connection, topic: str, partitions: int, rate: float, stop: threading.Event) -> int:
    """Write ``in-{n}`` records round robin at ``rate`` records/s until ``stop``; how
    many were sent (whether stored is what the log says, read back at the end)."""
    n = 0
    t0 = time.monotonic()
    with BatchingProducer(conn, send_timeout_s=5) as producer:
        while not stop.is_set():
            due = int((time.monotonic() - t0) * rate)
            while n < due:
                try:
                    producer.send(topic, n % partitions, f"in-{n}".encode())
                except Exception as exc:  # an outage: that record is not sent
                    log.info("feed: %s", exc)
                n += 1
            stop.wait(0.05)
    return n


def drained(conn: Connection, w: Workload) -> bool:
    """Whether the group's committed offsets reached the end of every input partition."""
    committed = {c.partition: c.offset for c in GroupOffsets(conn, w.group).all() if c.topic == w.input}
    return all(committed.get(p, 0) >= read_control(conn, w.input, p).control.next_offset
               for p in range(w.partitions))


def run_workload(conn: Connection, w: Workload, workers: int, rate: float, duration_s: float,
                 drain_s: float, txns: TxnLog, on_load_end: Any = None) -> dict[str, Any]:
    """Feed the input for ``duration_s`` (``on_load_end()`` is called then: chaos
    stops) while ``workers`` loops run, then let them drain it for up to ``drain_s``."""
    for which in OUTPUTS:
        Topics(conn).create(w.output(which), w.partitions)
    stop_feed, stop_workers = threading.Event(), threading.Event()
    loops = [Worker(w, i, txns, stop_workers) for i in range(workers)]
    for t in loops:
        t.start()
    fed: list[int] = []
    feeder = threading.Thread(target=lambda: fed.append(feed(conn, w.input, w.partitions, rate, stop_feed)),
                              name="llog-txn-feed", daemon=True)
    feeder.start()
    t0 = time.monotonic()
    try:
        stop_feed.wait(duration_s)  # the load phase lasts this long: nothing to wait for
        stop_feed.set()
        feeder.join()
        if on_load_end is not None:
            on_load_end()
        deadline = time.monotonic() + drain_s
        while not drained(conn, w) and time.monotonic() < deadline:
            stop_workers.wait(0.5)
        done = drained(conn, w)
    finally:
        stop_feed.set()
        stop_workers.set()
        stuck = join_workers(loops, txns)
    return {"fed": fed[0] if fed else 0, "drained": done, "load_and_drain_s": round(time.monotonic() - t0, 1),
            "stuck_workers": stuck}


def join_workers(loops: Sequence[Worker], txns: TxnLog, stop_s: float = STOP_S) -> list[dict[str, Any]]:
    """Wait up to ``stop_s`` for the workers to stop; the ones still in a client
    call are left behind (daemon threads) and their transaction noted ``unknown``: it
    may have committed or not, and the check allows either, never half."""
    deadline = time.monotonic() + stop_s
    for t in loops:
        t.join(max(0.0, deadline - time.monotonic()))
    stuck = []
    for t in loops:
        if not t.is_alive():
            continue
        stuck.append(t.stuck())
        log.warning("worker %d did not stop: %s", t.index, stuck[-1])
        current = t.current
        if current is not None and current[0] not in txns.outcomes:
            txns.note(current[0], "unknown", current[1])
    txns.close()
    return stuck
