"""The thin etcd layer (llog.etcd) against the real etcd: every compare target and op
kind a transaction can carry, on both branches."""

from __future__ import annotations

import subprocess
import threading

from llog.connection import Connection
from llog.etcd import Compare, Delete, Get, Put, absent, mod_revision_is, value_is


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
