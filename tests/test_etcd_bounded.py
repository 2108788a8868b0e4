"""etcd stays bounded: llog compacts etcd's history, a NOSPACE alarm is a typed,
definite error, writers apply back-pressure on uncompacted index keys, producer state
expires. Against real etcd servers (the suite's, a private one, a tiny-quota one)."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import llog
from compactor.compact import COMPACTED, Compactor
from compactor.etcd_history import EtcdHistoryCompactor, read_record
from compactor.metrics import compactor_metrics
from compactor.producer_expiry import ProducerExpiry
from compactor.revision_clock import RevisionClock
from compactor.service import CompactorService
from llog import AppendGroup
from llog.cli import main as cli
from llog.cli.doctor import diagnose
from llog.devstack import EtcdServer
from llog.errors import EtcdSpaceExhausted, TooManyUncompactedKeys
from llog.etcd.client import Etcd
from llog.etcd.maintenance import EtcdMaintenance
from llog.producer import BatchingProducer
from llog.state.control import read_control, settle
from llog.writer import AppendFailure, AppendResult
from tests.broker_harness import broker_process
from tests.conftest import PrivateEtcd, config_env, wait_until


class FakeClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _txns(conn: llog.Connection) -> float:
    return conn.metrics.value("llog_etcd_ops_total", op="txn")


def _bump(etcd: Etcd, n: int) -> int:
    """Write ``n`` revisions; return the last."""
    rev = 0
    for i in range(n):
        rev = etcd.put("bump", str(i).encode())
    return rev


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch) -> Any:
    def use(cfg: llog.LlogConfig) -> None:
        for k, v in config_env(cfg).items():
            if k.startswith(("LLOG_", "AWS_")):
                monkeypatch.setenv(k, v)

    return use


# -- etcd history compaction ------------------------------------------------------------
def test_history_compaction_keeps_one_interval(private_etcd: PrivateEtcd, config: llog.LlogConfig) -> None:
    cfg = private_etcd.config(config)
    clock = FakeClock()
    with llog.Connection(cfg) as conn:
        job = EtcdHistoryCompactor(conn, RevisionClock(conn, monotonic=clock), 60, compactor_metrics(conn.metrics))
        r0 = _bump(conn.etcd, 5)
        assert job.run() is None  # the first sample: nothing is an interval old yet
        r1 = _bump(conn.etcd, 5)
        clock.now += 30
        assert job.run() is None
        clock.now += 30
        assert job.run() == r0  # the revision seen one interval ago
        assert not EtcdMaintenance(conn.etcd).readable_at(r0 - 1)
        assert EtcdMaintenance(conn.etcd).readable_at(r0) and EtcdMaintenance(conn.etcd).readable_at(r1)
        rec = read_record(conn)
        assert rec is not None and rec.revision == r0
        assert conn.metrics.value("llog_etcd_compacted_revision") == r0
        assert conn.metrics.value("llog_etcd_db_size_bytes") > 0
        clock.now += 60
        assert job.run() is not None and not EtcdMaintenance(conn.etcd).readable_at(r1 - 1)


def test_service_compacts_etcd_history(private_etcd: PrivateEtcd, config: llog.LlogConfig) -> None:
    cfg = replace(private_etcd.config(config), etcd_compact_interval_s=0.3, vacuum_interval_s=0)
    with llog.Connection(cfg) as conn:
        start = _bump(conn.etcd, 3)
        with CompactorService(cfg, http=False):
            wait_until(lambda: (r := read_record(conn)) is not None and r.revision > start, 30,
                       "the service to compact etcd's history past the start")
            rec = read_record(conn)
            assert rec is not None
            assert not EtcdMaintenance(conn.etcd).readable_at(start)
            assert EtcdMaintenance(conn.etcd).readable_at(rec.revision)  # the last interval's history remains


def test_doctor_warns_until_history_is_compacted(
    private_etcd: PrivateEtcd, config: llog.LlogConfig, cli_env: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = private_etcd.config(config)
    with llog.Connection(cfg) as conn:
        _bump(conn.etcd, 30)
        found = {f.check: f for f in diagnose(conn, max_history_revisions=10)}
        assert found["object store"].level == "OK"
        assert found["etcd history"].level == "WARN" and "not being compacted" in found["etcd history"].detail
        cli_env(cfg)
        assert cli(["etcd", "compact"]) == 0
        found = {f.check: f for f in diagnose(conn, max_history_revisions=10)}
        assert found["etcd history"].level == "OK"
        assert cli(["doctor", "--max-history-revisions", "10"]) == 0
        assert "OK    etcd history" in capsys.readouterr().out
        assert cli(["etcd", "status"]) == 0
        status = json.loads(capsys.readouterr().out)
        assert status["alarms"] == [] and status["llog_compaction"]["revision"] > 30
        assert status["members"][0]["endpoint"] == private_etcd.endpoint
    broken = replace(cfg, etcd_endpoints=("127.0.0.1:1",), etcd_timeout_s=1)
    with llog.Connection(broken) as conn:
        assert [f.level for f in diagnose(conn) if f.check == "etcd"] == ["ERROR"]


# -- NOSPACE ------------------------------------------------------------------------------
@pytest.fixture
def tiny_etcd(tmp_path: Path) -> Iterator[EtcdServer]:
    server = EtcdServer(tmp_path, quota_backend_bytes=2 * 1024 * 1024)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def _fill(etcd: Etcd) -> None:
    """Overwrite one key until etcd raises its NOSPACE alarm (live data stays small)."""
    with pytest.raises(EtcdSpaceExhausted):
        for _ in range(10_000):
            etcd.put("filler", b"x" * 100_000)


def test_nospace_is_a_definite_typed_error_and_the_cli_fixes_it(
    tiny_etcd: EtcdServer, config: llog.LlogConfig, cli_env: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = replace(config, etcd_endpoints=(tiny_etcd.endpoint,))
    with llog.Connection(cfg) as conn, llog.Writer(conn) as w:
        llog.Topics(conn).create("t", 2)
        w.append_shared([AppendGroup("t", 0, [b"a"]), AppendGroup("t", 1, [b"a"])])
        before = [read_control(conn, "t", p).control.next_offset for p in (0, 1)]
        _fill(conn.etcd)

        # Both partitions cached: one combined transaction, refused for both at once.
        txns = _txns(conn)
        outs = w.append_shared([AppendGroup("t", 0, [b"c"]), AppendGroup("t", 1, [b"c"])])
        assert all(isinstance(o, AppendFailure) and isinstance(o.error, EtcdSpaceExhausted) for o in outs)
        assert _txns(conn) - txns == 1
        txns = _txns(conn)
        with pytest.raises(EtcdSpaceExhausted, match="llog etcd compact && llog etcd defrag && llog etcd disarm"):
            w.append("t", 0, [b"b"])
        assert _txns(conn) - txns == 1  # not retried as an unknown outcome
        assert [read_control(conn, "t", p).control.next_offset for p in (0, 1)] == before

        cli_env(cfg)
        assert cli(["doctor"]) == 2
        assert "raised NOSPACE" in capsys.readouterr().out
        for action in ("compact", "defrag", "disarm"):
            assert cli(["etcd", action]) == 0
        assert EtcdMaintenance(conn.etcd).alarms() == []
        res = w.append("t", 0, [b"d"])
        assert res.start_offset == before[0]


# -- back-pressure ------------------------------------------------------------------------
def _wal_objects(conn: llog.Connection) -> int:
    return sum(1 for _ in conn.store.list(conn.keys.wal_prefix()))


def _compact_all(conn: llog.Connection, topic: str, partition: int) -> None:
    settle(conn, topic, partition)
    with Compactor(conn) as c:
        while c.compact_once(topic, partition).outcome == COMPACTED:
            pass


def test_backpressure_refuses_at_the_bound_writes_nothing_and_lifts_after_compaction(
    config: llog.LlogConfig,
) -> None:
    bound = 5
    cfg = replace(config, max_uncompacted_keys=bound, backpressure_check_s=0, compact_min_age_ms=0)
    with llog.Connection(cfg) as conn, llog.Writer(conn) as w:
        llog.Topics(conn).create("t", 2)
        with pytest.raises(TooManyUncompactedKeys) as got:
            for _ in range(3 * bound):
                w.append("t", 0, [b"r"])
        err = got.value
        assert isinstance(err, llog.BackPressure)
        assert (err.topic, err.partition, err.count, err.bound) == ("t", 0, bound, bound)
        assert "t/0" in str(err) and str(bound) in str(err)
        keys = conn.keys
        assert conn.etcd.count(keys.index_prefix("t", 0), keys.index_range_end("t", 0)) == bound

        objects, ctl = _wal_objects(conn), read_control(conn, "t", 0).control
        with pytest.raises(TooManyUncompactedKeys):
            w.append_shared([AppendGroup("t", 1, [b"other"]), AppendGroup("t", 0, [b"r"])])
        assert _wal_objects(conn) == objects  # refused before the PUT
        assert read_control(conn, "t", 0).control == ctl
        assert w.append("t", 1, [b"other"]).start_offset == 0  # only t/0 is held back

        _compact_all(conn, "t", 0)
        assert w.append("t", 0, [b"after"]).start_offset == ctl.next_offset


def test_backpressure_counts_own_appends_between_checks(config: llog.LlogConfig) -> None:
    cfg = replace(config, max_uncompacted_keys=3, backpressure_check_s=3600)
    with llog.Connection(cfg) as conn, llog.Writer(conn) as w:
        llog.Topics(conn).create("t", 3)
        groups = [AppendGroup("t", p, [b"r"]) for p in range(3)]
        for _ in range(3):
            assert all(isinstance(o, AppendResult) for o in w.append_shared(groups))
        with pytest.raises(TooManyUncompactedKeys) as got:
            w.append_shared(groups)
        assert got.value.count == 3
        # One count request for the three partitions of all four calls: the rest was
        # counted locally.
        assert conn.metrics.value("llog_etcd_ops_total", op="get_and_count") == 1


def test_producer_fails_only_the_partition_behind(config: llog.LlogConfig) -> None:
    cfg = replace(config, max_uncompacted_keys=2, backpressure_check_s=0)
    with llog.Connection(cfg) as conn:
        llog.Topics(conn).create("t", 2)
        with llog.Writer(conn) as w:
            for _ in range(3):
                w.append("t", 0, [b"r"])
        with BatchingProducer(conn, max_inflight=1) as p:
            held = p.send("t", 0, b"x")
            passes = p.send("t", 1, b"y")
            with pytest.raises(TooManyUncompactedKeys):
                held.result(timeout=60)
            assert passes.result(timeout=60) == 0


def test_broker_answers_503_with_retry_after(config: llog.LlogConfig) -> None:
    with llog.Connection(config) as conn:
        llog.Topics(conn).create("t", 1)
        with llog.Writer(conn) as w:
            for _ in range(3):
                w.append("t", 0, [b"r"])
    body = json.dumps({"topic_partitions": [{"topic": "t", "partition": 0, "records": ["x"]}]})
    with broker_process(config, LLOG_MAX_UNCOMPACTED_KEYS="2") as b:
        c = http.client.HTTPConnection(b.host, b.port, timeout=60)
        try:
            c.request("POST", "/produce", body=body, headers={"content-type": "application/json"})
            resp = c.getresponse()
            doc = json.loads(resp.read())
        finally:
            c.close()
    assert resp.status == 503
    assert resp.getheader("Retry-After") == "1"
    assert doc["results"][0]["error_type"] == "TooManyUncompactedKeys"


# -- producer-state expiry ----------------------------------------------------------------
def test_producer_state_expires_by_revision_age(
    config: llog.LlogConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    with llog.Connection(config) as conn, llog.Writer(conn) as w:
        llog.Topics(conn).create("t", 1)
        keys = conn.keys

        def send(producer: str, seq: int) -> AppendResult:
            [out] = w.append_shared([AppendGroup("t", 0, [b"r"], producer, seq)])
            assert isinstance(out, AppendResult)
            return out

        first = send("idle", 0)
        send("busy", 0)
        expiry = ProducerExpiry(conn, RevisionClock(conn, monotonic=clock), 60, compactor_metrics(conn.metrics))
        assert expiry.run([("t", 0)]) == 0  # nothing is a window old yet
        send("busy", 1)  # written after the sample: younger than the window
        clock.now += 60
        assert expiry.run([("t", 0)]) == 1
        assert conn.etcd.get(keys.producer("t", 0, "idle")) is None
        assert conn.etcd.get(keys.producer("t", 0, "busy")) is not None
        assert conn.metrics.value("llog_producer_states_expired_total") == 1
        # The documented consequence: a retry of the expired producer's batch appends again.
        assert send("idle", 0).start_offset > first.start_offset

        # A producer that commits between the scan and the delete keeps its state.
        scan = conn.etcd.scan

        def scan_then_commit(*a: Any, **kw: Any) -> Iterator[Any]:
            found = list(scan(*a, **kw))
            send("busy", 2)
            return iter(found)

        later = ProducerExpiry(conn, RevisionClock(conn, monotonic=clock), 60, compactor_metrics(conn.metrics))
        later.run([])  # samples a revision after every write so far
        clock.now += 60
        monkeypatch.setattr(conn.etcd, "scan", scan_then_commit)
        assert later.run([("t", 0)]) == 1  # "idle" goes; "busy" was written meanwhile
        assert conn.etcd.get(keys.producer("t", 0, "busy")) is not None


@pytest.mark.parametrize("combined", [False, True])
def test_a_commit_etcd_applied_then_answered_nospace_is_acknowledged(
    config: llog.LlogConfig, monkeypatch: pytest.MonkeyPatch, combined: bool
) -> None:
    """etcd 3.5 applies the write that crosses its quota and answers NOSPACE all the
    same. The writer resolves it like an unknown outcome: the records are there, so they
    are acknowledged (reporting a failure would make the client send them again)."""
    with llog.Connection(config) as conn, llog.Writer(conn) as w:
        llog.Topics(conn).create("t", 2)
        groups = [AppendGroup("t", p, [b"warm"]) for p in (0, 1)]
        w.append_shared(groups if combined else groups[:1])  # cached: the next one may combine
        real = conn.etcd.txn
        armed = [True]

        def applied_then_nospace(*args: Any, **kw: Any) -> Any:
            r = real(*args, **kw)
            if armed[0] and r.succeeded:
                armed[0] = False
                raise EtcdSpaceExhausted("txn", "etcdserver: mvcc: database space exceeded (injected)")
            return r

        monkeypatch.setattr(conn.etcd, "txn", applied_then_nospace)
        batch = [AppendGroup("t", p, [b"once"]) for p in (0, 1)]
        outs = w.append_shared(batch if combined else batch[:1])
        assert not armed[0]
        assert all(isinstance(o, AppendResult) and o.start_offset == 1 for o in outs), outs
        monkeypatch.setattr(conn.etcd, "txn", real)
    with llog.Connection(config) as conn, llog.Reader(conn) as r:
        for p in (0, 1) if combined else (0,):
            assert [rec.value for rec in r.scan("t", p)] == [b"warm", b"once"]
