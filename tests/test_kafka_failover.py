"""Kafka clients route around a broker that stops answering (issue 36): the paused
broker leads nothing in the others' Metadata within about a second, only its own
partitions move (rendezvous hashing), and an idempotent confluent-kafka producer keeps
every partition moving through the pause with nothing lost, stored twice or fatal."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import pytest
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from llog.config import LlogConfig
from llog.connection import Connection
from llog.kafka.client_settings import PRODUCER
from llog.kafka.registry import BrokerNode
from llog.kafka.zones import leader_of
from llog.local_ports import free_port
from llog.reader import Reader
from llog.state.keys import prefix_range_end
from llog.topic.admin import Topics
from tests.broker_harness import broker_process
from tests.conftest import wait_until
from tests.test_kafka import KafkaBroker, _exchange, kafka_broker

# Processes paused past session timeouts: the timing is the test, so it runs alone.
pytestmark = pytest.mark.alone

TOPIC = "moving"
PARTITIONS = 8


def test_a_broker_leaving_moves_only_its_own_partitions() -> None:
    nodes = [BrokerNode(i, "h", 9092 + i) for i in range(3)]
    keys = [(f"topic-{t}", p) for t in range(4) for p in range(32)]
    before = {k: leader_of(nodes, *k).node_id for k in keys}
    assert set(Counter(before.values())) == {0, 1, 2}  # spread over every broker
    after = {k: leader_of([nodes[0], nodes[2]], *k).node_id for k in keys}
    moved = {k for k in keys if before[k] != after[k]}
    assert moved == {k for k in keys if before[k] == 1}
    assert {after[k] for k in moved} == {0, 2}  # and spread over the rest


def _metadata(bootstrap: str) -> Any:
    return _exchange(bootstrap, MetadataRequest[8](topics=None, allow_auto_topic_creation=False,
                                                   include_cluster_authorized_operations=False,
                                                   include_topic_authorized_operations=False), MetadataResponse)


def _leaders(bootstrap: str) -> tuple[set[int], dict[int, int]]:
    """(the brokers listed, partition -> leader) in ``bootstrap``'s Metadata for TOPIC."""
    got = _metadata(bootstrap)
    [topic] = [t for t in got.topics if t.name == TOPIC]
    return {b.node_id for b in got.brokers}, {p.partition_index: p.leader_id for p in topic.partitions}


def _node_id(bootstrap: str) -> int:
    host, port = bootstrap.rsplit(":", 1)
    return next(b.node_id for b in _metadata(bootstrap).brokers if b.host == host and b.port == int(port))


@contextmanager
def _two_brokers(config: LlogConfig) -> Iterator[list[KafkaBroker]]:
    with Connection(config) as conn:
        Topics(conn).create(TOPIC, PARTITIONS)
    with ExitStack() as stack:
        brokers = [stack.enter_context(kafka_broker(config)) for _ in range(2)]
        try:
            yield brokers
        finally:
            for b in brokers:
                if b.http.proc.poll() is None:
                    os.kill(b.http.proc.pid, signal.SIGCONT)


def test_a_paused_broker_leads_nothing_until_it_answers_again(config: LlogConfig) -> None:
    with _two_brokers(config) as (a, b):
        a_id, b_id = _node_id(a.bootstrap), _node_id(b.bootstrap)
        listed, leaders = _leaders(b.bootstrap)
        assert listed == {a_id, b_id} and set(leaders.values()) == {a_id, b_id}
        ours = {p for p, n in leaders.items() if n == b_id}
        os.kill(a.http.proc.pid, signal.SIGSTOP)
        try:
            wait_until(lambda: set(_leaders(b.bootstrap)[1].values()) == {b_id}, 30, "b leading every partition")
            # Still listed (clients keep it to return to), and b's own partitions never moved.
            assert _leaders(b.bootstrap)[0] == {a_id, b_id}
            assert b.http.metric("llog_kafka_peers_silent") == 1
        finally:
            os.kill(a.http.proc.pid, signal.SIGCONT)
        wait_until(lambda: _leaders(b.bootstrap)[1] == leaders, 30, "a leading its partitions again")
        assert {p for p, n in _leaders(a.bootstrap)[1].items() if n == b_id} == ours
        assert b.http.metric("llog_kafka_peers_silent") == 0


