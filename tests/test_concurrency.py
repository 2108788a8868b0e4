"""Acceptance: 2 processes x 8 threads append 5,000 groups across 16 partitions of 2
topics through ``append_shared``. Per partition the acknowledged ranges tile
``[0, next_offset)`` exactly, and every acknowledged record reads back byte-equal at its
offset (full scan of every partition, plus point reads of a sample)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import llog
from llog.codec.etcd_values.partition import IndexEntry
from llog.state.control import read_control
from tests.conftest import config_env
from tests.workers.append_worker import payload

WORKER = Path(__file__).parent / "workers" / "append_worker.py"
TOPICS = {"conc-a": 8, "conc-b": 8}
CHILDREN = 2
THREADS = 8
GROUPS = 5000
POINT_READS = 300

Acked = tuple[int, int, list[str]]  # start, end, record ids


def _run_children(cfg: llog.LlogConfig) -> list[dict[str, object]]:
    env = config_env(cfg)
    specs = [f"{t}:{n}" for t, n in TOPICS.items()]
    procs = []
    try:
        for child in range(CHILDREN):
            share = GROUPS // CHILDREN + (1 if child < GROUPS % CHILDREN else 0)
            procs.append(subprocess.Popen(
                [sys.executable, str(WORKER), f"c{child}", str(THREADS), str(share), str(child), *specs],
                env=env, text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            ))
        for p in procs:
            assert p.stdout is not None
            assert p.stdout.readline().strip() == "ready"
        # Both children are connected and warm: start them together for real contention.
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        lines: list[dict[str, object]] = []
        for p in procs:
            out, _ = p.communicate(timeout=500)
            assert p.returncode == 0, f"writer child exited with {p.returncode}"
            rows = out.splitlines()
            assert rows[-1] == "done"
            lines.extend(json.loads(r) for r in rows[:-1])
        return lines
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_two_processes_eight_threads_tile_every_partition(config: llog.LlogConfig) -> None:
    with llog.Connection(config) as conn:
        topics = llog.Topics(conn)
        for name, n in TOPICS.items():
            topics.create(name, n)

        outcomes = _run_children(config)
        assert len(outcomes) == GROUPS
        failed = [o for o in outcomes if "error" in o]
        assert not failed, failed[:5]

        acked: dict[tuple[str, int], list[Acked]] = {}
        for o in outcomes:
            ids = o["ids"]
            assert isinstance(ids, list)
            acked.setdefault((str(o["t"]), int(o["p"])), []).append((int(o["s"]), int(o["e"]), ids))  # type: ignore[call-overload]
        assert len(acked) == sum(TOPICS.values()), "every partition was written"

        expected: dict[tuple[str, int], list[str]] = {}
        for (topic, p), ranges in acked.items():
            ranges.sort()
            ctl = read_control(conn, topic, p).control
            nxt = 0
            ids_in_order: list[str] = []
            for start, end, ids in ranges:
                assert start == nxt, f"{topic}/{p}: acknowledged range [{start}, {end}] after {nxt - 1}"
                assert end - start + 1 == len(ids)
                ids_in_order.extend(ids)
                nxt = end + 1
            assert nxt == ctl.next_offset, f"{topic}/{p}: acks end at {nxt}, next_offset {ctl.next_offset}"
            # Both writers closed cleanly, so nothing is left pending and the index
            # alone covers the partition, one entry per acknowledged group.
            assert ctl.pending is None
            keys = conn.keys
            index = [
                (keys.end_offset_of(kv.key), IndexEntry.decode(kv.value).msg_count)
                for kv in conn.etcd.scan(keys.index_prefix(topic, p), keys.index_range_end(topic, p))
            ]
            assert index == [(end, end - start + 1) for start, end, _ in ranges]
            expected[(topic, p)] = ids_in_order

        with llog.Reader(conn) as reader:
            for (topic, p), ids in expected.items():
                got = [(r.offset, r.value, r.key) for r in reader.scan(topic, p)]
                want = [(off, *payload(i)) for off, i in enumerate(ids)]
                assert got == want, f"{topic}/{p}: scan differs from the acknowledged records"
            rnd = random.Random(7)
            parts = sorted(expected)
            for _ in range(POINT_READS):
                topic, p = rnd.choice(parts)
                off = rnd.randrange(len(expected[(topic, p)]))
                rec = reader.read(topic, p, off)
                assert rec is not None
                assert (rec.topic, rec.partition, rec.offset) == (topic, p, off)
                assert (rec.value, rec.key) == payload(expected[(topic, p)][off])
            for (topic, p), ids in expected.items():
                assert reader.read(topic, p, len(ids)) is None
