"""The load generator: several processes (spawned, so the parent's threads never
fork), each with a few threads, producing through the brokers' HTTP API (or their
Kafka listeners: :mod:`llog.loadtest.kafka_sender`).

Every partition belongs to one thread of one process, so its batches go out one at a
time, in sequence: each batch carries the thread's ``producer_id`` and the partition's
next ``sequence``, and a batch whose request failed is re-sent with the same pair to
another owner, which returns the original offsets if the first attempt committed
(idempotent produce, protocol §8.7). Record values start with a unique id
``g<proc>t<thread>-<n>`` so reconciliation can find each record and spot copies.

Per process, in the output directory: ``acks-<i>.tsv`` (one line per acknowledged
batch: topic, partition, start, end, id prefix, first n, sequence, broker, the blob's
URI and whether the answer was a retry's: ``-`` and ``0`` where not known),
``samples-<i>.jsonl`` (cumulative counters and the interval's latency histogram,
every interval), ``client-<i>.json`` (the process's totals) and ``generator-<i>.log``
(remaps and errors). :meth:`LoadGenerator.summarize` merges them."""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import multiprocessing
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlsplit

from llog.errors import LlogError
from llog.loadtest import kafka_sender
from llog.loadtest.broker_watch import AdaptiveTimeout, BrokerWatch, Hedger
from llog.loadtest.generator_state import GeneratorPlan, GeneratorStats
from llog.loadtest.histogram import Histogram
from llog.loadtest.routing import NoLiveOwner, Router
from llog.names import TopicPartition

log = logging.getLogger(__name__)

#: Produce errors that will not go away by re-sending the same batch.
_FATAL_ERRORS = frozenset({"SequenceError", "SequenceReused", "ProducerFenced", "InvalidInput", "InvalidRequest",
                           "UnknownTopic", "UnknownPartition"})


class GeneratorError(LlogError):
    """The generator processes could not start or did not finish."""


@dataclass
class _Batch:
    topic: str
    partition: int
    sequence: int
    prefix: str
    first: int
    count: int