class _Producing:
    """An idempotent confluent-kafka producer (llog's recommended settings) sending
    round-robin to every partition on a thread; acknowledgements kept per partition."""

    def __init__(self, bootstrap: str) -> None:
        confluent_kafka = pytest.importorskip("confluent_kafka")
        self.fatal: list[str] = []
        self.failed: list[str] = []
        self.acked: dict[int, list[tuple[float, str]]] = defaultdict(list)
        self._producer = confluent_kafka.Producer({
            "bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5, **PRODUCER,
            "error_cb": lambda err: self.fatal.append(str(err)) if err.fatal() else None,
        })
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is None:
            self.acked[msg.partition()].append((time.monotonic(), msg.value().decode()))
        else:
            self.failed.append(str(err))

    def _run(self) -> None:
        seq = 0
        while not self._stop.is_set() and not self.fatal:
            self._producer.produce(TOPIC, f"r{seq}".encode(), partition=seq % PARTITIONS,
                                   on_delivery=self._delivered)
            seq += 1
            self._producer.poll(0.002)
        self._producer.flush(60)

    def __enter__(self) -> _Producing:
        self._thread.start()
        wait_until(lambda: all(self.acked[p] for p in range(PARTITIONS)), 30, "every partition acknowledging")
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def moved_on(self, since: float) -> bool:
        """Every partition acknowledged after ``since``."""
        return all(self.acked[p] and self.acked[p][-1][0] > since for p in range(PARTITIONS))

    def check_stored(self, config: LlogConfig) -> None:
        """No fatal error, every acknowledged record stored, none twice."""
        assert not self.fatal and not self.failed
        with Connection(config) as conn, Reader(conn) as r:
            stored = Counter((p, rec.value.decode()) for p in range(PARTITIONS) for rec in r.scan(TOPIC, p))
        sent = {(p, v) for p, got in self.acked.items() for _t, v in got}
        assert sent <= set(stored)
        assert max(stored.values()) == 1


def test_an_idempotent_producer_keeps_every_partition_moving_through_a_pause(config: LlogConfig) -> None:
    with _two_brokers(config) as brokers:
        victim = brokers[0].http.proc.pid
        with _Producing(",".join(b.bootstrap for b in brokers)) as producing:
            os.kill(victim, signal.SIGSTOP)
            try:
                # Every partition, the paused broker's included, is acknowledged again while
                # it is still paused: the producer moved them.
                paused_at = time.monotonic()
                wait_until(lambda: producing.moved_on(paused_at + 0.5), 20, "every partition acknowledged again")
            finally:
                os.kill(victim, signal.SIGCONT)
        producing.check_stored(config)


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_a_stopped_or_killed_broker_loses_its_producers_nothing(config: LlogConfig, how: str) -> None:
    with _two_brokers(config) as (a, b):
        with _Producing(f"{a.bootstrap},{b.bootstrap}") as producing:
            stopped_at = time.monotonic()
            if how == "SIGKILL":
                a.http.kill()
            else:
                a.http.proc.send_signal(signal.SIGTERM)
            wait_until(lambda: producing.moved_on(stopped_at + 0.5), 20, "every partition acknowledged again")
            if how == "SIGTERM":
                assert a.http.proc.wait(60) == 0  # a clean drain
        b_id = _node_id(b.bootstrap)
        assert set(_leaders(b.bootstrap)[1].values()) == {b_id}
        producing.check_stored(config)


def _coordinator_of(bootstrap: str, key: str, key_type: int = 0) -> int:
    """The node FindCoordinator names for a group (``key_type`` 0) or a transactional id (1)."""
    from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

    got = _exchange(bootstrap, FindCoordinatorRequest[1](key=key, key_type=key_type), FindCoordinatorResponse)
    assert got.error_code == 0
    return int(got.node_id)


class _Transacting:
    """Kafka's exactly-once loop, as confluent-kafka runs it, on a thread: each
    transaction one record to every partition and a group's offsets (TxnOffsetCommit,
    through the group's coordinator), committed; the committed transactions' records kept."""

    def __init__(self, bootstrap: str, transactional_id: str, group: str) -> None:
        confluent_kafka = pytest.importorskip("confluent_kafka")
        self._kafka = confluent_kafka
        self.errors: list[str] = []
        self.committed: list[tuple[float, list[str]]] = []
        self._producer = confluent_kafka.Producer({
            "bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5,
            "transaction.timeout.ms": 60_000})
        self._group = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group})
        self._producer.init_transactions(30)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            values = [f"t{n}-{p}" for p in range(PARTITIONS)]
            try:
                self._producer.begin_transaction()
                for p, v in enumerate(values):
                    self._producer.produce(TOPIC, v.encode(), partition=p)
                self._producer.send_offsets_to_transaction(
                    [self._kafka.TopicPartition(TOPIC, 0, n + 1)], self._group.consumer_group_metadata(), 60)
                self._producer.commit_transaction(60)
            except self._kafka.KafkaException as exc:  # the test fails on any
                self.errors.append(str(exc))
                return
            self.committed.append((time.monotonic(), values))
            n += 1

    def __enter__(self) -> _Transacting:
        self._thread.start()
        wait_until(lambda: len(self.committed) >= 3 or self.errors, 30, "transactions committing")
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._group.close()


