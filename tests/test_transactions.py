"""Transactions (protocol/README.md §15) with real Kafka clients and raw requests, on the
suite's etcd and S3 servers: committed transactions visible whole and in order, aborted
ones never, zombies fenced, retries of every step answered as Kafka does, and the
staged blobs kept by vacuum until their transaction ends."""

from __future__ import annotations

import socket
import time
from dataclasses import replace
from typing import Any

import pytest
from kafka.protocol.consumer import OffsetFetchRequest, OffsetFetchResponse
from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse
from kafka.protocol.producer.transaction import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)

from compactor.vacuum import vacuum
from llog.codec.etcd_values.transaction import COMPLETE_ABORT, COMPLETE_COMMIT, ONGOING
from llog.config import LlogConfig
from llog.connection import Connection
from llog.errors import CoordinationError, TransactionFenced, UnknownTransactionalId
from llog.reader import Reader
from llog.records import AppendGroup
from llog.topic.admin import Topics
from llog.txn.coordinator import Coordinator
from llog.txn.expiry import TxnExpiry
from llog.txn.records import TxnRecords
from llog.txn.staging import stage
from llog.writer import Writer
from tests import java_client
from tests.conftest import wait_until
from tests.kafka_crafted import plain_batch
from tests.test_kafka import _exchange, kafka_broker
from tests.test_kafka_edge import _produce

confluent_kafka = pytest.importorskip("confluent_kafka")

TOPIC = "txn"


@pytest.fixture(name="txn_conn")
def txn_conn_fixture(conn: Connection) -> Connection:
    Topics(conn).create(TOPIC, 3)
    return conn


def _values(conn: Connection, partition: int) -> list[bytes]:
    return [r.value or b"" for r in Reader(conn).scan(TOPIC, partition)]


def _consume(bootstrap: str, isolation: str, n: int) -> dict[int, list[bytes]]:
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{isolation}",
                                  "isolation.level": isolation, "enable.auto.commit": False,
                                  "auto.offset.reset": "earliest"})
    c.assign([confluent_kafka.TopicPartition(TOPIC, p, 0) for p in range(3)])
    got: dict[int, list[bytes]] = {0: [], 1: [], 2: []}
    deadline = time.monotonic() + 120
    try:
        while sum(map(len, got.values())) < n and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                got[m.partition()].append(m.value())
    finally:
        c.close()
    return got


def test_confluent_kafka_read_committed_sees_exactly_the_committed_transactions(
    config: LlogConfig, txn_conn: Connection
) -> None:
    with kafka_broker(config) as kb:
        p = confluent_kafka.Producer({"bootstrap.servers": kb.bootstrap, "transactional.id": "tx-1",
                                      "linger.ms": 1})
        p.init_transactions(30)
        for i in range(1000):
            p.begin_transaction()
            for j in range(10):
                p.produce(TOPIC, value=b"%d-%d" % (i, j), partition=j % 3)
            if i % 2 == 0:
                p.commit_transaction(30)
            else:
                p.flush(30)  # staged on the broker: the abort has something to discard
                p.abort_transaction(30)
        want = {part: [b"%d-%d" % (i, j) for i in range(0, 1000, 2) for j in range(10) if j % 3 == part]
                for part in range(3)}
        # read_committed: exactly the committed transactions' records, in order.
        assert _consume(kb.bootstrap, "read_committed", 5000) == want
        # read_uncommitted reads the same: aborted records never enter a log (§15.3).
        assert _consume(kb.bootstrap, "read_uncommitted", 5000) == want
        assert {part: _values(txn_conn, part) for part in range(3)} == want
        assert kb.http.metric("llog_transactions_total", outcome="commit") == 500
        assert kb.http.metric("llog_transactions_total", outcome="abort") == 500


