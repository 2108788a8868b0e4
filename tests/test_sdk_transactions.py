"""The SDK's transactions (``llog.Transaction``, protocol/README.md §15) on the suite's
etcd and S3 servers: appends to several partitions and a group's offsets visible all at
once or never, zombies fenced, and the exactly-once consume-transform-produce loop with
the ``Consumer`` through aborts, crashes and a lost member session."""

from __future__ import annotations

import random

import pytest

import llog
from llog.codec.etcd_values.transaction import COMPLETE_ABORT, COMPLETE_COMMIT, ONGOING
from llog.connection import Connection
from llog.errors import InvalidInput, NotAssigned, TransactionFenced, UnknownTopic
from llog.groups.consumer import Consumer
from llog.groups.offsets import GroupOffsets
from llog.reader import Reader
from llog.topic.admin import Topics
from llog.txn.records import TxnRecords
from llog.writer import Writer


@pytest.fixture(name="topics")
def topics_fixture(conn: Connection) -> Connection:
    t = Topics(conn)
    t.create("in", 3)
    t.create("out", 3)
    t.create("audit", 1)
    return conn


def _values(conn: Connection, topic: str, partition: int) -> list[bytes]:
    return [r.value or b"" for r in Reader(conn).scan(topic, partition)]


def test_appends_and_offsets_become_visible_together(topics: Connection) -> None:
    conn = topics
    with Writer(conn) as w:
        w.append("in", 0, [b"a", b"b", b"c"])
    with Consumer(conn, "etl", ["in"], exclusive=True, transactional=True) as c, \
            llog.Transaction(conn, "t1") as txn:
        assert [r.value for r in c.poll(timeout_s=0)] == [b"a", b"b", b"c"]
        txn.append("out", 1, [b"A", b"B"])
        txn.append_shared([("out", 2, [b"C"]), ("audit", 0, [b"3 records"])])
        txn.commit_offsets(c)
        assert TxnRecords(conn).read("t1").record.state == ONGOING  # type: ignore[union-attr]
        # Staged, not visible: no reader sees it, the offset is not committed.
        assert _values(conn, "out", 1) == [] and _values(conn, "audit", 0) == []
        assert GroupOffsets(conn, "etl").get("in", 0) is None
        txn.commit()
    assert _values(conn, "out", 1) == [b"A", b"B"] and _values(conn, "out", 2) == [b"C"]
    assert _values(conn, "audit", 0) == [b"3 records"]
    committed = GroupOffsets(conn, "etl").get("in", 0)
    assert committed is not None and committed.offset == 3
    assert TxnRecords(conn).read("t1").record.state == COMPLETE_COMMIT  # type: ignore[union-attr]


def test_an_aborted_transaction_is_never_visible_and_its_input_is_delivered_again(topics: Connection) -> None:
    conn = topics
    with Writer(conn) as w:
        w.append("in", 0, [b"x", b"y"])
    with Consumer(conn, "etl", ["in"], exclusive=True, transactional=True) as c, \
            llog.Transaction(conn, "t1") as txn:
        assert [r.value for r in c.poll(timeout_s=0)] == [b"x", b"y"]
        txn.append("out", 0, [b"X", b"Y"])
        txn.commit_offsets(c)
        txn.abort()
        assert TxnRecords(conn).read("t1").record.state == COMPLETE_ABORT  # type: ignore[union-attr]
        assert [r.value for r in c.poll(timeout_s=0)] == [b"x", b"y"]  # rewound to the committed offset
        txn.append("out", 0, [b"X2"])
        txn.commit()  # an offset-less transaction: the input stays uncommitted
    assert _values(conn, "out", 0) == [b"X2"]
    assert GroupOffsets(conn, "etl").get("in", 0) is None


def test_leaving_the_block_aborts_what_was_not_committed(topics: Connection) -> None:
    conn = topics
    with pytest.raises(RuntimeError), llog.Transaction(conn, "t1") as txn:
        txn.append("out", 0, [b"half"])
        raise RuntimeError("the application failed mid-transaction")
    assert TxnRecords(conn).read("t1").record.state == COMPLETE_ABORT  # type: ignore[union-attr]
    assert _values(conn, "out", 0) == []


def test_a_newer_instance_fences_the_zombie_and_aborts_its_transaction(topics: Connection) -> None:
    conn = topics
    zombie = llog.Transaction(conn, "t1")
    try:
        zombie.append("out", 0, [b"zombie"])
        with llog.Transaction(conn, "t1") as fresh:  # InitProducerId: the zombie's transaction aborted
            assert fresh.epoch == zombie.epoch + 1
            with pytest.raises(TransactionFenced):
                zombie.commit()
            with pytest.raises(TransactionFenced):
                zombie.append("out", 0, [b"zombie again"])
            fresh.append("out", 0, [b"fresh"])
            fresh.commit()
    finally:
        zombie.close()
    assert _values(conn, "out", 0) == [b"fresh"]