def test_a_transactional_producer_commits_on_through_its_coordinators_clean_restart(config: LlogConfig) -> None:
    """The broker coordinating both a producer's transactions and the group whose offsets
    they commit is restarted cleanly (SIGTERM, then started on the same address, as in a
    rolling upgrade): while it drains it answers NOT_COORDINATOR and leads nothing, and
    it stays in the broker lists Metadata sends until it is back (were it dropped,
    librdkafka would retire it and wait forever on it as the group's coordinator once it
    is named again, librdkafka #5511). The producer goes on committing through the stop
    and the restart; nothing it committed is lost or stored twice."""
    with Connection(config) as conn:
        Topics(conn).create(TOPIC, PARTITIONS)
    port = free_port()
    with ExitStack() as brokers:
        b = brokers.enter_context(kafka_broker(config))
        a = brokers.enter_context(kafka_broker(config, "--kafka-port", str(port)))
        a_id, b_id = _node_id(a.bootstrap), _node_id(b.bootstrap)
        wait_until(lambda: set(_leaders(b.bootstrap)[1].values()) == {a_id, b_id}, 30, "b naming a")
        txn, group = (next(k for k in (f"clean-stop-{i}" for i in range(100))
                           if _coordinator_of(b.bootstrap, k, key_type) == a_id) for key_type in (1, 0))
        with _Transacting(f"{a.bootstrap},{b.bootstrap}", txn, group) as producing:
            a.http.proc.send_signal(signal.SIGTERM)
            assert a.http.proc.wait(60) == 0  # a clean drain
            again = brokers.enter_context(kafka_broker(config, "--kafka-port", str(port)))
            back_at = time.monotonic()
            wait_until(lambda: producing.errors or sum(t > back_at for t, _ in producing.committed) >= 20, 90,
                       "20 transactions committed after the coordinator's restart")
        assert producing.errors == []
        assert _node_id(again.bootstrap) == a_id  # its registration taken back, never gone
        # Back, it coordinates both again, as soon as b reads the registration it took over.
        wait_until(lambda: _coordinator_of(b.bootstrap, txn, 1) == _coordinator_of(b.bootstrap, group) == a_id, 30,
                   "the restarted broker coordinating again")
    with Connection(config) as conn, Reader(conn) as r:
        stored = Counter(rec.value.decode() for p in range(PARTITIONS) for rec in r.scan(TOPIC, p)
                         if rec.value is not None)
    committed = [v for _t, values in producing.committed for v in values]
    assert all(stored[v] == 1 for v in committed)