def test_a_zombie_producer_is_fenced_and_its_transaction_never_visible(
    config: LlogConfig, txn_conn: Connection
) -> None:
    with kafka_broker(config) as kb:
        settings = {"bootstrap.servers": kb.bootstrap, "transactional.id": "tx-z", "linger.ms": 1}
        old = confluent_kafka.Producer(settings)
        old.init_transactions(30)
        old.begin_transaction()
        old.produce(TOPIC, value=b"zombie", partition=0)
        old.flush(30)  # staged, not committed
        new = confluent_kafka.Producer(settings)
        new.init_transactions(30)  # aborts the old instance's transaction, fences its epoch
        new.begin_transaction()
        new.produce(TOPIC, value=b"new", partition=0)
        new.commit_transaction(30)
        with pytest.raises(confluent_kafka.KafkaException) as err:
            old.produce(TOPIC, value=b"late", partition=0)
            old.commit_transaction(30)
        assert err.value.args[0].fatal() or err.value.args[0].code() in (
            confluent_kafka.KafkaError._FENCED, confluent_kafka.KafkaError.PRODUCER_FENCED,
            confluent_kafka.KafkaError.INVALID_PRODUCER_EPOCH), err.value.args[0]
        assert _values(txn_conn, 0) == [b"new"]
        assert kb.http.metric("llog_transactions_total", outcome="fenced") == 1


def _init(bootstrap: str, txn: str, pid: int = -1, epoch: int = -1, timeout_ms: int = 60000) -> tuple[int, int, int]:
    got = _exchange(bootstrap, InitProducerIdRequest[4](transactional_id=txn, transaction_timeout_ms=timeout_ms,
                                                        producer_id=pid, producer_epoch=epoch), InitProducerIdResponse)
    return int(got.error_code), int(got.producer_id), int(got.producer_epoch)


def _add(bootstrap: str, txn: str, pid: int, epoch: int, partitions: list[int], topic: str = TOPIC) -> list[int]:
    R = AddPartitionsToTxnRequest[3]
    got = _exchange(bootstrap, R(v3_and_below_transactional_id=txn, v3_and_below_producer_id=pid,
                                 v3_and_below_producer_epoch=epoch, v3_and_below_topics=[
                                     R.AddPartitionsToTxnTopic(name=topic, partitions=partitions)]),
                    AddPartitionsToTxnResponse)
    return [int(r.partition_error_code) for t in got.results_by_topic_v3_and_below for r in t.results_by_partition]


def _end(bootstrap: str, txn: str, pid: int, epoch: int, commit: bool) -> int:
    got = _exchange(bootstrap, EndTxnRequest[3](transactional_id=txn, producer_id=pid, producer_epoch=epoch,
                                                committed=commit), EndTxnResponse)
    return int(got.error_code)


def _txn_batch(values: list[bytes], pid: int, epoch: int, seq: int) -> bytes:
    return plain_batch(values, producer=(pid, epoch, seq), transactional=True)


