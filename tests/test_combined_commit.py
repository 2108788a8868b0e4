"""The combined commit (protocol/README.md, "Commit protocol", step W2): a writer that
has every partition of a shared blob cached commits them in one etcd transaction that
keeps each partition's own mod_revision compare, so it commits all of them or none; a
conflict or an unknown outcome falls back to the one-partition-at-a-time path, which
resolves an unknown outcome by append_id (or reports `AmbiguousCommit`)."""

from __future__ import annotations

from typing import Any

import pytest

import llog
from llog import AppendGroup
from llog.errors import AmbiguousCommit, CoordinationError, Fenced
from llog.write.commit_runner import COMBINED_ATTEMPTS
from llog.writer import TXN_PARTITIONS, AppendFailure, AppendResult
from tests.conftest import PrivateEtcd


def _txns(conn: llog.Connection) -> float:
    return conn.metrics.registry.get_sample_value("llog_etcd_ops_total", {"op": "txn"}) or 0.0


def _values(conn: llog.Connection, topic: str, partition: int) -> list[tuple[int, bytes]]:
    with llog.Reader(conn) as r:
        return [(rec.offset, rec.value) for rec in r.scan(topic, partition)]


def _flush(topic: str, partitions: range, tag: str) -> list[AppendGroup]:
    return [AppendGroup(topic, p, [f"{tag}-{p}-{i}".encode() for i in range(3)]) for p in partitions]


def test_warm_writer_commits_a_shared_blob_in_one_txn(conn: llog.Connection) -> None:
    llog.Topics(conn).create("together", 8)
    with llog.Writer(conn) as w:
        w.append_shared(_flush("together", range(8), "warm"))
        before = _txns(conn)
        for n in range(5):
            outs = w.append_shared(_flush("together", range(8), f"f{n}"))
            assert [(o.start_offset, o.end_offset) for o in outs if isinstance(o, AppendResult)] == [
                (3 * (n + 1), 3 * (n + 1) + 2)
            ] * 8
        assert _txns(conn) - before == 5
    for p in range(8):
        got = _values(conn, "together", p)
        assert [o for o, _ in got] == list(range(18))
        assert [v for _, v in got][3:6] == [f"f0-{p}-{i}".encode() for i in range(3)]


def test_more_partitions_than_one_txn_holds_split_into_chunks(conn: llog.Connection) -> None:
    n = TXN_PARTITIONS + 3
    llog.Topics(conn).create("wide", n)
    with llog.Writer(conn) as w:
        w.append_shared(_flush("wide", range(n), "warm"))
        before = _txns(conn)
        outs = w.append_shared(_flush("wide", range(n), "next"))
        assert all(isinstance(o, AppendResult) and o.start_offset == 3 for o in outs)
        assert _txns(conn) - before == 2
    assert all(len(_values(conn, "wide", p)) == 6 for p in range(n))


def test_a_conflict_on_one_partition_is_retried_combined_and_commits_every_group(conn: llog.Connection) -> None:
    llog.Topics(conn).create("clash", 4)
    with llog.Writer(conn) as a, llog.Writer(conn) as b:
        a.append_shared(_flush("clash", range(4), "a0"))
        b.append(("clash"), 2, [b"b-only"])  # partition 2 moves on behind a's cache
        before = _txns(conn)
        outs = a.append_shared(_flush("clash", range(4), "a1"))
        # The lost transaction's failure reads refreshed a's cache: one more combined
        # transaction, not one per partition.
        assert _txns(conn) - before == 2
    starts = [o.start_offset for o in outs if isinstance(o, AppendResult)]
    assert starts == [3, 3, 4, 3]
    assert [v for _, v in _values(conn, "clash", 2)] == [
        b"a0-2-0", b"a0-2-1", b"a0-2-2", b"b-only", b"a1-2-0", b"a1-2-1", b"a1-2-2"
    ]
    for p in (0, 1, 3):
        assert [o for o, _ in _values(conn, "clash", p)] == list(range(6))


