"""A blob outlives every commit that can reference it, whatever pauses (issue 17,
item 1), against the real etcd and S3 servers: writer and compactor sessions, the
session compare in every referencing commit, and vacuum's session rule (spec §11)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import llog
from compactor import Compactor, StageEvent
from compactor.vacuum import VacuumReport, vacuum
from llog import AppendGroup
from llog.errors import CoordinationError, SessionExpired
from llog.etcd.client import Etcd
from llog.etcd.operations import TxnResult
from llog.producer import BatchingProducer
from llog.state.control import read_control
from llog.state.keys import prefix_range_end
from llog.store import ObjectStore
from tests.broker_harness import BrokerProcess, broker_process
from tests.conftest import config_env, wait_until

# Processes paused past session timeouts: the timing is the test, so it runs alone.
pytestmark = pytest.mark.alone

TOPIC = "s"
PAUSED_WRITER = Path(__file__).parent / "workers" / "paused_writer.py"


@pytest.fixture
def sconn(config: llog.LlogConfig) -> Iterator[llog.Connection]:
    cfg = replace(config, vacuum_grace_s=0.5, compact_min_age_ms=0, settle_after_ms=0)
    with llog.Connection(cfg) as c:
        llog.Topics(c).create(TOPIC, 3)
        yield c


def _scan(conn: llog.Connection, p: int) -> list[bytes]:
    with llog.Reader(conn) as r:
        return [c.value for c in r.scan(TOPIC, p)]


def _exists(conn: llog.Connection, key: str) -> bool:
    return conn.store.head(key) is not None


def _wait_older_than(conn: llog.Connection, key: str, seconds: float) -> None:
    """Wait, by the store's own modification time, until ``key`` is older than ``seconds``."""
    deadline = time.monotonic() + 30
    while True:
        info = conn.store.head(key)
        assert info is not None, f"{key} is gone"
        if info.modified < time.time() - seconds - 0.05:
            return
        assert time.monotonic() < deadline, f"{key} never aged past {seconds} s"
        time.sleep(0.1)


def _end_session(conn: llog.Connection, data_key: str) -> None:
    """Revoke the lease of the session ``data_key`` was written under, as etcd does
    when its process stays paused past the TTL."""
    session_id = conn.keys.session_of(data_key)
    assert session_id is not None, data_key
    kv = conn.etcd.get(conn.keys.session(session_id))
    assert kv is not None and kv.lease, f"session {session_id} is not live"
    conn.etcd.revoke_lease(kv.lease)


def test_writer_paused_past_the_grace_then_vacuum_commits_a_blob_that_still_exists(sconn: llog.Connection) -> None:
    conn = sconn
    with llog.Writer(conn) as w:
        staged = w.stage_shared([AppendGroup(TOPIC, 0, [b"a", b"b"]), AppendGroup(TOPIC, 1, [b"c"])])
        _wait_older_than(conn, staged.data_key, conn.config.vacuum_grace_s)  # the pause
        report = vacuum(conn)
        assert staged.data_key not in report.deleted
        outcomes = w.commit_staged(staged)
    assert all(isinstance(o, llog.AppendResult) for o in outcomes), outcomes
    assert _exists(conn, staged.data_key)
    assert (_scan(conn, 0), _scan(conn, 1)) == ([b"a", b"b"], [b"c"])


class _StallingDelete:
    """The real store, except that ``delete`` first signals ``stalled`` and waits for
    ``release``: a vacuum paused between its reference scan and its deletes."""

    def __init__(self, store: ObjectStore) -> None:
        self._store = store
        self.stalled = threading.Event()
        self.release = threading.Event()

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)

    def delete(self, keys: Iterable[str]) -> int:
        doomed = list(keys)
        self.stalled.set()
        assert self.release.wait(60)
        return self._store.delete(doomed)


def test_vacuum_stalled_after_its_scan_spares_a_blob_committed_meanwhile(sconn: llog.Connection) -> None:
    conn = sconn
    stalling = _StallingDelete(conn.store)
    vconn = llog.Connection(conn.config, etcd=conn.etcd, store=stalling)  # type: ignore[arg-type]
    # An orphan of a session that ended, so the vacuum always has something to delete.
    dead = f"{conn.keys.wal_prefix()}ended/orphan"
    conn.store.put(dead, b"never referenced")
    with llog.Writer(conn) as w:
        staged = w.stage_shared([AppendGroup(TOPIC, 0, [b"late", b"but acked"])])
        _wait_older_than(conn, staged.data_key, 0)
        _wait_older_than(conn, dead, 0)
        reports: list[VacuumReport] = []
        t = threading.Thread(target=lambda: reports.append(vacuum(vconn, grace_s=0)))
        t.start()
        try:
            assert stalling.stalled.wait(60), "vacuum never reached its deletes"
            outcomes = w.commit_staged(staged)  # the scan is over: it did not see this
        finally:
            stalling.release.set()
            t.join()
    vconn.close()
    assert [type(o) for o in outcomes] == [llog.AppendResult]
    assert dead in reports[0].deleted
    assert _exists(conn, staged.data_key)
    assert _scan(conn, 0) == [b"late", b"but acked"]