def test_each_step_is_checked_and_retries_are_answered_as_kafka_does(config: LlogConfig, txn_conn: Connection) -> None:
    with kafka_broker(config) as kb:
        bs = kb.bootstrap
        code, pid, epoch = _init(bs, "tx-raw")
        assert (code, epoch) == (0, 0)
        assert _init(bs, "tx-bad", timeout_ms=10**9)[0] == 50  # INVALID_TRANSACTION_TIMEOUT
        # A batch for a partition not added to the transaction is never staged.
        assert _produce(bs, 0, _txn_batch([b"early"], pid, epoch, 0), topic=TOPIC, txn="tx-raw")[0] == 48
        assert _add(bs, "tx-raw", pid, epoch, [0, 7]) == [55, 3]  # OPERATION_NOT_ATTEMPTED, UNKNOWN_TOPIC...
        assert _add(bs, "tx-raw", pid, epoch, [0, 1]) == [0, 0]
        assert _add(bs, "tx-raw", pid + 1, epoch, [0]) == [49]  # INVALID_PRODUCER_ID_MAPPING
        assert _add(bs, "tx-raw", pid, epoch + 1, [0]) == [90]  # PRODUCER_FENCED
        # Staged: answered without an offset, and nothing visible yet.
        assert _produce(bs, 0, _txn_batch([b"a", b"b"], pid, epoch, 0), topic=TOPIC, txn="tx-raw") == (0, -1)
        assert _produce(bs, 1, _txn_batch([b"c"], pid, epoch, 0), topic=TOPIC, txn="tx-raw") == (0, -1)
        assert _produce(bs, 0, _txn_batch([b"a", b"b"], pid, epoch, 0), topic=TOPIC, txn="tx-raw") == (0, -1)  # a retry
        assert _produce(bs, 0, _txn_batch([b"X"], pid, epoch, 0), topic=TOPIC, txn="tx-raw")[0] == 45  # reused sequence
        assert _produce(bs, 0, _txn_batch([b"gap"], pid, epoch, 9), topic=TOPIC, txn="tx-raw")[0] == 45
        assert _values(txn_conn, 0) == [] and _values(txn_conn, 1) == []
        record = TxnRecords(txn_conn).read("tx-raw").record
        assert record is not None and record.state == ONGOING and len(record.staged) == 2
        # Commit: everything at once; a retried commit succeeds, an abort now is refused.
        assert _end(bs, "tx-raw", pid, epoch, True) == 0
        assert _values(txn_conn, 0) == [b"a", b"b"] and _values(txn_conn, 1) == [b"c"]
        assert _end(bs, "tx-raw", pid, epoch, True) == 0
        assert _end(bs, "tx-raw", pid, epoch, False) == 48
        # A late batch of the ended transaction is refused, even once the partition is
        # added to the next one only if its sequence is the next.
        assert _produce(bs, 0, _txn_batch([b"late"], pid, epoch, 2), topic=TOPIC, txn="tx-raw")[0] == 48
        assert _add(bs, "tx-raw", pid, epoch, [0]) == [0]
        # The first batch again: a retry, answered as staged, not staged twice.
        assert _produce(bs, 0, _txn_batch([b"a", b"b"], pid, epoch, 0), topic=TOPIC, txn="tx-raw") == (0, -1)
        assert _produce(bs, 0, _txn_batch([b"d"], pid, epoch, 2), topic=TOPIC, txn="tx-raw") == (0, -1)
        assert _end(bs, "tx-raw", pid, epoch, False) == 0
        assert _end(bs, "tx-raw", pid, epoch, False) == 0
        assert _values(txn_conn, 0) == [b"a", b"b"]
        rec = TxnRecords(txn_conn).read("tx-raw").record
        assert rec is not None and rec.state == COMPLETE_ABORT and rec.staged == ()
        # A new instance: the epoch bumps, the old one is fenced everywhere.
        assert _init(bs, "tx-raw") == (0, pid, epoch + 1)
        assert _end(bs, "tx-raw", pid, epoch, True) == 90  # EndTxn v3: PRODUCER_FENCED (KIP-588)
        assert _exchange(bs, EndTxnRequest[1](transactional_id="tx-raw", producer_id=pid, producer_epoch=epoch,
                                              committed=True), EndTxnResponse).error_code == 47  # before it
        assert _produce(bs, 0, _txn_batch([b"z"], pid, epoch, 3), topic=TOPIC, txn="tx-raw")[0] == 47


def _send_and_close(bootstrap: str, req: Any) -> None:
    """A request its client gives up on at once: sent, then the connection closed."""
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as s:
        req.with_header(correlation_id=9, client_id="test")
        s.sendall(req.encode(header=True, framed=True))


