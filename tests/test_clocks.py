"""No writer's clock can freeze or break the log (protocol/README.md, "Clocks"): a
writer clock ahead neither freezes compaction nor time retention, a writer clock behind
does not let compaction take the index key an unknown commit outcome is resolved by,
and that resolution reads etcd's history, so it survives compaction anyway."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any

import msgpack
import pytest

import llog
import llog.writer
from compactor import Compactor
from compactor.compact import COMPACTED
from compactor.revision_clock import MAX_SAMPLES, RevisionClock
from compactor.service import CompactorService
from llog.codec.etcd_values.partition import COMPACTED as KIND_COMPACTED
from llog.codec.etcd_values.partition import WAL
from llog.errors import AmbiguousCommit, CoordinationError, HistoryCompacted
from llog.etcd.maintenance import EtcdMaintenance
from llog.etcd.operations import Compare, Op, TxnResult
from llog.loadtest.chaos import skew_env
from llog.state.control import decode_index, now_ms, read_control
from llog.write.resolution import find_committed
from tests.conftest import PrivateEtcd, config_env, wait_until

TEN_MIN_MS = 10 * 60 * 1000


@pytest.fixture
def skewed(monkeypatch: pytest.MonkeyPatch) -> Callable[[int], None]:
    """Shift the clock of this process's writers (their created_at_ms and default
    record timestamps) by the given ms; the compactor's clock stays as it is."""

    def shift(ms: int) -> None:
        monkeypatch.setattr(llog.writer, "now_ms", lambda: now_ms() + ms)

    return shift


def _values(conn: llog.Connection, topic: str) -> list[tuple[int, bytes]]:
    with llog.Reader(conn) as r:
        return [(rec.offset, rec.value) for rec in r.scan(topic, 0)]


def _index(conn: llog.Connection, topic: str) -> dict[int, Any]:
    k = conn.keys
    return {
        k.end_offset_of(kv.key): decode_index(kv.key, kv.value)
        for kv in conn.etcd.scan(k.index_prefix(topic, 0), k.index_range_end(topic, 0))
    }


class _FakeTime:
    """A monotonic and a wall clock the test moves by hand."""

    def __init__(self) -> None:
        self.mono = 1000.0
        self.wall = 1_700_000_000.0

    def advance(self, s: float) -> None:
        self.mono += s
        self.wall += s


def test_writer_clock_ahead_does_not_freeze_compaction(
    config: llog.LlogConfig, skewed: Callable[[int], None]
) -> None:
    """The head entry's created_at_ms is 10 minutes in the future; the old planner
    never found it old enough, and nothing behind it could be compacted either."""
    with llog.Connection(replace(config, compact_min_age_ms=2000, settle_after_ms=0)) as conn:
        llog.Topics(conn).create("ahead", 1)
        skewed(TEN_MIN_MS)
        with llog.Writer(conn) as w:
            w.append("ahead", 0, [b"from-the-future"])
        skewed(0)
        with llog.Writer(conn) as w:
            for i in range(3):
                w.append("ahead", 0, [f"now-{i}".encode()])
        with Compactor(conn) as c:

            def all_compacted() -> bool:
                c.compact_once("ahead", 0)
                index = _index(conn, "ahead")
                return max(index) == 3 and all(e.kind == KIND_COMPACTED for e in index.values())

            wait_until(all_compacted, 30, "the skewed head and the entries behind it to compact")
        assert [v for _, v in _values(conn, "ahead")] == [b"from-the-future", b"now-0", b"now-1", b"now-2"]