def test_a_consumer_group_keeps_its_partitions_when_its_coordinator_pauses(config: LlogConfig) -> None:
    """The coordinator's broker is paused: the members carry on with their generation at
    the next coordinator (kept in etcd), so nobody gives up a partition, and every
    partition keeps being read during the pause."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from llog.kafka.client_settings import CONSUMER

    group = "carry-on"
    with _two_brokers(config) as brokers:
        bootstrap = ",".join(b.bootstrap for b in brokers)
        ids = {_node_id(b.bootstrap): b for b in brokers}
        coordinator = ids[_coordinator_of(brokers[0].bootstrap, group)]
        assignments: list[tuple[float, str, list[int]]] = []
        received: dict[int, list[float]] = defaultdict(list)
        stop = threading.Event()

        def consume(name: str) -> None:
            c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group, **CONSUMER,
                                          "auto.offset.reset": "earliest", "client.id": name})
            c.subscribe([TOPIC], on_assign=lambda _c, ps: assignments.append(
                (time.monotonic(), name, sorted(p.partition for p in ps))))
            try:
                while not stop.is_set():
                    msg = c.poll(0.1)
                    if msg is not None and msg.error() is None:
                        received[msg.partition()].append(time.monotonic())
            finally:
                c.close()

        consumers = [threading.Thread(target=consume, args=(f"m{i}",)) for i in range(3)]
        for t in consumers:
            t.start()
        try:
            with _Producing(bootstrap) as producing:
                wait_until(lambda: all(received[p] for p in range(PARTITIONS)) and len(
                    {n for _t, n, _ps in assignments}) == 3, 60, "three members reading every partition")
                wait_until(lambda: len(assignments) >= 3 and time.monotonic() - assignments[-1][0] > 2, 60,
                           "the group to settle")
                settled = len(assignments)
                os.kill(coordinator.http.proc.pid, signal.SIGSTOP)
                paused_at = time.monotonic()
                try:
                    wait_until(lambda: all(received[p] and received[p][-1] > paused_at + 6 for p in range(PARTITIONS)),
                               30, "every partition read again during the pause, past a session timeout")
                finally:
                    os.kill(coordinator.http.proc.pid, signal.SIGCONT)
                # Nobody was given new partitions: the generation carried on.
                assert assignments[settled:] == []
            producing.check_stored(config)
        finally:
            stop.set()
            for t in consumers:
                t.join()


def test_a_restarted_broker_takes_back_its_node_id_and_peer_health_names_its_process(
    config: LlogConfig, capfd: pytest.CaptureFixture[str]
) -> None:
    """Broker a is killed with SIGKILL and started again on its Kafka port while its old
    registration lingers (a 15 s lease): it is the same node in Metadata, not a third
    one, and b's peer health names the process it means: a's first process while that
    one is gone, the second (its pid) when that one pauses."""
    with Connection(config) as conn:
        Topics(conn).create(TOPIC, PARTITIONS)
    port, lease = free_port(), {"LLOG_SESSION_TTL_S": "15"}
    with kafka_broker(config, **lease) as b, ExitStack() as stack:
        a = stack.enter_context(kafka_broker(config, "--kafka-port", str(port), **lease))
        a_id, b_id = _node_id(a.bootstrap), _node_id(b.bootstrap)
        first = a.http.proc.pid
        a.http.kill()
        wait_until(lambda: b.http.metric("llog_kafka_peer_silent", node_id=str(a_id), address=a.bootstrap,
                                         pid=str(first)) == 1, 30, "b naming a's first process silent")
        again = stack.enter_context(kafka_broker(config, "--kafka-port", str(port), **lease))
        second = again.http.proc.pid
        assert _node_id(again.bootstrap) == a_id
        wait_until(lambda: b.http.metric("llog_kafka_peers_silent") == 0, 30, "b hearing from a's node again")
        host = a.bootstrap.rsplit(":", 1)[0]
        for bootstrap in (b.bootstrap, again.bootstrap):
            assert {(n.node_id, n.host, n.port) for n in _metadata(bootstrap).brokers} == {
                (a_id, host, port), (b_id, host, int(b.bootstrap.rsplit(":", 1)[1]))}
        os.kill(second, signal.SIGSTOP)
        try:
            wait_until(lambda: b.http.metric("llog_kafka_peer_silent", node_id=str(a_id), pid=str(second)) == 1,
                       30, "b naming a's second process silent")
            assert b.http.metric("llog_kafka_peers_silent") == 1
        finally:
            os.kill(second, signal.SIGCONT)
        wait_until(lambda: b.http.metric("llog_kafka_peers_silent") == 0, 30, "a's second process answering")
    err = capfd.readouterr().err  # the brokers' logs: b's peer health names a's processes
    gone, back = (f"node {a_id} ({a.bootstrap}, pid {pid} on " for pid in (first, second))
    assert re.search(f"Kafka {re.escape(gone)}[^\n]* is not answering", err), err[-4000:]
    assert re.search(f"Kafka {re.escape(back)}[^\n]* is registered by another process now: was {re.escape(gone)}",
                     err), err[-4000:]
    assert re.search(f"Kafka {re.escape(back)}[^\n]* is not answering", err), err[-4000:]


def _registered_pids(conn: Connection) -> dict[int, int]:
    """Node id -> the pid registered for it (``{root}/_brokers/nodes/``)."""
    prefix = conn.keys.brokers_prefix()
    return {int(kv.key[len(prefix):]): json.loads(kv.value)["pid"]
            for kv in conn.etcd.scan(prefix, prefix_range_end(prefix))}


def test_a_worker_started_again_keeps_its_kafka_node_id(config: LlogConfig) -> None:
    """A broker's worker killed with SIGKILL is started again on the same Kafka socket
    before its registration's lease runs out: it registers under its node id again."""
    with Connection(config) as conn, broker_process(config, "--workers", "2", "--kafka-port", "0") as b:
        wait_until(lambda: len(_registered_pids(conn)) == 2, 30, "both workers registered")
        before = _registered_pids(conn)
        victim = next(iter(before))
        os.kill(before[victim], signal.SIGKILL)
        wait_until(lambda: _registered_pids(conn).get(victim) not in (None, before[victim]), 60,
                   "the worker started again, registered")
        after = _registered_pids(conn)
        assert after.keys() == before.keys()  # its node id, not a third one
        assert b.proc.poll() is None