def test_a_late_end_never_commits_the_next_transaction_half_sent(config: LlogConfig, txn_conn: Connection) -> None:
    """An EndTxn(commit) of the previous transaction, held back (a paused broker, a
    partition) until the producer's next transaction has begun, must not commit that
    one with some of its batches still on the way (the nemesis found it)."""
    records = TxnRecords(txn_conn)
    with kafka_broker(config) as kb:
        bs = kb.bootstrap
        _, pid, epoch = _init(bs, "tx-late")
        assert _add(bs, "tx-late", pid, epoch, [0, 1]) == [0, 0]
        assert _produce(bs, 0, _txn_batch([b"a"], pid, epoch, 0), topic=TOPIC, txn="tx-late") == (0, -1)
        # Partition 1 was added and has nothing staged: the end cannot be this transaction's.
        assert _end(bs, "tx-late", pid, epoch, True) == 48  # INVALID_TXN_STATE, nothing committed
        assert kb.http.metric("llog_transactions_total", outcome="late_end") == 1
        assert _produce(bs, 1, _txn_batch([b"b"], pid, epoch, 0), topic=TOPIC, txn="tx-late") == (0, -1)
        # An end on a connection its client closed (it timed the request out and sent it
        # again elsewhere) is not applied either.
        _send_and_close(bs, EndTxnRequest[3](transactional_id="tx-late", producer_id=pid, producer_epoch=epoch,
                                             committed=True))
        wait_until(lambda: kb.http.metric("llog_transactions_total", outcome="late_end") == 2, 30,
                   "the abandoned end refused")
        record = records.read("tx-late").record
        assert record is not None and record.state == ONGOING
        assert _values(txn_conn, 0) == [] and _values(txn_conn, 1) == []
        assert _end(bs, "tx-late", pid, epoch, True) == 0
        assert _values(txn_conn, 0) == [b"a"] and _values(txn_conn, 1) == [b"b"]


def test_vacuum_keeps_a_staged_blob_until_its_transaction_ends(config: LlogConfig, txn_conn: Connection) -> None:
    records = TxnRecords(txn_conn)
    with kafka_broker(config) as kb:
        bs = kb.bootstrap
        _, pid, epoch = _init(bs, "tx-v")
        _, wpid, wepoch = _init(bs, "tx-w")
        assert _add(bs, "tx-v", pid, epoch, [2]) == [0] and _add(bs, "tx-w", wpid, wepoch, [2]) == [0]
        assert _produce(bs, 2, _txn_batch([b"kept"], pid, epoch, 0), topic=TOPIC, txn="tx-v") == (0, -1)
        assert _produce(bs, 2, _txn_batch([b"gone"], wpid, wepoch, 0), topic=TOPIC, txn="tx-w") == (0, -1)
        [kept] = [a.data_key for a in records.read("tx-v").record.staged]  # type: ignore[union-attr]
        [gone] = [a.data_key for a in records.read("tx-w").record.staged]  # type: ignore[union-attr]
        assert _end(bs, "tx-w", wpid, wepoch, False) == 0
    # The broker is gone, and with it the session both blobs were PUT under.
    assert not txn_conn.etcd.range(txn_conn.keys.sessions_prefix(), txn_conn.keys.sessions_prefix() + "~")
    report = vacuum(txn_conn)
    assert gone in report.deleted and kept not in report.deleted
    coordinator = Coordinator(txn_conn)
    try:
        coordinator.end("tx-v", pid, epoch, True)
    finally:
        coordinator.close()
    assert _values(txn_conn, 2) == [b"kept"]


def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced(
    config: LlogConfig, txn_conn: Connection
) -> None:
    conn = Connection(replace(config, txn_id_ttl_s=10))
    coordinator = Coordinator(conn)
    try:
        pid, epoch = coordinator.init_producer("tx-t", 1000)
        coordinator.add_partitions("tx-t", pid, epoch, [(TOPIC, 0)])
        expiry = TxnExpiry(coordinator, 3600)
        assert expiry.sweep(now=100.0) == []  # first seen: its age starts now, whatever any clock says
        assert expiry.sweep(now=100.5) == []
        assert expiry.sweep(now=101.0) == ["tx-t"]
        r = coordinator.describe("tx-t")
        assert (r.state, r.epoch) == (COMPLETE_ABORT, epoch + 1)
        with pytest.raises(TransactionFenced, match="not the current epoch"):
            coordinator.end("tx-t", pid, epoch, True)
        assert coordinator.describe("tx-t").state != COMPLETE_COMMIT
        # Idle for LLOG_TXN_ID_TTL_S on the sweeping process's clock: the id is forgotten.
        assert expiry.sweep(now=200.0) == [] and expiry.sweep(now=209.0) == []
        coordinator.describe("tx-t")
        expiry.sweep(now=210.0)
        with pytest.raises(UnknownTransactionalId):
            coordinator.describe("tx-t")
    finally:
        coordinator.close()
        conn.close()