@pytest.mark.skipif(shutil.which("faketime") is None, reason="needs Debian's faketime (apt-get install faketime)")
def test_writer_process_under_faketime_ahead_does_not_freeze_compaction(config: llog.LlogConfig) -> None:
    """The same with a whole writer process whose clock is 10 minutes ahead
    (libfaketime), through ``llog produce``."""
    cfg = replace(config, compact_min_age_ms=2000, settle_after_ms=0)
    with llog.Connection(cfg) as conn:
        llog.Topics(conn).create("faked", 1)
        out = subprocess.run(
            ["faketime", "-f", "+10m", sys.executable, "-m", "llog", "produce", "faked", "-p", "0"],
            input="from-the-future\n", env=config_env(cfg), text=True, capture_output=True, timeout=120,
        )
        assert out.returncode == 0, out.stderr
        with llog.Writer(conn) as w:
            w.append("faked", 0, [b"now"])
        with llog.Reader(conn) as r:
            stamped = [rec.timestamp for rec in r.scan("faked", 0)]
        assert stamped[0] > now_ms() + TEN_MIN_MS // 2  # the child's clock was ahead
        with Compactor(conn) as c:

            def all_compacted() -> bool:
                c.compact_once("faked", 0)
                index = _index(conn, "faked")
                return max(index) == 1 and all(e.kind == KIND_COMPACTED for e in index.values())

            wait_until(all_compacted, 30, "the entry written under faketime to compact")
        assert [v for _, v in _values(conn, "faked")] == [b"from-the-future", b"now"]


def test_writer_clock_ahead_does_not_freeze_time_retention(
    config: llog.LlogConfig, skewed: Callable[[int], None]
) -> None:
    """A record stamped 10 minutes ahead used to pin time retention (whole leading
    entries only): the running service now expires it by its commit's age."""
    cfg = replace(config, compact_min_age_ms=TEN_MIN_MS, compactor_pass_interval_s=0.2,
                  compactor_discovery_interval_s=0.2, vacuum_interval_s=0)
    with llog.Connection(cfg) as conn:
        llog.Topics(conn).create("pinned", 1, retention_ms=2000)
        skewed(TEN_MIN_MS)
        with llog.Writer(conn) as w:
            w.append("pinned", 0, [b"stamped-ahead"])
        skewed(0)
        with llog.Writer(conn) as w:
            w.append("pinned", 0, [b"now-0"])
            w.append("pinned", 0, [b"now-1"])
        with CompactorService(cfg, http=False):
            wait_until(lambda: read_control(conn, "pinned", 0).control.log_start_offset >= 2, 30,
                       "time retention to pass the record stamped ahead")
        assert all(end >= 2 for end in _index(conn, "pinned"))


class _UnknownOutcome:
    """Wraps the writer's real Etcd: the armed commit is applied, then ``meanwhile``
    runs (other processes' work), then the call raises as if the reply were lost."""

    def __init__(self, etcd: Any, meanwhile: Callable[[], None]) -> None:
        self.real_txn = etcd.txn
        self.meanwhile = meanwhile
        self.armed = False

    def __call__(self, compares: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op] = ()) -> TxnResult:
        r: TxnResult = self.real_txn(compares, success, failure)
        if self.armed:
            self.armed = False
            assert r.succeeded
            self.meanwhile()
            raise CoordinationError("etcd txn failed: injected: the reply was lost")
        return r


@pytest.fixture
def conns(config: llog.LlogConfig) -> Iterator[Callable[[int], tuple[llog.Connection, llog.Connection]]]:
    """The writer's connection and the other processes' (its compactor with the given
    minimum age)."""
    opened: list[llog.Connection] = []

    def make(min_age_ms: int) -> tuple[llog.Connection, llog.Connection]:
        opened.extend([llog.Connection(config), llog.Connection(replace(config, compact_min_age_ms=min_age_ms))])
        return opened[-2], opened[-1]

    yield make
    for c in opened:
        c.close()


def _append_with_unknown_outcome(
    wconn: llog.Connection, other: llog.Connection, topic: str, monkeypatch: pytest.MonkeyPatch
) -> llog.AppendResult:
    """A non-idempotent append whose commit applies, then (before the writer hears
    back) another writer materializes it and a compactor (``other``'s config) runs,
    then the reply is lost."""

    def meanwhile() -> None:
        with llog.Writer(other) as w2:
            w2.append(topic, 0, [b"next"])  # materializes the lost append's pending
        with Compactor(other) as c:
            c.compact_once(topic, 0)

    fault = _UnknownOutcome(wconn.etcd, meanwhile)
    monkeypatch.setattr(wconn.etcd, "txn", fault)
    with llog.Writer(wconn) as w:
        fault.armed = True
        res = w.append(topic, 0, [b"once"])
    assert not fault.armed
    return res


