"""Acceptance: group members that die and join, and the exactly-once recipe, in real
child processes against the real servers."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import llog
from llog.groups import GroupOffsets
from tests.conftest import config_env, wait_until

WORKERS = Path(__file__).parent / "workers"
PARTITIONS = 8


def _spawn(script: str, args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    p = subprocess.Popen(
        [sys.executable, str(WORKERS / script), *args],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert p.stdout is not None
    line = p.stdout.readline()  # the worker says when it is up
    assert line.strip() in ("joined", "started"), p.stderr.read() if p.stderr else line
    return p


def _produce(conn: llog.Connection, topic: str, start: int, n: int) -> set[tuple[int, str]]:
    produced: set[tuple[int, str]] = set()
    with llog.Writer(conn) as w:
        groups = []
        for p in range(PARTITIONS):
            vals = [f"{p}-{i}" for i in range(start, start + n)]
            groups.append(llog.AppendGroup(topic, p, [v.encode() for v in vals]))
            produced.update((p, v) for v in vals)
        w.append_shared(groups)
    return produced


def _all_committed(conn: llog.Connection, group: str, topic: str) -> bool:
    with llog.Reader(conn) as r:
        ends = {p: r.high_watermark(topic, p)[1] for p in range(PARTITIONS)}
    got = {c.partition: c.offset for c in GroupOffsets(conn, group).all()}
    return all(got.get(p) == ends[p] for p in range(PARTITIONS))


def test_members_die_and_join_at_least_once(conn: llog.Connection, tmp_path: Path) -> None:
    topic, group = "events", "workers"
    llog.Topics(conn).create(topic, PARTITIONS)
    env = config_env(conn.config)
    produced = _produce(conn, topic, 0, 200)
    outs = [tmp_path / f"m{i}.jsonl" for i in range(4)]
    members = [_spawn("group_member.py", [group, topic, str(outs[i]), f"m{i}"], env) for i in range(3)]
    try:
        wait_until(lambda: sum(o.stat().st_size for o in outs if o.exists()) > 0, 30, "first records")
        members[1].send_signal(signal.SIGKILL)
        members[1].wait()
        produced |= _produce(conn, topic, 200, 200)
        members.append(_spawn("group_member.py", [group, topic, str(outs[3]), "m3"], env))
        produced |= _produce(conn, topic, 400, 100)
        wait_until(lambda: _all_committed(conn, group, topic), 90, "every partition committed to its end")
    finally:
        for m in members:
            if m.poll() is None:
                m.send_signal(signal.SIGTERM)
        for m in members:
            m.wait(30)
    processed: list[tuple[int, int, str]] = []
    for o in outs:
        if o.exists():
            for line in o.read_text().splitlines():
                _t, p, off, v = json.loads(line)
                processed.append((p, off, v))
    assert {(p, v) for p, _off, v in processed} == produced  # nothing skipped
    for p, off, v in processed:  # and every record at its own offset
        assert v == f"{p}-{off}"


def test_exactly_once_recipe_survives_kills(conn: llog.Connection, tmp_path: Path) -> None:
    topic, group = "ledger", "eo"
    llog.Topics(conn).create(topic, PARTITIONS)
    env = config_env(conn.config)
    db_path = tmp_path / "out.db"
    produced = _produce(conn, topic, 0, 150)

    def rows() -> int:
        if not db_path.exists():
            return 0
        with sqlite3.connect(db_path) as db:
            try:
                return int(db.execute("select count(*) from output").fetchone()[0])
            except sqlite3.OperationalError:
                return 0

    for round_ in range(3):
        w = _spawn("exactly_once.py", [group, topic, str(db_path)], env)
        target = min(rows() + 50, len(produced))
        wait_until(lambda t=target: rows() >= t, 60, "progress")  # type: ignore[misc]
        w.send_signal(signal.SIGKILL)
        w.wait()
        produced |= _produce(conn, topic, 150 + round_ * 20, 20)
    w = _spawn("exactly_once.py", [group, topic, str(db_path)], env)
    try:
        wait_until(lambda: rows() >= len(produced), 90, "all records processed")
    finally:
        w.send_signal(signal.SIGTERM)
        w.wait(30)
    with sqlite3.connect(db_path) as db:
        out = db.execute("select partition, offset, value from output").fetchall()
    assert len(out) == len(produced)  # primary key makes a duplicate an error, so: exactly once
    assert {(p, v.decode()) for p, _o, v in out} == produced
    assert os.path.getsize(db_path) > 0