def test_java_client_read_committed_sees_exactly_the_committed_transactions(
    config: LlogConfig, txn_conn: Connection
) -> None:
    with kafka_broker(config) as kb:
        out = java_client.run("transactions", kb.bootstrap, TOPIC, "1000", "java-tx", timeout=300)
        reads = [line.split()[1:] for line in out if line.startswith("read ")]
        got = {part: [v.encode() for p, v in reads if int(p) == part] for part in range(3)}
        want = {part: [b"%d-%d" % (i, j) for i in range(0, 1000, 2) for j in range(10) if j % 3 == part]
                for part in range(3)}
        assert got == want
        assert [line for line in out if line.startswith("zombie")] in (
            ["zombie fenced ProducerFencedException"], ["zombie fenced InvalidProducerEpochException"]), out
        assert _values(txn_conn, 0)[-1] == b"fresh" and b"zombie" not in _values(txn_conn, 0)
        assert kb.http.metric("llog_transactions_total", outcome="commit") == 501


def test_a_commit_over_the_op_budget_folds_its_batches_into_one_body(config: LlogConfig, txn_conn: Connection) -> None:
    # With a budget of 4 ops, 4 batches on partition 0 (3 index puts, the control, the
    # record: 5 ops) are folded into one body first (2 ops).
    with kafka_broker(config, LLOG_TXN_MAX_OPS="4") as kb:
        bs = kb.bootstrap
        _, pid, epoch = _init(bs, "tx-f")
        assert _add(bs, "tx-f", pid, epoch, [0]) == [0]
        for s in range(4):
            assert _produce(bs, 0, _txn_batch([b"f%d" % s], pid, epoch, s), topic=TOPIC, txn="tx-f") == (0, -1)
        assert _end(bs, "tx-f", pid, epoch, True) == 0
        assert _values(txn_conn, 0) == [b"f0", b"f1", b"f2", b"f3"]
        assert kb.http.metric("llog_transaction_folds_total") == 1
        # Over the budget even folded (three partitions need 3 control puts, 3
        # materializations and the record): aborted, INVALID_TXN_STATE, nothing visible.
        assert _add(bs, "tx-f", pid, epoch, [0, 1, 2]) == [0, 0, 0]
        for p in range(3):
            assert _produce(bs, p, _txn_batch([b"big"], pid, epoch, 4 if p == 0 else 0), topic=TOPIC,
                            txn="tx-f") == (0, -1)
        assert _end(bs, "tx-f", pid, epoch, True) == 48
        assert TxnRecords(txn_conn).read("tx-f").record.state == COMPLETE_ABORT  # type: ignore[union-attr]
        assert b"big" not in _values(txn_conn, 0) + _values(txn_conn, 1) + _values(txn_conn, 2)