def test_bad_input_is_refused_and_changes_nothing(topics: Connection) -> None:
    conn = topics
    with llog.Transaction(conn, "t1") as txn:
        with pytest.raises(UnknownTopic):
            txn.append("nope", 0, [b"x"])
        with pytest.raises(InvalidInput):
            txn.append("out", 0, [])
        assert not txn.ongoing
        assert TxnRecords(conn).read("t1").record.state != ONGOING  # type: ignore[union-attr]
        with Consumer(conn, "plain", ["in"], exclusive=True) as c, pytest.raises(InvalidInput):
            txn.commit_offsets(c)
    with pytest.raises(InvalidInput):
        llog.Transaction(conn, "")
    with pytest.raises(InvalidInput), Consumer(conn, "g", ["in"], transactional=True, auto_commit_interval_s=1):
        pass


def test_a_member_whose_session_ended_cannot_commit_its_transaction(topics: Connection) -> None:
    """The staged offsets carry the member session's ownership; the commit compares it."""
    conn = topics
    with Writer(conn) as w:
        w.append("in", 0, [b"r"])
    with Consumer(conn, "etl", ["in"], transactional=True) as c, llog.Transaction(conn, "t1") as txn:
        assert [r.value for r in c.poll(timeout_s=0)] == [b"r"]
        txn.append("out", 0, [b"R"])
        txn.commit_offsets(c)
        assert c.membership is not None
        conn.etcd.revoke_lease(c.membership.lease)  # the session expires: its ownerships go
        with pytest.raises(NotAssigned):
            txn.commit()
        assert TxnRecords(conn).read("t1").record.state == COMPLETE_ABORT  # type: ignore[union-attr]
        assert not txn.ongoing
    assert _values(conn, "out", 0) == []
    assert GroupOffsets(conn, "etl").get("in", 0) is None


def test_a_newer_exclusive_consumer_fences_the_transaction_of_the_older(topics: Connection) -> None:
    conn = topics
    with Writer(conn) as w:
        w.append("in", 1, [b"r"])
    with Consumer(conn, "etl", ["in"], exclusive=True, transactional=True) as old, \
            llog.Transaction(conn, "t1") as txn:
        old.poll(timeout_s=0)
        txn.append("out", 1, [b"R"])
        txn.commit_offsets(old)
        with Consumer(conn, "etl", ["in"], exclusive=True, transactional=True), pytest.raises(TransactionFenced):
            txn.commit()
    assert _values(conn, "out", 1) == []


def _run_loop(conn: Connection, rng: random.Random, budget: int) -> bool:
    """One instance of the loop: consume ``in``, write each record to ``out`` and
    ``audit``, commit the input offsets with them; abort some transactions and stop
    ("crash") part way through others. Whether the input was all committed."""
    with Consumer(conn, "etl", ["in"], transactional=True) as c, llog.Transaction(conn, "etl-1") as txn:
        for _ in range(budget):
            recs = c.poll(max_records=rng.randint(1, 40), timeout_s=0)
            if not recs:
                return True
            for r in recs:
                txn.append_shared([("out", r.partition, [b"o" + (r.value or b"")]),
                                   ("audit", 0, [b"a" + (r.value or b"")])])
            txn.commit_offsets(c)
            roll = rng.random()
            if roll < 0.25:
                txn.abort()
            elif roll < 0.35:  # a crash: the next instance's InitProducerId aborts what is staged
                txn.close(abort=False)
                assert TxnRecords(conn).read("etl-1").record.state == ONGOING  # type: ignore[union-attr]
                return False
            else:
                txn.commit()
    return False


def test_the_consume_transform_produce_loop_is_exactly_once_through_aborts_and_crashes(
    topics: Connection,
) -> None:
    conn = topics
    sent = {p: [f"{p}-{i}".encode() for i in range(60)] for p in range(3)}
    with Writer(conn) as w:
        for p, values in sent.items():
            w.append("in", p, values)
    rng = random.Random(7)
    instances = 0
    while not _run_loop(conn, rng, budget=8):
        instances += 1
        assert instances < 200
    assert instances > 0
    for p, values in sent.items():
        assert _values(conn, "out", p) == [b"o" + v for v in values]  # each once, in order
    audit = _values(conn, "audit", 0)
    assert sorted(audit) == sorted(b"a" + v for vs in sent.values() for v in vs)
    assert all(c.offset == 60 for c in GroupOffsets(conn, "etl").all())
