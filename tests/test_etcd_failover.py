"""etcd clients that fail over, against a real cluster of three members, one of them
paused with SIGSTOP (its sockets stay open, nothing answers: what a paused process or a
partition looks like to a client): reads, lease calls and writes move to the other
members; a write whose attempt timed out on the paused member is an unknown outcome,
never sent again, and its compare keeps it from landing twice when the member comes
back; watches move too, missing nothing; a writer keeps appending contiguous offsets."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest

import llog
from llog.devstack import EtcdServer, etcd_cluster
from llog.errors import CoordinationError
from llog.etcd.client import Etcd
from llog.etcd.operations import KV, Put, absent
from llog.groups import GroupOffsets
from tests.conftest import wait_until

# Processes paused past session timeouts: the timing is the test, so it runs alone.
pytestmark = pytest.mark.alone


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[EtcdServer]]:
    members = etcd_cluster(Path(tmp_path_factory.mktemp("etcd3")), 3)
    try:
        for m in members:
            m.wait_ready()
        yield members
    finally:
        for m in members:
            os.kill(m.proc.pid, signal.SIGCONT)
            m.stop()


@contextmanager
def paused(member: EtcdServer) -> Iterator[None]:
    os.kill(member.proc.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(member.proc.pid, signal.SIGCONT)


def _client(cluster: list[EtcdServer]) -> Etcd:
    """A client that prefers the first member (its first endpoint)."""
    return Etcd([m.endpoint for m in cluster], timeout=10, attempt_timeout=1.0, first_member=0)


def test_reads_leases_and_writes_move_off_a_paused_member(
    cluster: list[EtcdServer], request: pytest.FixtureRequest
) -> None:
    key = f"/failover/{request.node.name}"
    with _client(cluster) as etcd:
        etcd.put(key, b"before")
        lease = etcd.grant_lease(30)
        with paused(cluster[0]):
            assert etcd.get(key) is not None and etcd.get(key).value == b"before"  # type: ignore[union-attr]
            assert etcd.refresh_lease(lease) > 0
            assert etcd.txn([absent(key + "/new")], [Put(key + "/new", b"x")]).succeeded
            etcd.put(key, b"during")
            assert etcd.range(key, key + "\xff")[0].value == b"during"
        assert etcd.metrics.value("llog_etcd_failovers_total") >= 1
        assert etcd.get(key).value == b"during"  # type: ignore[union-attr]


def test_a_client_leaving_a_silent_member_goes_to_one_that_answers(
    cluster: list[EtcdServer], request: pytest.FixtureRequest
) -> None:
    """The member in use paused, and another endpoint as silent (a socket that takes
    connections and never answers: a member cut off with its zone): each new client
    moves on once, to a member that answers its probe, never to the silent one, which
    a random pick would choose a third of the time."""
    key = f"/failover/{request.node.name}"
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        endpoints = [cluster[0].endpoint, f"127.0.0.1:{silent.getsockname()[1]}", cluster[1].endpoint,
                     cluster[2].endpoint]
        with _client(cluster) as etcd:
            etcd.put(key, b"v")
        with paused(cluster[0]):
            for _ in range(8):
                with Etcd(endpoints, timeout=10, attempt_timeout=0.5, first_member=0) as etcd:
                    assert etcd.get(key).value == b"v"  # type: ignore[union-attr]
                    assert etcd.metrics.value("llog_etcd_ops_total", op="get") == 2  # the paused one, then a live one
                    assert etcd.metrics.value("llog_etcd_failovers_total") == 1


def test_a_write_that_timed_out_is_never_sent_again_and_lands_at_most_once(
    cluster: list[EtcdServer], request: pytest.FixtureRequest
) -> None:
    key = f"/failover/{request.node.name}"
    with _client(cluster) as etcd:
        assert etcd.get(key) is None  # connected to the first member: a write will reach it
        with paused(cluster[0]):
            _timed_out_write(etcd, key)
    # The paused member may now apply the first attempt it held: its compare fails.
    with _client(cluster[::-1]) as other:
        wait_until(lambda: _answers(other, cluster[0]), 30, "the paused member to answer again")
        assert other.get(key).value == b"second"  # type: ignore[union-attr]


def _timed_out_write(etcd: Etcd, key: str) -> None:
    txns = etcd.metrics.value("llog_etcd_ops_total", op="txn")
    # The first attempt goes to the paused member: its outcome is unknown.
    with pytest.raises(CoordinationError):
        etcd.txn([absent(key)], [Put(key, b"first")])
    assert etcd.metrics.value("llog_etcd_ops_total", op="txn") == txns + 1  # sent once, not again
    # What a writer then does (spec §8.5): read, and decide on what it finds.
    assert etcd.get(key) is None
    assert etcd.txn([absent(key)], [Put(key, b"second")]).succeeded


def _answers(etcd: Etcd, member: EtcdServer) -> bool:
    try:
        etcd.on_member(member.endpoint, "status", lambda c: c.status())
    except Exception:  # not yet
        return False
    return True


def test_a_watch_moves_and_misses_nothing(cluster: list[EtcdServer], request: pytest.FixtureRequest) -> None:
    key = f"/failover/{request.node.name}"
    seen: list[bytes | None] = []
    got = threading.Condition()

    def on_change(kv: KV | None) -> None:
        with got:
            seen.append(None if kv is None else kv.value)
            got.notify_all()

    with _client(cluster) as etcd, _client(cluster[1:]) as writer:
        cancel = etcd.watch_kvs(key, on_change)
        writer.put(key, b"v0")
        with got:
            assert got.wait_for(lambda: seen == [b"v0"], 30), seen
        with paused(cluster[0]):
            etcd.get(key)  # a call that meets the paused member moves the watch too
            for i in range(1, 6):
                writer.put(key, b"v%d" % i)
            with got:
                assert got.wait_for(lambda: len(seen) >= 6, 30), seen
        cancel()
    assert seen == [b"v%d" % i for i in range(6)]


def test_a_writer_appends_through_a_paused_member(
    config: llog.LlogConfig, cluster: list[EtcdServer], request: pytest.FixtureRequest
) -> None:
    cfg = replace(config, etcd_endpoints=tuple(m.endpoint for m in cluster), etcd_attempt_timeout_s=1.0,
                  root_prefix=f"fo-{abs(hash(request.node.name)) % 10**8}")
    with llog.Connection(cfg) as conn:
        llog.Topics(conn).create("fo", 2)
        results = []
        with llog.Writer(conn) as w:
            for i in range(10):
                results.append(w.append("fo", i % 2, [b"a%d" % i]))
            with paused(cluster[0]):
                for i in range(10, 30):
                    results.append(w.append("fo", i % 2, [b"a%d" % i]))
            for i in range(30, 40):
                results.append(w.append("fo", i % 2, [b"a%d" % i]))
        for p in range(2):
            got = [(r.offset, r.value) for r in llog.Reader(conn).scan("fo", p)]
            assert got == [(j, b"a%d" % i) for j, i in enumerate(range(p, 40, 2))]


def test_appends_reads_group_commits_and_compactions_go_on_while_any_one_member_is_paused(
    config: llog.LlogConfig, cluster: list[EtcdServer], request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Each member in turn is paused (whichever the client started on is among them):
    every kind of operation completes on the other two. The slowest of each is printed
    (issue 36 asks at most 2 s; a figure, not a pass mark)."""
    from compactor import compact_once
    from compactor.compact import COMPACTED

    cfg = replace(config, etcd_endpoints=tuple(m.endpoint for m in cluster), etcd_attempt_timeout_s=1.0,
                  root_prefix=f"ops-{abs(hash(request.node.name)) % 10**8}", compact_min_age_ms=0)
    slowest: dict[str, float] = {}
    compacted = []
    with llog.Connection(cfg) as conn:
        llog.Topics(conn).create("ops", 1)
        offsets = GroupOffsets(conn, "g")
        with llog.Writer(conn) as w:
            w.append("ops", 0, [b"seed"])
            for k, member in enumerate(cluster):
                steps = {
                    "append": lambda k=k: w.append("ops", 0, [b"m%d" % k]),
                    "read": lambda: list(llog.Reader(conn).scan("ops", 0)),
                    "group commit": lambda k=k: offsets.commit("ops", 0, k + 2),
                    "compaction": lambda: compacted.append(compact_once(conn, "ops", 0).outcome),
                }
                with paused(member):
                    for name, step in steps.items():
                        t0 = time.monotonic()
                        step()
                        slowest[name] = max(slowest.get(name, 0.0), time.monotonic() - t0)
        assert [r.value for r in llog.Reader(conn).scan("ops", 0)] == [b"seed", b"m0", b"m1", b"m2"]
        assert offsets.get("ops", 0).offset == 4  # type: ignore[union-attr]
    assert COMPACTED in compacted
    with capsys.disabled():
        print("\nslowest operation with one etcd member of three paused (s): "
              + ", ".join(f"{k} {v:.2f}" for k, v in slowest.items()))
