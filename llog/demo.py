"""``llog demo``: the whole system on one machine, in one command.

It starts etcd, an object store, one HTTP broker and the compactor service on loopback,
then walks through what llog is for, one line of output (with a figure) per step:
produce through the SDK and through the broker, a consumer group of two members that
reads everything with committed offsets, a compaction, a Spark batch count (when Java
and PySpark are there), and a final exactly-once check of every record. It ends by
printing the commands to try next.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.util
import json
import os
import shutil
import statistics
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from compactor.service import CompactorService
from llog.connection import Connection, connect
from llog.devstack import BrokerProcess, LocalStack
from llog.errors import LlogError
from llog.groups import Consumer
from llog.groups.offsets import GroupOffsets
from llog.producer import BatchingProducer
from llog.reader import Reader
from llog.topic.admin import Topics

TOPIC = "demo"
GROUP = "demo-readers"
_T = TypeVar("_T")


class DemoFailed(LlogError):
    """A demo step did not reach its expected state in time."""


def _step(n: int, name: str, text: str) -> None:
    print(f"[{n}/7] {name:<11}{text}", flush=True)


def _wait_for(what: str, check: Callable[[], _T | None], timeout_s: float = 30.0) -> _T:
    """Poll ``check`` until it returns a value; raise :class:`DemoFailed` after the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if got is not None:
            return got
        if time.monotonic() > deadline:
            raise DemoFailed(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.05)


def _post(url: str, body: dict[str, object]) -> dict[str, object]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        out: dict[str, object] = json.load(resp)
        return out


def _sdk_produce(conn: Connection, records: int, partitions: int) -> list[bytes]:
    values = [f"sdk record {i}".encode() for i in range(records)]
    t0 = time.perf_counter()
    with BatchingProducer(conn) as producer:
        futures = [producer.send(TOPIC, i % partitions, v) for i, v in enumerate(values)]
        for f in futures:
            f.result()
    took = time.perf_counter() - t0
    _step(2, "SDK", f"{records:,} records -> {partitions} partitions through the BatchingProducer "
                    f"in {took:.2f} s ({records / took:,.0f} rec/s)")
    return values


def _http_produce(broker_url: str, requests: int, per_request: int, partitions: int) -> list[bytes]:
    values: list[bytes] = []
    latencies: list[float] = []
    t0 = time.perf_counter()
    for r in range(requests):
        batch = [f"http record {r * per_request + i}" for i in range(per_request)]
        values.extend(v.encode() for v in batch)
        t = time.perf_counter()
        out = _post(f"{broker_url}/produce", {
            "topic_partitions": [{"topic": TOPIC, "partition": r % partitions, "records": batch}],
        })
        latencies.append(time.perf_counter() - t)
        results = out.get("results")
        for res in results if isinstance(results, list) else []:
            if res.get("ok") is False:
                raise DemoFailed(f"broker refused a produce request: {res.get('error')}")
    took = time.perf_counter() - t0
    _step(3, "HTTP", f"{len(values):,} records in {requests} POST /produce requests to the broker in "
                     f"{took:.2f} s (median request {statistics.median(latencies) * 1000:.0f} ms)")
    return values


def _group_read(conn: Connection, expected: int, partitions: int) -> list[bytes]:
    """Two members share the partitions and read everything, committing as they go."""
    got: dict[str, list[tuple[int, int, bytes]]] = {"a": [], "b": []}
    owned: dict[str, list[int]] = {}
    done = threading.Event()
    errors: list[BaseException] = []

    def balanced() -> bool:
        return all(c.assignment() for c in consumers.values())

    def member(name: str, consumer: Consumer) -> None:
        try:
            with consumer:
                while not done.is_set():
                    # One record a poll until the second member has its share, so the
                    # demo shows the split rather than member a reading everything alone.
                    recs = consumer.poll(max_records=2000 if balanced() else 1, timeout_s=0.2)
                    got[name].extend((r.partition, r.offset, r.value or b"") for r in recs)
                    consumer.commit()
                    if len({(p, o) for m in got.values() for p, o, _ in m}) >= expected:
                        done.set()
                    if recs:  # its share while it was reading (the other may leave first)
                        owned[name] = sorted(p for _, p in consumer.assignment())
        except BaseException as exc:  # reported by the caller
            errors.append(exc)
            done.set()

    t0 = time.perf_counter()
    consumers = {
        name: Consumer(conn, GROUP, [TOPIC], member_id=f"member-{name}", rebalance_interval_s=0.2)
        for name in ("a", "b")
    }
    threads = [threading.Thread(target=member, args=(n, c), name=f"demo-{n}") for n, c in consumers.items()]
    for t in threads:
        t.start()
    finished = done.wait(60)
    done.set()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    if not finished:
        raise DemoFailed("the consumer group did not read every record within 60 s")
    took = time.perf_counter() - t0
    unique = {(p, o): v for m in got.values() for p, o, v in m}
    delivered = sum(len(m) for m in got.values())
    offsets = GroupOffsets(conn, GROUP)
    committed = sum(c.offset for c in (offsets.get(TOPIC, p) for p in range(partitions)) if c is not None)
    _step(4, "group", f"2 members of group {GROUP!r} read {len(unique):,} records in {took:.2f} s "
                      f"(a owns partitions {owned.get('a')}, read {len(got['a']):,}; b owns {owned.get('b')}, "
                      f"read {len(got['b']):,}; {delivered - len(unique)} re-delivered); "
                      f"committed offsets sum to {committed:,}")
    return list(unique.values())


