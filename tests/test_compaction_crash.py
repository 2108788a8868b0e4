"""Acceptance: a compactor child process SIGKILLed after the blob PUT, after creating
its record, and after each of the three stages, 20 rounds each; another compactor
resumes; a full scan right after the kill and one after the resume both return exactly
the records written (so they are byte-identical), and the index holds exactly one entry
per covered range."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import llog
from compactor import Compactor
from compactor.compact import read_cursor
from llog import AppendGroup, Record
from llog.codec.etcd_values.compaction import CompactionRecord
from llog.codec.etcd_values.partition import COMPACTED, IndexEntry
from llog.records import Headers
from llog.state.control import read_control
from tests.conftest import config_env

WORKER = Path(__file__).parent / "workers" / "compactor_crash.py"
TOPIC = "crash"
ROUNDS = 20
#: kill point -> the stage the record is left at (None: no record left).
POINTS = {
    "after_put": None,
    "after_record": "WRITING_COMPACTED_INDEX",
    "after_WRITING_COMPACTED_INDEX": "DELETING_OLD",
    "after_DELETING_OLD": "UPDATING_CURSOR",
    "after_UPDATING_CURSOR": None,
}
MAX_RECORDS = 4  # two appends of two records per compaction run
#: Each round compacts two runs per partition (the child's, then the resumer's).
APPENDS_PER_ROUND = 4


Row = tuple[int, int, bytes | None, bytes, Headers]


def _scan(conn: llog.Connection, p: int) -> list[Row]:
    with llog.Reader(conn) as r:
        return [(c.offset, c.timestamp, c.key, c.value, c.headers) for c in r.scan(TOPIC, p)]


def _index(conn: llog.Connection, p: int) -> list[tuple[int, int, IndexEntry]]:
    keys = conn.keys
    out = []
    for kv in conn.etcd.scan(keys.index_prefix(TOPIC, p), keys.index_range_end(TOPIC, p)):
        e = IndexEntry.decode(kv.value)
        end = keys.end_offset_of(kv.key)
        out.append((end - e.msg_count + 1, end, e))
    return out


def _check_index(conn: llog.Connection, p: int) -> None:
    """Entries tile [log_start, next_offset): one per covered range, no overlap, no
    gap; everything below the cursor is compacted, nothing above it."""
    ctl = read_control(conn, TOPIC, p).control
    cursor = read_cursor(conn, TOPIC, p)[0] or 0
    nxt = ctl.log_start_offset
    for start, end, e in _index(conn, p):
        assert start == nxt, f"partition {p}: entry [{start}, {end}] does not start at {nxt}"
        assert (e.kind == COMPACTED) == (end < cursor), f"partition {p}: [{start}, {end}] {e.kind}"
        nxt = end + 1
    assert nxt == ctl.next_offset


def _write(w: llog.Writer, expected: dict[int, list[Row]], rnd: int) -> None:
    """Append this round's records: two runs' worth per partition, in one shared blob.
    Writing per round (not all up front) keeps each full scan short."""
    groups = []
    for p in range(len(POINTS)):
        for n in range(rnd * APPENDS_PER_ROUND, (rnd + 1) * APPENDS_PER_ROUND):
            records = [
                Record(f"{p}/{n}".encode(), key=b"k", timestamp=n, headers=(("n", b"%d" % n),)),
                Record(b"second", timestamp=n),
            ]
            groups.append(AppendGroup(TOPIC, p, records))
            rows = expected[p]
            base = len(rows)
            rows.extend((base + i, n, r.key, r.value, r.headers) for i, r in enumerate(records))
    w.append_shared(groups)


def test_sigkill_at_every_step_then_resume(config: llog.LlogConfig) -> None:
    cfg = replace(config, compact_min_age_ms=0, settle_after_ms=0, compact_max_records=MAX_RECORDS)
    env = config_env(cfg) | {
        "LLOG_COMPACT_MIN_AGE_MS": "0",
        "LLOG_SETTLE_AFTER_MS": "0",
        "LLOG_COMPACT_MAX_RECORDS": str(MAX_RECORDS),
    }
    points = list(POINTS)
    expected: dict[int, list[Row]] = {p: [] for p in range(len(points))}
    with llog.Connection(cfg) as conn, Compactor(conn) as resumer, llog.Writer(conn) as w:
        llog.Topics(conn).create(TOPIC, len(points))
        server = subprocess.Popen(
            [sys.executable, str(WORKER), TOPIC], env=env, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )
        assert server.stdin is not None and server.stdout is not None
        assert server.stdout.readline().strip() == "ready"
        try:
            for rnd in range(ROUNDS):
                _write(w, expected, rnd)
                # One child process per kill point, all at once (one partition each).
                server.stdin.write(" ".join(f"{p}={pt}" for p, pt in enumerate(points)) + "\n")
                server.stdin.flush()
                statuses = json.loads(server.stdout.readline())
                assert statuses == {str(p): [signal.SIGKILL, -1] for p in range(len(points))}, statuses
                _verify_and_resume(conn, resumer, points, expected, rnd)
        finally:
            server.stdin.close()
            server.wait(30)
        # The blobs the after_put kills left are unreferenced (vacuum's job), one per round.
        p = points.index("after_put")
        listed = {o.key for o in conn.store.list(conn.keys.compacted_prefix(TOPIC, p))}
        referenced = {e.data_key for _, _, e in _index(conn, p) if e.kind == COMPACTED}
        assert referenced <= listed
        assert len(listed - referenced) == ROUNDS
        assert conn.metrics.value("llog_compactor_recoveries_total", stage="DELETING_OLD") == ROUNDS


def _verify_and_resume(
    conn: llog.Connection, resumer: Compactor, points: list[str], expected: dict[int, list[Row]], rnd: int
) -> None:
    for p, point in enumerate(points):
        kv = conn.etcd.get(conn.keys.compaction(TOPIC, p))
        left = CompactionRecord.decode(kv.value).stage if kv is not None else None
        assert left == POINTS[point], f"round {rnd}, killed {point}: record at {left}"
        assert _scan(conn, p) == expected[p], f"round {rnd}: wrong records right after {point}"
        res = resumer.compact_once(TOPIC, p)
        if left is None:
            assert res.recovered is None
        else:
            assert res.recovered is not None and res.recovered.stage == left
            assert res.recovered.finished.outcome == "done"
        assert res.outcome == "compacted", res
        assert conn.etcd.get(conn.keys.compaction(TOPIC, p)) is None
        assert _scan(conn, p) == expected[p], f"round {rnd}: wrong records after resuming {point}"
        _check_index(conn, p)