def test_a_partition_that_keeps_moving_goes_one_by_one_after_the_combined_attempts(conn: llog.Connection) -> None:
    llog.Topics(conn).create("race", 3)
    with llog.Writer(conn) as a, llog.Writer(conn) as b:
        a.append_shared(_flush("race", range(3), "a0"))
        plan = a._runner._plan_cached  # another writer appends before each combined attempt
        attempts = []

        def racing_plan(staged: Any, order: list[int]) -> Any:
            attempts.append(len(order))
            b.append("race", 1, [f"b{len(attempts)}".encode()])
            return plan(staged, order)

        a._runner._plan_cached = racing_plan  # type: ignore[method-assign]
        outs = a.append_shared(_flush("race", range(3), "a1"))
    assert len(attempts) == COMBINED_ATTEMPTS
    assert all(isinstance(o, AppendResult) for o in outs)
    assert [v for _, v in _values(conn, "race", 1)][3:] == [b"b1", b"b2", b"b3", b"a1-1-0", b"a1-1-1", b"a1-1-2"]
    for p in (0, 2):
        assert [o for o, _ in _values(conn, "race", p)] == list(range(6))


def test_a_partition_fenced_behind_the_cache_fails_alone(conn: llog.Connection) -> None:
    llog.Topics(conn).create("fence", 3)
    with llog.Writer(conn) as w:
        w.append_shared(_flush("fence", range(3), "a"))
        llog.Topics(conn).fence("fence", 1)
        outs = w.append_shared(_flush("fence", range(3), "b"))
    assert isinstance(outs[1], AppendFailure) and isinstance(outs[1].error, Fenced)
    assert [isinstance(o, AppendResult) for o in outs] == [True, False, True]
    assert len(_values(conn, "fence", 1)) == 3
    assert len(_values(conn, "fence", 0)) == len(_values(conn, "fence", 2)) == 6


def test_unknown_outcome_of_the_combined_txn_is_ambiguous_for_every_group(
    config: llog.LlogConfig, private_etcd: PrivateEtcd
) -> None:
    with llog.Connection(private_etcd.config(config)) as c:
        llog.Topics(c).create("amb", 3)
        with llog.Writer(c, fault_hook=private_etcd) as w:
            w.append_shared(_flush("amb", range(3), "w"))
            private_etcd.armed = True
            outs = w.append_shared(_flush("amb", range(3), "x"))
            # The writer cannot know whether the txn reached etcd: each group says so.
            assert [type(getattr(o, "error", o)) for o in outs] == [AmbiguousCommit] * 3
            blob_id = private_etcd.put[0].rsplit("/", 1)[1]
            assert all(blob_id in str(o.error) for o in outs if isinstance(o, AppendFailure))
            private_etcd.restart()
            # Nothing of the failed blob committed; the same writer carries on cleanly.
            again = w.append_shared(_flush("amb", range(3), "y"))
            assert [o.start_offset for o in again if isinstance(o, AppendResult)] == [3, 3, 3]
        for p in range(3):
            assert [v for _, v in _values(c, "amb", p)] == [
                f"{t}-{p}-{i}".encode() for t in ("w", "y") for i in range(3)
            ]


def test_lost_reply_of_a_committed_combined_txn_is_found_by_append_id(
    conn: llog.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The transaction commits in the real etcd, then its reply is lost: every group
    finds its own pending by append_id and is acknowledged once, nothing appended twice."""
    llog.Topics(conn).create("lost", 3)
    real_txn = conn.etcd.txn
    lose = [False]

    def txn(*args: Any, **kw: Any) -> Any:
        result = real_txn(*args, **kw)
        if lose[0]:
            lose[0] = False
            raise CoordinationError("etcd txn failed: reply lost (injected)")
        return result

    monkeypatch.setattr(conn.etcd, "txn", txn)
    with llog.Writer(conn) as w:
        w.append_shared(_flush("lost", range(3), "w"))
        lose[0] = True
        outs = w.append_shared(_flush("lost", range(3), "x"))
        assert [o.start_offset for o in outs if isinstance(o, AppendResult)] == [3, 3, 3]
        assert not lose[0]  # the fault fired on the combined txn
    for p in range(3):
        got = _values(conn, "lost", p)
        assert [o for o, _ in got] == list(range(6))
        assert [v for _, v in got] == [f"{t}-{p}-{i}".encode() for t in ("w", "x") for i in range(3)]
