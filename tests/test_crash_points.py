"""Acceptance: a writer process SIGKILLed after the PUT, after the commit txn and after
materialization, 20 times each. No acknowledged record is lost or duplicated, every
partition's offsets tile ``[0, next_offset)``, and the next writer or reader settles the
pending appends the dead writer left."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

import llog
from llog.codec.etcd_values.partition import IndexEntry, Pending
from llog.state.control import read_control
from tests.conftest import config_env

WORKER = Path(__file__).parent / "workers" / "crash_writer.py"
TOPIC = "crash"
PARTITIONS = 3
ROUNDS = 20
CALLS = 4
#: A round that takes longer than this is hung: the worker's process group is killed.
ROUND_LIMIT_S = 120.0


@dataclass
class Ledger:
    """What the children told us, across rounds."""

    #: partition -> {start offset: ids} of every acknowledged group.
    acked: dict[int, dict[int, list[str]]] = field(default_factory=dict)
    #: partition -> groups of killed calls: committed or not, never acknowledged.
    maybe: dict[int, list[list[str]]] = field(default_factory=dict)
    #: partition -> {id: offset} of every record scanned so far.
    seen: dict[int, dict[str, int]] = field(default_factory=dict)

    def ack(self, partition: int, start: int, ids: list[str]) -> None:
        groups = self.acked.setdefault(partition, {})
        assert start not in groups, f"partition {partition}: offset {start} acknowledged twice"
        groups[start] = ids


@dataclass(frozen=True)
class Round:
    attempts: list[list[tuple[int, list[str]]]]
    acks: list[dict[str, object]]
    settling: int | None


class CrashWorker:
    """The worker process: one forked writer child per round."""

    def __init__(self, cfg: llog.LlogConfig) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER), TOPIC, str(PARTITIONS)],
            env=config_env(cfg) | {"LLOG_SETTLE_AFTER_MS": str(cfg.settle_after_ms)},
            text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True,
        )
        assert self._line() == "ready"

    def _line(self) -> str:
        assert self.proc.stdout is not None
        # A hung child would block readline forever; kill the whole group instead.
        timer = threading.Timer(ROUND_LIMIT_S, os.killpg, (self.proc.pid, signal.SIGKILL))
        timer.start()
        try:
            return self.proc.stdout.readline().strip()
        finally:
            timer.cancel()

    def run(self, rnd: int, point: str, kill_at: int) -> Round:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{rnd} {point} {kill_at} {CALLS}\n")
        self.proc.stdin.flush()
        attempts: list[list[tuple[int, list[str]]]] = []
        acks: list[dict[str, object]] = []
        settling = None
        while True:
            line = self._line()
            assert line, "crash worker exited"
            msg = json.loads(line)
            assert "error" not in msg and "failed" not in msg, msg
            if "status" in msg:
                assert msg["status"] == [signal.SIGKILL, -1], f"child was not killed at {point}: {msg}"
                return Round(attempts, acks, settling)
            if "attempt" in msg:
                attempts.append([(int(p), list(ids)) for p, ids in msg["groups"]])
            elif "ack" in msg:
                acks.append(msg)
            else:
                settling = int(msg["settling"])

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(30)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


@pytest.fixture
def crash_conn(config: llog.LlogConfig) -> Iterator[llog.Connection]:
    # Readers settle any pending at once, so no test waits for one to age.
    with llog.Connection(replace(config, settle_after_ms=0)) as conn:
        llog.Topics(conn).create(TOPIC, PARTITIONS)
        yield conn


def _kill_at(point: str, rnd: int) -> int:
    """Which occurrence of the point kills the child: varied, so each round leaves a
    different number of acknowledged appends behind (including none)."""
    rng = random.Random(f"{point}/{rnd}")
    if point == "after_put":
        return rng.randint(1, CALLS)  # one PUT per call
    if point == "after_commit":
        return rng.randint(1, CALLS * PARTITIONS)  # one commit per group
    return rng.randint(1, PARTITIONS)  # one settle per pending partition


def _pending(conn: llog.Connection) -> dict[int, Pending]:
    out = {}
    for p in range(PARTITIONS):
        pend = read_control(conn, TOPIC, p).control.pending
        if pend is not None:
            out[p] = pend
    return out


def _check_round(point: str, kill_at: int, r: Round, ledger: Ledger, pending: dict[int, Pending]) -> None:
    """What the child acknowledged is exactly what it should have reached, and it left
    the pending appends its kill point implies."""
    done_calls = {
        "after_put": kill_at - 1,
        "after_commit": (kill_at - 1) // PARTITIONS,
        "after_settle": CALLS,
    }[point]
    assert len(r.acks) == done_calls * PARTITIONS
    assert {int(str(a["ack"])) for a in r.acks} == set(range(done_calls))
    for a in r.acks:
        ids = a["ids"]
        assert isinstance(ids, list)
        assert int(str(a["e"])) - int(str(a["s"])) + 1 == len(ids)
        ledger.ack(int(str(a["p"])), int(str(a["s"])), [str(i) for i in ids])
    if point == "after_settle":
        assert r.settling == PARTITIONS
        # Killed right after the kill_at-th materialization: the rest is still pending.
        assert len(pending) == PARTITIONS - kill_at
        return
    assert len(r.attempts) == done_calls + 1
    for p, ids in r.attempts[-1]:
        ledger.maybe.setdefault(p, []).append(ids)
    if done_calls:
        # The child's last acknowledged append on each partition is still pending.
        assert len(pending) == PARTITIONS
    if point == "after_commit":
        assert pending, "the commit the child died after left no pending"


def _settle_by_writer(conn: llog.Connection, rnd: int, ledger: Ledger) -> None:
    """A new writer's first commit materializes the pending it finds; settle_all then
    settles its own."""
    before = _pending(conn)
    with llog.Writer(conn) as w:
        for p in range(PARTITIONS):
            ids = [f"m{rnd}.p{p}"]
            res = w.append(TOPIC, p, [i.encode() for i in ids])
            ledger.ack(p, res.start_offset, ids)
            if p in before:
                old = before[p]
                kv = conn.etcd.get(conn.keys.index(TOPIC, p, old.end_offset))
                assert kv is not None, f"partition {p}: the new commit did not materialize the old pending"
                assert IndexEntry.decode(kv.value).append_id == old.append_id
        assert len(_pending(conn)) == PARTITIONS
        assert w.settle_all() == PARTITIONS
    assert _pending(conn) == {}


def _check_log(conn: llog.Connection, point: str, ledger: Ledger, rnd: int) -> None:
    """Scan what each partition gained since the last check (the scan also settles
    pending appends) and check the whole log so far against the ledger."""
    killed_present = 0
    with llog.Reader(conn) as reader:
        for p in range(PARTITIONS):
            at = ledger.seen.setdefault(p, {})
            for rec in reader.scan(TOPIC, p, len(at)):
                i = rec.value.decode()
                assert i not in at, f"partition {p}: {i} at offsets {at[i]} and {rec.offset}"
                assert rec.offset == len(at), f"partition {p}: offset {rec.offset} after {len(at) - 1}"
                at[i] = rec.offset
            ctl = read_control(conn, TOPIC, p).control
            assert len(at) == ctl.next_offset, f"partition {p}: offsets do not tile [0, {ctl.next_offset})"
            acked_ids = set()
            for start, group in ledger.acked.get(p, {}).items():
                assert [at.get(i) for i in group] == list(range(start, start + len(group))), (
                    f"round {rnd} ({point}), partition {p}: acknowledged group {group} lost or moved"
                )
                acked_ids.update(group)
            # Anything else must be a whole group of a killed call, committed before the
            # kill but never acknowledged: present at most once (checked above), and whole.
            extra = set(at) - acked_ids
            for group in ledger.maybe.get(p, []):
                present = extra & set(group)
                if present:
                    assert present == set(group), f"partition {p}: part of group {group}"
                    offs = [at[i] for i in group]
                    assert offs == list(range(offs[0], offs[0] + len(group)))
                    extra -= present
                    killed_present += group[0].startswith(f"r{rnd}.")
            assert not extra, f"partition {p}: records nobody appended: {sorted(extra)[:5]}"
    if point == "after_put":
        assert killed_present == 0, "a call killed after its PUT committed something"
    if point == "after_commit":
        assert killed_present >= 1, "the commit the child died after is not readable"


@pytest.mark.parametrize("point", ["after_put", "after_commit", "after_settle"])
def test_sigkill_at_commit_point(crash_conn: llog.Connection, point: str) -> None:
    ledger = Ledger()
    worker = CrashWorker(crash_conn.config)
    try:
        for rnd in range(ROUNDS):
            kill_at = _kill_at(point, rnd)
            r = worker.run(rnd, point, kill_at)
            _check_round(point, kill_at, r, ledger, _pending(crash_conn))
            # Alternate who settles what the dead writer left: the next writer, or a reader.
            if rnd % 2:
                _settle_by_writer(crash_conn, rnd, ledger)
            _check_log(crash_conn, point, ledger, rnd)
            assert _pending(crash_conn) == {}, f"round {rnd}: pending left after the reader's scan"
    finally:
        worker.close()
    # One full scan at the end: the log still reads back exactly as checked round by round.
    with llog.Reader(crash_conn) as reader:
        for p in range(PARTITIONS):
            assert {rec.value.decode(): rec.offset for rec in reader.scan(TOPIC, p)} == ledger.seen[p]
    # Only a call killed after its PUT leaves a blob nothing references (vacuum's job).
    keys = crash_conn.keys
    referenced = {
        IndexEntry.decode(kv.value).data_key
        for p in range(PARTITIONS)
        for kv in crash_conn.etcd.scan(keys.index_prefix(TOPIC, p), keys.index_range_end(TOPIC, p))
    }
    listed = {o.key for o in crash_conn.store.list(keys.wal_prefix())}
    assert referenced <= listed
    assert len(listed - referenced) == (ROUNDS if point == "after_put" else 0)
