"""The thin etcd layer (llog.etcd) against the real etcd: every compare target and op
kind a transaction can carry, on both branches."""

from __future__ import annotations

import subprocess
import threading
from types import SimpleNamespace

from llog.connection import Connection
from llog.etcd.operations import Compare, Delete, Get, Put, absent, mod_revision_is, value_is


def test_txn_success_branch_applies_every_op_kind(conn: Connection) -> None:
    e, root = conn.etcd, conn.keys.root
    rev = e.put(f"{root}/a", b"1")
    e.put(f"{root}/r/1", b"x")
    e.put(f"{root}/r/2", b"y")
    lease = e.grant_lease(60)
    try:
        r = e.txn(
            [mod_revision_is(f"{root}/a", rev), absent(f"{root}/b"), value_is(f"{root}/a", b"1"),
             Compare(f"{root}/a", "create", "=", rev), Compare(f"{root}/a", "version", ">", 0)],
            [Put(f"{root}/b", b"2", lease=lease), Delete(f"{root}/r/", f"{root}/r0"),
             Get(f"{root}/a", f"{root}/c", limit=1), Get(f"{root}/a", f"{root}/c")],
            [Get(f"{root}/a")],
        )
        assert r.succeeded
        assert r.responses[0] is None
        assert r.responses[1] == 2  # both r/ keys deleted
        one, both = r.responses[2], r.responses[3]
        assert isinstance(one, list) and [kv.key for kv in one] == [f"{root}/a"]
        assert isinstance(both, list) and [(kv.key, kv.value) for kv in both] == [
            (f"{root}/a", b"1"), (f"{root}/b", b"2")]
        b = e.get(f"{root}/b")
        assert b is not None and b.lease == lease and b.mod_revision == r.revision
        assert e.range(f"{root}/r/", f"{root}/r0") == []
    finally:
        e.revoke_lease(lease)
    assert e.get(f"{root}/b") is None  # the lease took its key along


def test_txn_failure_branch_runs_instead_and_writes_nothing(conn: Connection) -> None:
    e, root = conn.etcd, conn.keys.root
    rev = e.put(f"{root}/a", b"1")
    e.put(f"{root}/a", b"2")  # moves the mod_revision past ``rev``
    r = e.txn([mod_revision_is(f"{root}/a", rev)], [Put(f"{root}/b", b"x")],
              [Get(f"{root}/a"), Put(f"{root}/c", b"y")])
    assert not r.succeeded
    got = r.responses[0]
    assert isinstance(got, list) and [kv.value for kv in got] == [b"2"]
    assert r.responses[1] is None
    assert e.get(f"{root}/b") is None
    c = e.get(f"{root}/c")
    assert c is not None and c.value == b"y"


def test_txn_of_puts_only_reports_one_none_per_op(conn: Connection) -> None:
    e, root = conn.etcd, conn.keys.root
    r = e.txn([absent(f"{root}/k1")], [Put(f"{root}/k{i}", b"v") for i in range(1, 4)])
    assert r.succeeded and r.responses == (None, None, None)
    assert [kv.key for kv in e.range(f"{root}/k", f"{root}/l")] == [f"{root}/k{i}" for i in range(1, 4)]
    r = e.txn([absent(f"{root}/k1")], [Put(f"{root}/k9", b"v")])  # k1 exists now
    assert not r.succeeded and r.responses == ()
    assert e.get(f"{root}/k9") is None


def test_children_forked_during_etcd_calls_start_cleanly(conn: Connection) -> None:
    """grpcio's fork handlers aborted ~1 in 15 children forked while a channel was busy
    (PySpark starts its JVM this way); llog turns them off (llog/__init__.py)."""
    stop = threading.Event()

    def busy() -> None:
        while not stop.is_set():
            conn.etcd.get(f"{conn.keys.root}/busy")

    t = threading.Thread(target=busy)
    t.start()
    try:
        codes = []
        for _ in range(200):
            # preexec_fn makes CPython fork (not vfork/posix_spawn), so fork handlers run.
            child = subprocess.run(["true"], preexec_fn=lambda: None, capture_output=True, check=False,
                                   timeout=60)
            codes.append((child.returncode, child.stderr[:200]))
    finally:
        stop.set()
        t.join()
    assert [c for c in codes if c != (0, b"")] == []


def test_a_watch_handed_another_keys_change_drops_it_and_reads_again(conn: Connection) -> None:
    """Under etcd failover the client library can pair a stream's watch ids with the
    wrong callbacks (a create that timed out, answered late): partition 1's watch was
    then handed partition 6's control changes, and the broker served partition 6's
    records as partition 1's. A change of another key is never handed on: the owner is
    told to re-read (None) and the watch is opened again, after which it works."""
    key, other = "llog/w/partitions/1/meta/control", "llog/w/partitions/6/meta/control"
    got: list[object] = []
    mine, reopened = threading.Event(), threading.Event()

    def callback(kv: object) -> None:
        got.append(kv)
        if kv is not None:
            mine.set()
        elif got.count(None) == 2:  # the stray's "read again", then the reopened watch's
            reopened.set()

    cancel = conn.etcd.watch_kvs(key, callback)
    try:
        [w] = [w for w in conn.etcd._watches._all if w.key == key]
        stray = SimpleNamespace(events=[SimpleNamespace(key=other.encode(), value=b"x", mod_revision=5,
                                                        create_revision=5, version=1, lease=0)],
                                header=SimpleNamespace(revision=5))
        conn.etcd._watches._event(w, w.member, stray)
        # Only "read it again": from the stray, then from the reopened watch (which had
        # delivered nothing, so has no revision to resume from).
        assert reopened.wait(10)
        assert got == [None, None]
        assert conn.metrics.value("llog_etcd_watch_strays_total") == 1
        conn.etcd.put(key, b"mine")  # the reopened watch delivers the key's own changes
        assert mine.wait(10)
        assert [kv.key for kv in got if kv is not None] == [key]
    finally:
        cancel()
