"""What a load-generator process is made of, apart from its threads: the plan it was
started with, its counters, and the view of it a sender thread gets (the HTTP threads
in :mod:`llog.loadtest.generator`, the Kafka ones in :mod:`llog.loadtest.kafka_sender`)."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any, Protocol, TextIO

from llog.loadtest.histogram import Histogram
from llog.loadtest.scenario import LoadSpec
from llog.names import TopicPartition


@dataclass(frozen=True)
class GeneratorPlan:
    """Everything a generator process needs (pickled to it)."""

    run_id: str
    brokers: tuple[tuple[str, str], ...]  # (broker id, base URL)
    partitions: tuple[TopicPartition, ...]
    load: LoadSpec
    seed: int
    duration_s: float
    interval_s: float
    out_dir: str
    #: (broker id, Kafka listener host:port), for ``protocol = "kafka"``.
    kafka: tuple[tuple[str, str], ...] = ()
    #: The cluster's zones: process ``i`` is a client of ``zones[i % len(zones)]``.
    zones: tuple[str, ...] = ()

    def zone_of(self, proc: int) -> str | None:
        return self.zones[proc % len(self.zones)] if self.zones else None

    def assignment(self, proc: int) -> list[list[TopicPartition]]:
        """The partitions of each thread of process ``proc``."""
        slots = self.load.processes * self.load.threads
        threads: list[list[TopicPartition]] = [[] for _ in range(self.load.threads)]
        for j, tp in enumerate(self.partitions):
            slot = j % slots
            if slot % self.load.processes == proc:
                threads[slot // self.load.processes].append(tp)
        return threads

    def active_threads(self) -> int:
        return sum(1 for p in range(self.load.processes) for t in self.assignment(p) if t)


class GeneratorStats:
    """One process's counters and latency histograms, under ``lock``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.intent_records = self.intent_batches = 0
        self.acked_records = self.acked_batches = 0
        self.failed_records = self.failed_batches = 0
        self.resends = 0
        self.errors: Counter[str] = Counter()
        self.hist = Histogram()
        self.interval_hist = Histogram()

    def snapshot(self) -> dict[str, Any]:
        return {
            "intent_records": self.intent_records, "intent_batches": self.intent_batches,
            "acked_records": self.acked_records, "acked_batches": self.acked_batches,
            "failed_records": self.failed_records, "failed_batches": self.failed_batches,
            "resends": self.resends, "errors": dict(self.errors),
        }



class ProcessState(Protocol):
    """What a sender thread reaches of its generator process."""

    plan: GeneratorPlan
    index: int
    #: When the run ends (``time.monotonic``).
    end: float
    stats: GeneratorStats
    #: The acknowledgement lines (``acks-{index}.tsv``).
    acks: TextIO

    def next_round(self, sent: int) -> bool:
        """Wait until a thread that has sent ``sent`` records is due again; ``False``
        once the run is over or stopping."""