def _index_keys(conn: Connection) -> int:
    return sum(p.index_keys for p in Topics(conn).describe(TOPIC).partitions)


def _compaction(conn: Connection, svc: CompactorService, partitions: int) -> None:
    before = _index_keys(conn)
    t0 = time.perf_counter()
    svc.discover()
    after = _wait_for(
        "the compactor service to compact every partition",
        lambda: (n if (n := _index_keys(conn)) <= partitions else None),
    )
    _step(5, "compaction", f"index keys {before} -> {after} by the compactor service in "
                           f"{time.perf_counter() - t0:.2f} s")


@contextlib.contextmanager
def _stderr_to(path: Path) -> Iterator[None]:
    """Point file descriptor 2 (and so child processes' stderr) at ``path`` for a while."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with path.open("ab") as f:
            os.dup2(f.fileno(), 2)
            yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def _spark_count(expected: int, log_path: Path) -> None:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        _step(6, "Spark", "skipped: no Java runtime (Debian: apt-get install openjdk-17-jre-headless)")
        return
    if importlib.util.find_spec("pyspark") is None:
        _step(6, "Spark", "skipped: PySpark is not installed (pip install 'llog[spark]')")
        return
    from llog.spark import local_session

    t0 = time.perf_counter()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    with _stderr_to(log_path):  # the JVM's start-up chatter goes to the log, not the demo's output
        spark = local_session("llog-demo")
        try:
            n = spark.read.format("llog").option("topic", TOPIC).load().count()
        finally:
            spark.stop()
    if n != expected:
        raise DemoFailed(f"Spark counted {n} rows, expected {expected}")
    _step(6, "Spark", f'spark.read.format("llog") counted {n:,} rows in {time.perf_counter() - t0:.1f} s')


def run(*, s3: bool = False, records: int = 20_000, partitions: int = 4, spark: bool = True) -> int:
    """Run the demo; return the process exit code (0: every record read back exactly once)."""
    print("llog demo: etcd, an object store, a broker and the compactor on this machine")
    t0 = time.perf_counter()
    with LocalStack(s3=s3) as stack:
        env = stack.env()
        os.environ.update(env)  # the broker, Spark and its workers read the same settings
        config = dataclasses.replace(stack.config, compact_min_age_ms=0, compactor_pass_interval_s=0.5)
        with connect(config) as conn, BrokerProcess(env) as broker, \
                CompactorService(config, http=False) as svc:
            Topics(conn).create(TOPIC, partitions)
            _step(1, "stack", f"etcd {stack.etcd.endpoint}, objects {config.object_store}, "
                              f"broker {broker.url}, compactor service (up in {time.perf_counter() - t0:.1f} s)")
            values = _sdk_produce(conn, records, partitions)
            values += _http_produce(broker.url, 100, max(1, records // 1000), partitions)
            grouped = _group_read(conn, len(values), partitions)
            _compaction(conn, svc, partitions)
            if spark:
                _spark_count(len(values), stack.workdir / "spark.log")
            else:
                _step(6, "Spark", "skipped (--no-spark)")
            with Reader(conn) as reader:
                back = [r.value or b"" for p in range(partitions) for r in reader.scan(TOPIC, p)]
        ok = sorted(back) == sorted(values) and sorted(grouped) == sorted(values)
        digest = hashlib.sha256(b"".join(sorted(back))).hexdigest()[:16]
        _step(7, "verdict", (f"every one of {len(values):,} records read back exactly once after compaction "
                             f"(sha256 {digest}); {time.perf_counter() - t0:.1f} s in all")
              if ok else "FAILED: the records read back differ from those written")
    print(
        "\nnext:\n"
        "  llog dev up                              # the same stack, left running (Kafka clients: localhost:9092)\n"
        "  llog topics create orders -p 4 && echo hello | llog produce orders\n"
        "  llog consume orders --from earliest --follow   # every partition, then tail them\n"
        "  llog loadtest run loadtest/scenarios/smoke.toml\n"
        "  docs: README.md, docs/broker.md, docs/kafka.md, docs/spark.md, docs/operations.md, protocol/README.md"
    )
    return 0 if ok else 1