def test_a_commit_whose_answer_is_lost_is_found_committed_not_applied_twice(
    txn_conn: Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    coordinator = Coordinator(txn_conn)
    try:
        pid, epoch = coordinator.init_producer("tx-u", 60_000)
        coordinator.add_partitions("tx-u", pid, epoch, [(TOPIC, 1)])
        with Writer(txn_conn) as w:
            blob = w.stage_shared([AppendGroup(TOPIC, 1, [b"once"], producer_id=f"kafka.{pid}", sequence=0,
                                               producer_epoch=epoch)])
            try:
                [staged] = stage(txn_conn, "tx-u", pid, epoch, blob)
            finally:
                w.release_staged(blob)
        assert not isinstance(staged, Exception)
        real = txn_conn.etcd.txn
        lost: list[object] = []

        def applied_then_lost(*args: object, **kw: object) -> object:
            got = real(*args, **kw)  # type: ignore[arg-type]
            if not lost:
                lost.append(got)
                raise CoordinationError("the answer was lost")
            return got

        monkeypatch.setattr(txn_conn.etcd, "txn", applied_then_lost)
        coordinator.end("tx-u", pid, epoch, True)
        assert lost and getattr(lost[0], "succeeded", False)
        assert _values(txn_conn, 1) == [b"once"]
        assert coordinator.describe("tx-u").state == COMPLETE_COMMIT
    finally:
        coordinator.close()


def test_kafka_transactions_tool_lists_and_describes(config: LlogConfig, txn_conn: Connection) -> None:
    with kafka_broker(config) as kb:
        bs = kb.bootstrap
        _, pid, epoch = _init(bs, "tx-tool")
        assert _add(bs, "tx-tool", pid, epoch, [1]) == [0]
        listed = java_client.tool("org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", bs, "list")
        assert any("tx-tool" in line and "Ongoing" in line for line in listed.splitlines()), listed
        described = java_client.tool("org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", bs,
                                     "describe", "--transactional-id", "tx-tool")
        assert "tx-tool" in described and "Ongoing" in described and f"{TOPIC}-1" in described, described
        assert _end(bs, "tx-tool", pid, epoch, False) == 0
        described = java_client.tool("org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", bs,
                                     "describe", "--transactional-id", "tx-tool")
        assert "CompleteAbort" in described, described


def _offset_fetch(bootstrap: str, group: str, stable: bool) -> tuple[int, int]:
    R = OffsetFetchRequest[7]
    got = _exchange(bootstrap, R(group_id=group, topics=[R.OffsetFetchRequestTopic(name=TOPIC, partition_indexes=[0])],
                                 require_stable=stable), OffsetFetchResponse)
    [p] = got.topics[0].partitions
    return int(p.error_code), int(p.committed_offset)


def test_offsets_staged_in_a_transaction_are_unstable_until_it_ends(config: LlogConfig, txn_conn: Connection) -> None:
    with kafka_broker(config) as kb:
        bs = kb.bootstrap
        _, pid, epoch = _init(bs, "tx-o")
        got = _exchange(bs, AddOffsetsToTxnRequest[3](transactional_id="tx-o", producer_id=pid, producer_epoch=epoch,
                                                      group_id="g-o"), AddOffsetsToTxnResponse)
        assert got.error_code == 0
        R = TxnOffsetCommitRequest[3]
        req = R(transactional_id="tx-o", group_id="g-o", producer_id=pid, producer_epoch=epoch, generation_id=-1,
                member_id="", group_instance_id=None, topics=[R.TxnOffsetCommitRequestTopic(name=TOPIC, partitions=[
                    R.TxnOffsetCommitRequestTopic.TxnOffsetCommitRequestPartition(
                        partition_index=0, committed_offset=0, committed_leader_epoch=-1, committed_metadata="")])])
        [t] = _exchange(bs, req, TxnOffsetCommitResponse).topics
        assert t.partitions[0].error_code == 0
        assert _offset_fetch(bs, "g-o", stable=True) == (88, -1)  # UNSTABLE_OFFSET_COMMIT
        assert _offset_fetch(bs, "g-o", stable=False) == (0, -1)  # what is committed: nothing yet
        assert _end(bs, "tx-o", pid, epoch, True) == 0
        assert _offset_fetch(bs, "g-o", stable=True) == (0, 0)
        assert not txn_conn.etcd.range(txn_conn.keys.group_transactions_prefix("g-o"),
                                       txn_conn.keys.group_transactions_prefix("g-o") + "~")