class _Process:
    """One generator process: its threads, router, stats and output files (what a
    sender thread reaches of it: :class:`~llog.loadtest.generator_state.ProcessState`)."""

    def __init__(self, plan: GeneratorPlan, index: int, stop_flag: Any) -> None:
        self.plan = plan
        self.index = index
        self.stop_flag = stop_flag
        # Threads wait on this local event: a multiprocessing Event that a thread dies
        # waiting on (daemon thread, process exit) hangs the next set() in the parent.
        self.stop = threading.Event()
        load = plan.load
        self.router = Router([b for b, _ in plan.brokers], load.owners, plan.seed, load.routing,
                             revive_after_s=load.revive_after_s)
        self.urls = dict(plan.brokers)
        self.timeouts = AdaptiveTimeout(min(0.5, load.request_timeout_s), load.request_timeout_s)
        # Each sender thread has at most two attempts of its own running, and a few
        # hedge losers still finishing.
        self.hedger = Hedger(4 * load.threads, self.timeouts) if load.hedge else None
        self.watch: BrokerWatch | None = None
        if load.protocol == "http" and load.health_interval_s > 0:
            self.watch = BrokerWatch(self.urls, self.router, plan.partitions,
                                     interval_s=load.health_interval_s, timeout_s=load.health_timeout_s)
        self.stats = GeneratorStats()
        out = Path(plan.out_dir)
        self.acks: TextIO = open(out / f"acks-{index}.tsv", "w")  # noqa: SIM115 - closed in run()
        self.samples: TextIO = open(out / f"samples-{index}.jsonl", "w")  # noqa: SIM115 - closed in run()
        self.thread_rate = load.rate / max(1, plan.active_threads())
        self.t0 = 0.0
        self.end = 0.0

    def run(self, go: Any) -> None:
        while not go.value:
            time.sleep(0.001)
        self.t0 = time.monotonic()
        self.end = self.t0 + self.plan.duration_s
        threads = [
            threading.Thread(target=self._worker, args=(t, parts), name=f"gen-{self.index}-{t}")
            for t, parts in enumerate(self.plan.assignment(self.index)) if parts
        ]
        sampler = threading.Thread(target=self._sampler, name=f"gen-{self.index}-sampler", daemon=True)
        if self.watch is not None:
            self.watch.start()
        for th in threads:
            th.start()
        sampler.start()
        watcher = threading.Thread(target=self._watch, name=f"gen-{self.index}-watch", daemon=True)
        watcher.start()
        for th in threads:
            th.join()
        self.stop.set()
        if self.watch is not None:
            self.watch.close()
        if self.hedger is not None:
            self.hedger.close()
        elapsed = time.monotonic() - self.t0
        with self.stats.lock:
            self._write_sample()
            summary = {"proc": self.index, "elapsed_s": round(elapsed, 3), **self.stats.snapshot(),
                       "remaps": self.router.remaps, "hedges_sent": self.hedger.sent if self.hedger else 0,
                       "hedges_won": self.hedger.won if self.hedger else 0, "hist": self.stats.hist.to_json()}
        self.acks.close()
        self.samples.close()
        (Path(self.plan.out_dir) / f"client-{self.index}.json").write_text(json.dumps(summary))

    def _watch(self) -> None:
        """Relay the parent's stop flag to this process's threads."""
        while not self.stop.wait(0.1):
            if self.stop_flag.value:
                self.stop.set()

    def _sampler(self) -> None:
        interval = self.plan.interval_s
        k = 1
        while not self.stop.wait(max(0.0, self.t0 + k * interval - time.monotonic())):
            with self.stats.lock:
                if self.samples.closed:
                    return
                self._write_sample()
            k += 1

    def _write_sample(self) -> None:
        s = self.stats
        line = {"t": round(time.monotonic() - self.t0, 3), "proc": self.index, **s.snapshot(),
                "hist": s.interval_hist.to_json()}
        s.interval_hist = Histogram()
        self.samples.write(json.dumps(line) + "\n")
        self.samples.flush()

    # -- one thread -------------------------------------------------------------------
    def next_round(self, sent: int) -> bool:
        """Wait until a thread that has sent ``sent`` records is due to send again (at
        the process's per-thread rate; at once when flat out); ``False`` once the run
        is over or stopping."""
        if self.stop.is_set() or time.monotonic() >= self.end:
            return False
        if self.thread_rate > 0:
            due = self.t0 + sent / self.thread_rate
            if self.stop.wait(max(0.0, due - time.monotonic())) or time.monotonic() >= self.end:
                return False
        return True

    def _worker(self, thread: int, parts: list[TopicPartition]) -> None:
        load = self.plan.load
        if load.protocol == "kafka":
            kafka_sender.run_thread(self, thread, parts)
            return
        prefix = f"g{self.index}t{thread}"
        producer_id = f"lt-{self.plan.run_id}-{prefix}"
        pad = "x" * max(0, load.record_bytes - len(prefix) - 12)
        seq = dict.fromkeys(parts, 0)
        n = 0
        sent = 0
        conns: dict[str, http.client.HTTPConnection] = {}
        try:
            while self.next_round(sent):
                batches = []
                for tp in parts:
                    batches.append(_Batch(tp[0], tp[1], seq[tp], prefix, n, load.records_per_partition))
                    seq[tp] += 1
                    n += load.records_per_partition
                count = len(batches) * load.records_per_partition
                sent += count
                with self.stats.lock:
                    self.stats.intent_batches += len(batches)
                    self.stats.intent_records += count
                self._deliver(batches, producer_id, pad, conns)
        finally:
            for c in conns.values():
                c.close()

    def _deliver(self, batches: list[_Batch], producer_id: str, pad: str,
                 conns: dict[str, http.client.HTTPConnection]) -> None:
        """Send until every batch is acknowledged, fails for good, or the drain ends."""
        pending = list(batches)
        deadline = self.end + self.plan.load.drain_s
        attempt = 0
        while pending:
            if self.stop.is_set() or time.monotonic() > deadline:
                self._abandon(pending, "deadline")
                return
            if attempt:
                with self.stats.lock:
                    self.stats.resends += len(pending)
            attempt += 1
            by_broker: dict[str, list[_Batch]] = {}
            for b in pending:
                try:
                    by_broker.setdefault(self.router.pick(b.topic, b.partition), []).append(b)
                except NoLiveOwner:
                    continue
            done: list[_Batch] = []
            for broker, group in by_broker.items():
                done += self._send(broker, group, producer_id, pad, conns)
            pending = [b for b in pending if b not in done]
            if pending and not done:
                self.stop.wait(0.05)  # every owner failed: back off before the next round

    def _send(self, broker: str, group: list[_Batch], producer_id: str, pad: str,
              conns: dict[str, http.client.HTTPConnection]) -> list[_Batch]:
        """One request; returns the batches it settled (acknowledged or failed for good)."""
        body = json.dumps({"topic_partitions": [{
            "topic": b.topic, "partition": b.partition, "producer_id": producer_id, "sequence": b.sequence,
            "records": [f"{b.prefix}-{b.first + i} {pad}" for i in range(b.count)],
        } for b in group]}).encode()
        self.router.begin(broker)
        t = time.perf_counter()
        answered_by = broker
        try:
            if self.hedger is None:
                status, doc = self._post(broker, body, self._connection(broker, conns))
            else:
                # The connections are picked here, on this thread; an attempt abandoned
                # for the other's answer keeps its own, which leaves the cache.
                picked = {b: self._connection(b, conns) for b in filter(None, (broker, self._hedge_to(broker, group)))}
                answered_by, (status, doc) = self.hedger.send(
                    broker, next((b for b in picked if b != broker), None),
                    lambda b: self._post(b, body, picked[b]), lambda b: _forget(conns, b, picked[b]))
        except (OSError, http.client.HTTPException, ValueError) as exc:
            conn = conns.pop(broker, None)
            if conn is not None:
                conn.close()
            with self.stats.lock:
                self.stats.errors[f"transport:{type(exc).__name__}"] += 1
            self.router.mark_dead(broker, self.plan.partitions)
            return []
        finally:
            self.router.end(broker)
        ms = (time.perf_counter() - t) * 1000
        self.timeouts.observe(ms / 1000)
        self.router.answered(answered_by)
        if answered_by != broker:
            # Another broker answered while this one sat on the request past the hedge
            # delay (alive, but cut off from S3, say): out of rotation as if it had
            # failed, or every round pays a hedge for it and its losers hold the
            # hedger's slots until none is left to hedge with.
            self.router.mark_dead(broker, self.plan.partitions)
        return self._settle(group, status, doc, answered_by, ms)

    def _settle(self, group: list[_Batch], status: int, doc: Any, answered_by: str, ms: float) -> list[_Batch]:
        """Count a produce answer; returns the batches it settled."""
        settled: list[_Batch] = []
        results = doc.get("results") if isinstance(doc, dict) else None
        with self.stats.lock:
            self.stats.hist.add(ms)
            self.stats.interval_hist.add(ms)
            if not isinstance(results, list) or len(results) != len(group):
                self.stats.errors[f"http:{status}"] += 1
                if status == 400:  # our request is wrong: re-sending cannot help
                    self._abandon_locked(group, f"http 400: {doc}")
                    return group
                return []
            for b, res in zip(group, results, strict=True):
                if res.get("ok"):
                    if res["end_offset"] - res["start_offset"] + 1 != b.count:
                        self.stats.errors["ack_count_mismatch"] += 1
                    # The blob and whether the broker answered from the producer state
                    # (a retry's first commit): what a lost batch's report starts from.
                    self.acks.write(f"{b.topic}\t{b.partition}\t{res['start_offset']}\t{res['end_offset']}\t"
                                    f"{b.prefix}\t{b.first}\t{b.sequence}\t{answered_by}\t"
                                    f"{res.get('wal_uri') or '-'}\t{int(bool(res.get('duplicate')))}\n")
                    self.stats.acked_batches += 1
                    self.stats.acked_records += b.count
                    settled.append(b)
                    continue
                kind = str(res.get("error_type"))
                self.stats.errors[kind] += 1
                if kind in _FATAL_ERRORS:
                    self._abandon_locked([b], f"{kind}: {res.get('error')}")
                    settled.append(b)
        return settled

    def _connection(self, broker: str, conns: dict[str, http.client.HTTPConnection]) -> http.client.HTTPConnection:
        conn = conns.get(broker)
        if conn is None:
            u = urlsplit(self.urls[broker])
            conn = conns[broker] = http.client.HTTPConnection(u.hostname or "127.0.0.1", u.port or 80)
        return conn

    def _hedge_to(self, broker: str, group: list[_Batch]) -> str | None:
        """Another live broker in every batch's owner set (the first by name), if any."""
        common = set.intersection(*(set(self.router.owners(b.topic, b.partition)) for b in group)) - {broker}
        live = [b for b in sorted(common) if self.router.alive(b)]
        return live[0] if live else None

    def _post(self, broker: str, body: bytes, conn: http.client.HTTPConnection) -> tuple[int, Any]:
        timeout = self.timeouts.seconds()
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        conn.request("POST", "/produce", body=body, headers={"content-type": "application/json"})
        # Cut if the broker goes silent meanwhile.
        with contextlib.nullcontext() if self.watch is None else self.watch.sending(broker, conn.sock):
            resp = conn.getresponse()
            return resp.status, json.loads(resp.read())

    def _abandon(self, batches: list[_Batch], why: str) -> None:
        with self.stats.lock:
            self._abandon_locked(batches, why)

    def _abandon_locked(self, batches: list[_Batch], why: str) -> None:
        for b in batches:
            log.error("giving up on %s/%d sequence %d (%s-%d..+%d): %s",
                      b.topic, b.partition, b.sequence, b.prefix, b.first, b.count, why)
            self.stats.failed_batches += 1
            self.stats.failed_records += b.count