@pytest.mark.parametrize("point", ["after_listing", "after_sessions", "after_scan"])
def test_vacuum_paused_at_any_step_never_deletes_what_a_commit_references(
    sconn: llog.Connection, point: str
) -> None:
    """While vacuum is paused, the writer commits its blob and closes (its session
    ends); whatever the step, the blob survives."""
    conn = sconn
    paused, go_on = threading.Event(), threading.Event()

    def hook(at: str, _root: str) -> None:
        if at == point:
            paused.set()
            assert go_on.wait(60)

    w = llog.Writer(conn)
    staged = w.stage_shared([AppendGroup(TOPIC, 0, [b"x"])])
    reports: list[VacuumReport] = []
    t = threading.Thread(target=lambda: reports.append(vacuum(conn, grace_s=0, fault_hook=hook)))
    t.start()
    try:
        assert paused.wait(60)
        [out] = w.commit_staged(staged)
        w.close()  # settles the pending and ends the session
        assert conn.etcd.get(conn.keys.session(conn.keys.session_of(staged.data_key) or "")) is None
    finally:
        go_on.set()
        t.join()
    assert isinstance(out, llog.AppendResult)
    assert staged.data_key not in reports[0].deleted
    assert _scan(conn, 0) == [b"x"]


def test_expired_session_fails_the_commit_and_nothing_is_acknowledged(sconn: llog.Connection) -> None:
    conn = sconn
    with llog.Writer(conn) as w:
        # Partitions 0 and 1 warm (their blob commits in one combined txn), 2 cold (alone).
        w.append_shared([AppendGroup(TOPIC, 0, [b"0"]), AppendGroup(TOPIC, 1, [b"1"])])
        staged = w.stage_shared([AppendGroup(TOPIC, p, [b"lost"]) for p in range(3)])
        _end_session(conn, staged.data_key)
        report = vacuum(conn, grace_s=3600)
        assert staged.data_key in report.deleted  # its session ended: no grace needed
        outcomes = w.commit_staged(staged)
        assert [type(o) for o in outcomes] == [llog.AppendFailure] * 3
        for p, o in enumerate(outcomes):
            assert isinstance(o, llog.AppendFailure)
            assert isinstance(o.error, SessionExpired)
            assert o.error.session_id == conn.keys.session_of(staged.data_key)
            assert f"{TOPIC}/{p}" in str(o.error) and staged.data_key in str(o.error)
        assert [read_control(conn, TOPIC, p).control.next_offset for p in range(3)] == [1, 1, 0]
        assert [_scan(conn, p) for p in range(3)] == [[b"0"], [b"1"], []]
        # The next append goes to a new session and works.
        again = w.append_shared([AppendGroup(TOPIC, p, [b"again"]) for p in range(3)])
        assert [getattr(o, "start_offset", None) for o in again] == [1, 1, 0]
        assert isinstance(again[0], llog.AppendResult)
        assert conn.keys.session_of(again[0].data_key) not in (None, conn.keys.session_of(staged.data_key))
    assert [_scan(conn, p) for p in range(3)] == [[b"0", b"again"], [b"1", b"again"], [b"again"]]


def test_compactor_session_ended_before_its_record_drops_the_run(sconn: llog.Connection) -> None:
    conn = sconn
    with llog.Writer(conn) as w:
        for i in range(3):
            w.append(TOPIC, 0, [b"%d" % i])
    put: list[str] = []

    def hook(ev: StageEvent) -> None:
        if ev.point == "after_put" and not put:  # between K2 (PUT) and K3 (record)
            put.append(ev.record.data_key)
            _end_session(conn, ev.record.data_key)

    with Compactor(conn, hook=hook) as c:
        assert c.compact_once(TOPIC, 0).outcome == "conflict"
        assert conn.etcd.get(conn.keys.compaction(TOPIC, 0)) is None
        assert _exists(conn, put[0])
        report = vacuum(conn, grace_s=3600)
        assert report.deleted == (put[0],)  # the orphan; the WAL blobs are referenced
        # The same compactor opens a new session and compacts the partition.
        res = c.compact_once(TOPIC, 0)
    assert res.outcome == "compacted" and res.record is not None
    assert res.record.data_key != put[0] and _exists(conn, res.record.data_key)
    assert _scan(conn, 0) == [b"0", b"1", b"2"]