def test_writer_clock_behind_cannot_get_its_key_compacted_before_it_resolves(
    conns: Callable[[int], tuple[llog.Connection, llog.Connection]],
    skewed: Callable[[int], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """created_at_ms 10 minutes in the past looked older than the default minimum age
    (2 min): compaction replaced the index key the writer then looked for, and it
    appended again. By revision the entry is seconds old: the key stays."""
    wconn, other = conns(llog.LlogConfig().compact_min_age_ms)
    llog.Topics(wconn).create("behind", 1)
    skewed(-TEN_MIN_MS)
    res = _append_with_unknown_outcome(wconn, other, "behind", monkeypatch)
    assert (res.start_offset, res.end_offset) == (0, 0)
    assert _values(other, "behind") == [(0, b"once"), (1, b"next")]
    assert _index(other, "behind")[0].kind == WAL


def test_resolution_finds_an_append_compaction_already_rewrote(
    conns: Callable[[int], tuple[llog.Connection, llog.Connection]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Compaction with no minimum age replaces the WAL key between the lost reply and
    the writer's lookup; the control key's history still says the commit was ours."""
    wconn, other = conns(0)
    llog.Topics(wconn).create("rewritten", 1)
    res = _append_with_unknown_outcome(wconn, other, "rewritten", monkeypatch)
    assert (res.start_offset, res.end_offset) == (0, 0)
    # The writer closing settled "next", so one COMPACTED entry replaced both.
    assert [(end, e.kind) for end, e in _index(other, "rewritten").items()] == [(1, KIND_COMPACTED)]
    assert _values(other, "rewritten") == [(0, b"once"), (1, b"next")]


def test_get_at_reads_history_until_it_is_compacted(private_etcd: PrivateEtcd, config: llog.LlogConfig) -> None:
    with llog.Connection(private_etcd.config(config)) as conn:
        etcd = conn.etcd
        r1 = etcd.put("k", b"one")
        r2 = etcd.put("k", b"two")
        assert etcd.get_at("k", r1 - 1) is None
        got = etcd.get_at("k", r2 - 1)
        assert got is not None and (got.value, got.mod_revision) == (b"one", r1)
        EtcdMaintenance(etcd).compact(r2)
        with pytest.raises(HistoryCompacted) as info:
            etcd.get_at("k", r1)
        assert info.value.key == "k" and info.value.revision == r1
        got = etcd.get_at("k", r2)
        assert got is not None and got.value == b"two"


def test_resolution_without_history_falls_back_to_the_index_key(
    private_etcd: PrivateEtcd, config: llog.LlogConfig
) -> None:
    """With the control's history compacted, the WAL key decides if it still can; a
    compacted range leaves the outcome ambiguous instead of appending twice."""
    with llog.Connection(replace(private_etcd.config(config), compact_min_age_ms=0)) as conn:
        llog.Topics(conn).create("nohistory", 1)
        with llog.Writer(conn) as w:
            first = w.append("nohistory", 0, [b"a"])
            w.append("nohistory", 0, [b"b"])
            w.append("nohistory", 0, [b"c"])
        st = read_control(conn, "nohistory", 0)
        EtcdMaintenance(conn.etcd).compact(st.mod_revision)

        def resolve(start: int) -> llog.codec.etcd_values.partition.Pending | None:
            return find_committed(conn, "nohistory", 0, first.append_id, st.control, st.mod_revision, [start], 1)

        found = resolve(0)
        assert found is not None and (found.start_offset, found.data_key) == (0, first.data_key)
        assert resolve(1) is None  # another append's WAL key: this attempt did not commit
        with Compactor(conn) as c:
            assert c.compact_once("nohistory", 0).outcome == COMPACTED
        with pytest.raises(AmbiguousCommit):
            resolve(0)


def test_revision_clock_ages_by_its_own_samples_and_persists_them(conn: llog.Connection) -> None:
    t = _FakeTime()
    clock = RevisionClock(conn, monotonic=lambda: t.mono, wall=lambda: t.wall)
    assert clock.aged_revision(1000) == 0  # no history: nothing is old enough
    r0 = clock.observe()
    conn.etcd.put(conn.keys.revision_clock() + "-probe", b"x")
    t.advance(5)
    r1 = clock.observe()
    assert r1 > r0
    assert clock.aged_revision(5000) == r0
    assert clock.aged_revision(6000) == 0
    assert clock.aged_revision(0) > r1  # no minimum age: every key
    clock.save()
    # A new process (its monotonic clock elsewhere) judges ages from the saved samples.
    t2 = _FakeTime()
    t2.mono, t2.wall = 50.0, t.wall + 3
    again = RevisionClock.load(conn, monotonic=lambda: t2.mono, wall=lambda: t2.wall)
    assert again.aged_revision(8000) == r0
    assert again.aged_revision(3000) == r1


def test_revision_clock_resolves_contradictions_low_and_stays_bounded(conn: llog.Connection) -> None:
    """Samples merged from hosts whose clocks disagree count at the lower revision; a
    long history is thinned but keeps its oldest sample."""
    t = _FakeTime()
    wall_ms = round(t.wall * 1000)
    contradictory = [[wall_ms - 20_000, 100], [wall_ms - 10_000, 50]]
    conn.etcd.put(conn.keys.revision_clock(), msgpack.packb({"samples": contradictory}))
    clock = RevisionClock.load(conn, monotonic=lambda: t.mono, wall=lambda: t.wall)
    assert clock.aged_revision(15_000) == 50
    long = [[wall_ms - 1000 * (5000 - i), 10 + i] for i in range(5000)]
    conn.etcd.put(conn.keys.revision_clock(), msgpack.packb({"samples": long}))
    clock = RevisionClock.load(conn, monotonic=lambda: t.mono, wall=lambda: t.wall)
    clock.save()
    kv = conn.etcd.get(conn.keys.revision_clock())
    assert kv is not None
    assert len(msgpack.unpackb(kv.value)["samples"]) <= MAX_SAMPLES
    assert clock.aged_revision(5_000_000) == 10  # the oldest sample survives thinning
    assert clock.aged_revision(2_000) == 5008  # recent ones are kept at full resolution


def test_etcd_failing_while_an_unknown_outcome_is_resolved_is_ambiguous(
    conns: Callable[[int], tuple[llog.Connection, llog.Connection]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commit applied and its reply was lost; then etcd fails the history reads that
    would resolve it. That is AmbiguousCommit (the append exists), never a plain
    CoordinationError a client would take for "nothing written" and send again."""
    wconn, other = conns(0)
    llog.Topics(wconn).create("flaky", 1)

    def meanwhile() -> None:
        with llog.Writer(other) as w2:
            w2.append("flaky", 0, [b"next"])  # the history now has to be read

        def down(*_a: Any, **_kw: Any) -> Any:
            raise CoordinationError("etcd get_at failed: injected: unavailable")

        monkeypatch.setattr(wconn.etcd, "get_at", down)

    fault = _UnknownOutcome(wconn.etcd, meanwhile)
    monkeypatch.setattr(wconn.etcd, "txn", fault)
    with llog.Writer(wconn) as w:
        fault.armed = True
        [out] = w.append_shared([llog.AppendGroup("flaky", 0, [b"once"])])
    assert isinstance(out, llog.AppendFailure)
    assert type(out.error) is AmbiguousCommit, out.error
    assert _values(other, "flaky") == [(0, b"once"), (1, b"next")]



@pytest.mark.skipif(shutil.which("faketime") is None, reason="needs Debian's faketime (apt-get install faketime)")
def test_load_test_skewed_process_keeps_its_sleeps_and_monotonic_clock() -> None:
    """Under the load test's skew (libfaketime, monotonic left true) ``time.sleep`` used
    to fail with EINVAL, which broke botocore's retry back-off in the skewed broker."""
    probe = "import time; m = time.monotonic(); time.sleep(0.05); print(time.time(), time.monotonic() - m)"
    out = subprocess.run([sys.executable, "-c", probe], env={**os.environ, **skew_env("+600s")},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    wall, slept = map(float, out.stdout.split())
    assert wall - time.time() > 590  # the wall clock is ten minutes ahead
    assert 0.05 <= slept < 5  # the sleep slept, timed by a true monotonic clock
