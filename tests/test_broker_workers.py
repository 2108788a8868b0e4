"""``llog broker --workers N``: one broker of N processes on one HTTP port, each its own
Kafka node, against the real etcd and S3 servers; the processes' lifecycle (a worker
that dies is started again, kill -9 of the broker leaves none behind, SIGTERM stops all
cleanly) and the one ``/metrics`` view."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from llog.config import LlogConfig
from llog.connection import Connection
from llog.reader import Reader
from tests.broker_harness import (  # noqa: F401 (the fixture conn, with topic t)
    BrokerProcess,
    broker_process,
    children,
    conn_with_topic_t,
)
from tests.conftest import config_env, wait_until


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


def _health_by_connection(b: BrokerProcess, connections: int) -> Counter[int]:
    """Which worker answered ``/health`` on each of ``connections`` new connections."""
    seen: Counter[int] = Counter()
    for _ in range(connections):
        status, body = b.request("GET", "/health")
        assert status == 200 and body["workers"] == 2, body
        seen[body["worker"]] += 1
    return seen


def _connection_to(b: BrokerProcess, worker: int) -> http.client.HTTPConnection:
    """A new connection that worker ``worker`` accepted (the kernel hands each to
    whichever worker accepts first: under load one may take many in a row)."""
    for _ in range(500):
        c = http.client.HTTPConnection(b.host, b.port, timeout=60)
        c.request("GET", "/health")
        resp = c.getresponse()
        if json.loads(resp.read())["worker"] == worker:
            return c
        c.close()
    raise AssertionError(f"worker {worker} accepted none of 500 connections")


def _produce_one(c: http.client.HTTPConnection, partition: int, value: str) -> dict[str, Any]:
    body = json.dumps({"topic_partitions": [{"topic": "t", "partition": partition, "records": [value]}]})
    c.request("POST", "/produce", body=body, headers={"content-type": "application/json"})
    resp = c.getresponse()
    got = json.loads(resp.read())
    assert resp.status == 200, got
    return dict(got["results"][0])


def test_two_workers_share_the_port_and_store_every_record_once(config: LlogConfig, conn: Connection) -> None:
    with broker_process(config, "--workers", "2") as b:
        assert b.proc.stdout is not None and "2 worker processes" in b.proc.stdout.readline()
        assert len(children(b.proc.pid)) == 2
        # The parent forks (each worker, and again at a restart) and so has no thread but
        # its own: gRPC's threads and state outlive a closed channel, and a worker forked
        # beside them could hang in its first etcd call (it checked the format in a child).
        assert os.listdir(f"/proc/{b.proc.pid}/task") == [str(b.proc.pid)]
        # The kernel hands connections to whichever worker accepts first: both do.
        seen: Counter[int] = Counter()
        wait_until(lambda: len(seen.update(_health_by_connection(b, 20)) or seen) == 2, 60,
                   "both workers answering on the shared port")

        sent: dict[int, list[str]] = {p: [] for p in range(4)}
        offsets: dict[int, list[int]] = {p: [] for p in range(4)}
        for client in range(8):  # a connection each, four to each worker
            c = _connection_to(b, client % 2)
            for i in range(25):
                p, value = (client + i) % 4, f"c{client}-{i}"
                sent[p].append(value)
                offsets[p].append(_produce_one(c, p, value)["start_offset"])
            c.close()
        with Reader(conn) as r:
            for p in range(4):
                assert sorted(offsets[p]) == list(range(50))  # no offset shared or skipped
                stored = {rec.offset: rec.value.decode() for rec in r.scan("t", p, 0, 50)}
                assert [stored[o] for o in offsets[p]] == sent[p]

        # One metrics view: every worker's samples, labelled, whichever worker answers.
        for _ in range(4):
            snap = b.request("GET", "/metrics")[1]
            assert {s["labels"]["worker"]: s["value"] for s in snap["llog_broker_worker_up"]} == {"0": 1.0, "1": 1.0}
            produced = [s for s in snap["llog_http_requests_total"] if s["labels"]["route"] == "/produce"]
            assert {s["labels"]["worker"] for s in produced} == {"0", "1"}
            assert sum(s["value"] for s in produced) == 200
        status, text = b.request("GET", "/metrics/prometheus")
        assert status == 200
        lines = [ln for ln in text.splitlines() if ln.startswith('llog_http_requests_total{') and "/produce" in ln]
        assert sum(float(ln.rsplit(" ", 1)[1]) for ln in lines) == 200
        assert text.count("# TYPE llog_http_requests_total counter") == 1  # one family, not one per worker
        status, own = b.request("GET", "/metrics?scope=worker")
        assert status == 200 and "llog_broker_worker_up" not in own


def test_a_dead_worker_is_started_again_and_the_broker_stops_cleanly(config: LlogConfig, conn: Connection) -> None:
    with broker_process(config, "--workers", "2") as b:
        first = children(b.proc.pid)
        os.kill(first[0], signal.SIGKILL)
        wait_until(lambda: len(set(children(b.proc.pid)) - set(first)) == 1, 60, "a new worker process")
        wait_until(lambda: len(_health_by_connection(b, 20)) == 2, 60, "both workers answering again")
        assert b.post("/produce", {"topic_partitions": [{"topic": "t", "partition": 0, "records": ["x"]}]})[0] == 200
        workers = children(b.proc.pid)
    # broker_process's exit: SIGTERM, and exit status 0 required; the workers went too.
    assert not any(_alive(w) for w in workers)


def test_kill_9_of_the_broker_takes_its_workers(config: LlogConfig, conn: Connection) -> None:
    with broker_process(config, "--workers", "2") as b:
        workers = children(b.proc.pid)
        b.kill()
        wait_until(lambda: not any(_alive(w) for w in workers), 30, "the workers to die with their parent")


def test_each_worker_is_a_kafka_node(config: LlogConfig, conn: Connection) -> None:
    from kafka.protocol.metadata import MetadataRequest, MetadataResponse

    from tests.test_kafka import _exchange

    with broker_process(config, "--workers", "2", "--kafka-port", "0") as b:
        assert b.proc.stdout is not None
        bootstrap = f"127.0.0.1:{int(b.proc.stdout.readline().rsplit(' ', 1)[1])}"
        meta = _exchange(bootstrap, MetadataRequest[8](topics=None, allow_auto_topic_creation=False,
                                                       include_cluster_authorized_operations=False,
                                                       include_topic_authorized_operations=False), MetadataResponse)
        assert len({n.node_id for n in meta.brokers}) == len({n.port for n in meta.brokers}) == 2
        (topic,) = [t for t in meta.topics if t.name == "t"]
        assert len({p.leader_id for p in topic.partitions}) == 2

        from confluent_kafka import Consumer, Producer

        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
        for i in range(400):
            producer.produce("t", f"v{i}".encode(), partition=i % 4)
        assert producer.flush(60) == 0
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "workers", "auto.offset.reset": "earliest"})
        consumer.subscribe(["t"])
        got: list[bytes] = []
        wait_until(lambda: got.extend(m.value() for m in consumer.consume(100, 1.0) if m.error() is None)
                   or len(got) >= 400, 120, "the group to read every record")
        consumer.commit(asynchronous=False)
        consumer.close()
        assert sorted(got) == sorted(f"v{i}".encode() for i in range(400))


def test_workers_are_refused_unless_positive(config: LlogConfig) -> None:
    for bad in ("0", "-1", "x"):
        proc = subprocess.run([sys.executable, "-m", "llog", "broker", "--port", "0", "--workers", bad],
                              env=config_env(config), capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and "--workers" in proc.stderr
    with pytest.raises(Exception, match="broker_workers must be > 0"):
        LlogConfig.from_env({"LLOG_BROKER_WORKERS": "0"}, etcd_endpoints=config.etcd_endpoints)