def test_batching_producer_writes_a_batch_again_after_its_session_expired(sconn: llog.Connection) -> None:
    conn = sconn
    armed = threading.Event()
    ended: list[str] = []

    def hook(point: str, data_key: str) -> None:
        if point == "after_put" and armed.is_set() and len(ended) < 2:
            ended.append(data_key)  # paused between PUT and commit past the TTL, twice
            _end_session(conn, data_key)

    sent: list[bytes] = []
    futures: list[Future[int]] = []
    with llog.Writer(conn, fault_hook=hook) as w, BatchingProducer(w) as p:
        for i in range(20):
            if i == 5:
                p.flush()
                armed.set()
            value = b"r%02d" % i
            sent.append(value)
            futures.append(p.send(TOPIC, i % 3, value))
        p.flush()
        offsets = [f.result(30) for f in futures]
    assert len(ended) == 2
    assert conn.metrics.value("llog_sessions_expired_total", kind="writer") >= 1
    by_partition = {q: [v for i, v in enumerate(sent) if i % 3 == q] for q in range(3)}
    assert {q: _scan(conn, q) for q in range(3)} == by_partition  # each once, in order
    assert all(o == i // 3 for i, o in enumerate(offsets))


class _LosingEtcd:
    """The real etcd, except that the next ``txn`` after :meth:`arm` is not sent and
    raises :class:`CoordinationError`, as a commit whose reply is lost; ``on_loss``
    runs first."""

    def __init__(self, etcd: Etcd) -> None:
        self._etcd = etcd
        self._armed: Callable[[], None] | None = None

    def arm(self, on_loss: Callable[[], None]) -> None:
        self._armed = on_loss

    def __getattr__(self, name: str) -> object:
        return getattr(self._etcd, name)

    def txn(self, *args: Any, **kwargs: Any) -> TxnResult:
        on_loss, self._armed = self._armed, None
        if on_loss is not None:
            on_loss()
            raise CoordinationError("etcd txn failed: reply lost (injected)")
        return self._etcd.txn(*args, **kwargs)


def test_unknown_outcome_then_session_ended_is_a_definite_session_expired(sconn: llog.Connection) -> None:
    """§8.5: the attempt with the unknown outcome compared the same session key, so
    once that key is gone and the append is not found, it never committed."""
    conn = sconn
    etcd = _LosingEtcd(conn.etcd)
    wconn = llog.Connection(conn.config, etcd=etcd, store=conn.store)  # type: ignore[arg-type]
    try:
        with llog.Writer(wconn) as w:
            w.append(TOPIC, 0, [b"before"])
            staged = w.stage_shared([AppendGroup(TOPIC, 0, [b"lost"])])
            etcd.arm(lambda: _end_session(conn, staged.data_key))
            [out] = w.commit_staged(staged)
            assert isinstance(out, llog.AppendFailure)
            assert type(out.error) is SessionExpired, out.error
            assert w.append(TOPIC, 0, [b"after"]).start_offset == 1
    finally:
        wconn.close()
    assert _scan(conn, 0) == [b"before", b"after"]


def test_writer_process_stopped_past_its_session_ttl_gets_session_expired(sconn: llog.Connection) -> None:
    """A real pause: SIGSTOP a writer process between its PUT and its commit until etcd
    expires its session's lease, vacuum, SIGCONT."""
    conn = sconn
    env = config_env(conn.config) | {"LLOG_SESSION_TTL_S": "1"}
    proc = subprocess.Popen(
        [sys.executable, str(PAUSED_WRITER), TOPIC],
        env=env, text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        data_key = json.loads(proc.stdout.readline())["staged"]
        session = conn.keys.session(conn.keys.session_of(data_key) or "")
        proc.send_signal(signal.SIGSTOP)
        try:
            wait_until(lambda: conn.etcd.get(session) is None, 30, "the stopped writer's session to expire")
            assert vacuum(conn, grace_s=3600).deleted == (data_key,)
        finally:
            proc.send_signal(signal.SIGCONT)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        lines = [proc.stdout.readline().strip() for _ in range(3)]
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert [json.loads(x) for x in lines[:2]] == [{"error": "SessionExpired"}, {"ok": 0}]
    assert lines[2] == "done"
    assert _scan(conn, 0) == [b"c"]


def test_rotated_sessions_end_so_vacuum_takes_a_live_writers_garbage(sconn: llog.Connection) -> None:
    conn = sconn
    wconn = llog.Connection(replace(conn.config, session_rotate_s=0.001), etcd=conn.etcd, store=conn.store)
    try:
        with llog.Writer(wconn) as w:
            keys = [w.append(TOPIC, 0, [b"%d" % i]).data_key for i in range(3)]
            sessions = [conn.keys.session_of(k) for k in keys]
            assert len(set(sessions)) == 3  # each blob found its session too old: a new one
            # Each session, due for rotation, ended with its last blob, the last one too.
            assert [conn.etcd.get(conn.keys.session(s or "")) for s in sessions] == [None, None, None]
            with Compactor(conn) as c:
                assert c.compact_once(TOPIC, 0).outcome == "compacted"
            report = vacuum(conn, grace_s=3600)
            assert set(report.deleted) == set(keys) and report.live_session == 0
    finally:
        wconn.close()
    assert _scan(conn, 0) == [b"0", b"1", b"2"]


def test_an_idle_writers_session_ends_once_due_for_rotation(sconn: llog.Connection) -> None:
    """A session not yet due when its last blob committed ends later, from its keep-alive,
    so a writer that went idle keeps nothing from vacuum."""
    conn = sconn
    wconn = llog.Connection(replace(conn.config, session_ttl_s=1, session_rotate_s=1.5),
                            etcd=conn.etcd, store=conn.store)
    try:
        with llog.Writer(wconn) as w:
            key = w.append(TOPIC, 0, [b"idle"]).data_key
            session_key = conn.keys.session(conn.keys.session_of(key) or "")
            assert conn.etcd.get(session_key) is not None  # not due yet: kept for the next blob
            deadline = time.monotonic() + 30
            while conn.etcd.get(session_key) is not None:
                assert time.monotonic() < deadline, "the idle session was never ended"
                time.sleep(0.05)
            with Compactor(conn) as c:
                assert c.compact_once(TOPIC, 0).outcome == "compacted"
            assert key in vacuum(conn, grace_s=3600).deleted
            # The next blob opens a new session.
            assert w.append(TOPIC, 0, [b"again"]).data_key != key
    finally:
        wconn.close()
    assert _scan(conn, 0) == [b"idle", b"again"]


def test_broker_stopped_past_its_session_ttl_produces_again_after_resuming(sconn: llog.Connection) -> None:
    conn = sconn
    prefix = conn.keys.sessions_prefix()

    def sessions() -> list[str]:
        return [kv.key for kv in conn.etcd.range(prefix, prefix_range_end(prefix))]

    def produce(b: BrokerProcess, value: str) -> tuple[int, Any]:
        return b.post("/produce", {"topic_partitions": [{"topic": TOPIC, "partition": 0, "records": [value]}]})

    with broker_process(conn.config, LLOG_SESSION_TTL_S="1") as b:
        assert produce(b, "before")[0] == 200
        [session] = sessions()
        b.proc.send_signal(signal.SIGSTOP)
        try:
            wait_until(lambda: session not in sessions(), 30, "the stopped broker's session to expire")
        finally:
            b.proc.send_signal(signal.SIGCONT)
        status, resp = produce(b, "after")
        assert status == 200, resp
        assert session not in sessions() and len(sessions()) == 1  # a new one
    assert _scan(conn, 0) == [b"before", b"after"]


def test_local_store_keeps_session_directories_only_while_they_hold_objects(file_config: llog.LlogConfig) -> None:
    with llog.Connection(replace(file_config, compact_min_age_ms=0, settle_after_ms=0)) as conn:
        llog.Topics(conn).create(TOPIC, 1)
        with llog.Writer(conn) as w:
            keys = [w.append(TOPIC, 0, [b"%d" % i]).data_key for i in range(2)]
        assert {o.key for o in conn.store.list(conn.keys.wal_prefix())} == set(keys)
        with Compactor(conn) as c:
            assert c.compact_once(TOPIC, 0).outcome == "compacted"
        assert set(vacuum(conn, grace_s=3600).deleted) == set(keys)
        root = Path(file_config.object_store.removeprefix("file://"))
        assert not (root / keys[0]).parent.exists()  # the ended session's directory went too
        with llog.Writer(conn) as w:  # and a PUT still finds (or makes) its directory
            w.append(TOPIC, 0, [b"2"])
        assert _scan(conn, 0) == [b"0", b"1", b"2"]