def _forget(conns: dict[str, http.client.HTTPConnection], broker: str, conn: http.client.HTTPConnection) -> None:
    """An abandoned attempt keeps ``conn``: the next request to ``broker`` opens another."""
    if conns.get(broker) is conn:
        del conns[broker]


def _process_main(plan: GeneratorPlan, index: int, ready: Any, go: Any, stop: Any) -> None:
    logging.basicConfig(
        filename=str(Path(plan.out_dir) / f"generator-{index}.log"), level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    proc = _Process(plan, index, stop)
    ready.put(index)
    proc.run(go)


class LoadGenerator:
    """Starts the generator processes, releases them together, waits for them."""

    def __init__(self, plan: GeneratorPlan) -> None:
        self.plan = plan
        ctx = multiprocessing.get_context("spawn")
        self._ready = ctx.Queue()
        self._go = ctx.Value("b", 0)
        self._stop = ctx.Value("b", 0)
        self.procs = [
            ctx.Process(target=_process_main, args=(plan, i, self._ready, self._go, self._stop),
                        name=f"llog-loadgen-{i}", daemon=True)
            for i in range(plan.load.processes)
        ]
        self.started_at = 0.0

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs if p.pid is not None]

    def start(self, timeout: float = 60.0) -> float:
        """Start every process and release them at once; returns the release time
        (``time.monotonic()``)."""
        for p in self.procs:
            p.start()
        for _ in self.procs:
            try:
                self._ready.get(timeout=timeout)
            except Exception as exc:  # queue.Empty
                self.stop()
                raise GeneratorError(f"generator processes not ready after {timeout}s") from exc
        self.started_at = time.monotonic()
        self._go.value = 1
        return self.started_at

    def wait(self) -> None:
        limit = self.plan.duration_s + self.plan.load.drain_s + 60
        for p in self.procs:
            p.join(max(1.0, self.started_at + limit - time.monotonic()))
        if any(p.is_alive() for p in self.procs):
            self.stop()
            raise GeneratorError("generator processes did not finish; stopped them")
        bad = [p.exitcode for p in self.procs if p.exitcode != 0]
        if bad:
            raise GeneratorError(f"generator processes exited with {bad}")

    def stop(self) -> None:
        self._stop.value = 1
        self._go.value = 1
        for p in self.procs:
            p.join(10)
            if p.is_alive():
                p.kill()
                p.join()

    def summarize(self) -> dict[str, Any]:
        """Merge the processes' files into ``client_samples.jsonl`` and
        ``client_summary.json``; returns the summary."""
        out = Path(self.plan.out_dir)
        procs = [json.loads((out / f"client-{i}.json").read_text()) for i in range(self.plan.load.processes)]
        hist = Histogram()
        totals: Counter[str] = Counter()
        errors: Counter[str] = Counter()
        for p in procs:
            hist.merge(Histogram.from_json(p["hist"]))
            errors.update(p["errors"])
            totals.update({k: v for k, v in p.items() if k not in ("proc", "hist", "errors", "elapsed_s")})
        elapsed = max(p["elapsed_s"] for p in procs)
        summary: dict[str, Any] = {
            **totals, "errors": dict(errors), "elapsed_s": elapsed,
            "offered_rate": self.plan.load.rate or "flat out",
            "acked_rate_rec_s": round(totals["acked_records"] / self.plan.duration_s, 1),
            "latency": hist.figures(), "processes": self.plan.load.processes,
        }
        (out / "client_summary.json").write_text(json.dumps(summary, indent=2))
        self._merge_samples(out)
        return summary

    def _merge_samples(self, out: Path) -> None:
        interval = self.plan.interval_s
        slots: dict[int, dict[int, dict[str, Any]]] = {}
        for i in range(self.plan.load.processes):
            with open(out / f"samples-{i}.jsonl") as f:
                for line in f:
                    s = json.loads(line)
                    slots.setdefault(max(1, round(s["t"] / interval)), {})[i] = s
        with open(out / "client_samples.jsonl", "w") as f:
            for k in sorted(slots):
                parts = slots[k].values()
                h = Histogram()
                for s in parts:
                    h.merge(Histogram.from_json(s["hist"]))
                merged: dict[str, Any] = {"t": round(k * interval, 3), "processes": len(slots[k])}
                for key in ("intent_records", "acked_records", "failed_records", "resends"):
                    merged[key] = sum(s[key] for s in parts)
                if self.plan.zones:  # each zone's clients' own, for availability by zone
                    by_zone: dict[str, int] = dict.fromkeys(self.plan.zones, 0)
                    for i, s in slots[k].items():
                        by_zone[str(self.plan.zone_of(i))] += s["acked_records"]
                    merged["acked_by_zone"] = by_zone
                merged["latency"] = h.figures()
                f.write(json.dumps(merged) + "\n")
