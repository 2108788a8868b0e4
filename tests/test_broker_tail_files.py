"""The shared tail-cache directory (``LLOG_TAIL_CACHE_DIR``) holds only live brokers'
files: a broker killed with SIGKILL leaves its directory behind, and the next broker
to start (or a running one's periodic sweep) removes it, because no process holds its
lock any more; a live broker's files are never touched; a broker that stops cleanly
removes its own."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from llog.broker.filecache import FileTailCache, remove_dead_owners
from llog.config import LlogConfig
from llog.connection import Connection
from llog.metrics import Metrics
from tests.broker_harness import (  # noqa: F401 (the fixture conn)
    BrokerProcess,
    broker_process,
    conn_with_topic_t,
)
from tests.conftest import wait_until


def _owners(base: Path) -> set[str]:
    return {p.name for p in base.iterdir() if p.is_dir()}


def _locks(base: Path) -> set[str]:
    return {p.name.removesuffix(".lock") for p in base.glob("*.lock")}


def _produce_and_wait_for_file(b: BrokerProcess, base: Path, partition: int) -> str:
    """Produce one record through ``b``; the owner directory its file landed in."""
    status, resp = b.post("/produce", {"topic_partitions": [{"topic": "t", "partition": partition, "records": ["x"]}]})
    assert status == 200, resp
    start = resp["results"][0]["start_offset"]
    wait_until(lambda: any(base.glob(f"*/t/{partition}/{start}-1")), 30, "the broker's tail cache file")
    [path] = base.glob(f"*/t/{partition}/{start}-1")
    return path.relative_to(base).parts[0]


def test_killed_brokers_files_are_removed_by_the_next_broker(
    config: LlogConfig, conn: Connection, tmp_path: Path
) -> None:
    env = {"LLOG_TAIL_CACHE_DIR": str(tmp_path / "tail")}
    base = tmp_path / "tail" / config.root_prefix
    with broker_process(config, **env) as live:
        live_owner = _produce_and_wait_for_file(live, base, 0)
        with broker_process(config, **env) as doomed:
            dead_owner = _produce_and_wait_for_file(doomed, base, 1)
            assert dead_owner != live_owner
            assert dead_owner.endswith(f"-{doomed.proc.pid}")
            doomed.kill()
        assert {live_owner, dead_owner} <= _owners(base) and {live_owner, dead_owner} <= _locks(base)

        with broker_process(config, **env) as fresh:  # sweeps at start, before it listens
            assert dead_owner not in _owners(base) and dead_owner not in _locks(base)
            assert live_owner in _owners(base) and live_owner in _locks(base)  # alive: untouched
            # The live broker's file still serves the new one.
            status, resp = fresh.post("/consume", {
                "topic_partitions": [{"topic": "t", "partition": 0, "fetch_offset": 0}], "max_wait_ms": 0})
            assert status == 200 and [r["value"] for r in resp["topic_partitions"][0]["records"]] == ["x"]
    # Each stopped cleanly and removed its own.
    assert _owners(base) == set() and _locks(base) == set()


def test_sweep_removes_only_owners_whose_lock_is_free(tmp_path: Path) -> None:
    for owner in ("dead", "alive", "dead-no-files"):
        (tmp_path / f"{owner}.lock").touch()
    for owner in ("dead", "alive"):
        (tmp_path / owner / "t" / "0").mkdir(parents=True)
        (tmp_path / owner / "t" / "0" / "0-1").write_bytes(b"x")
    # Held through another open file description: what a live broker process does.
    held = os.open(tmp_path / "alive.lock", os.O_RDWR)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert sorted(remove_dead_owners(tmp_path)) == ["dead", "dead-no-files"]
        assert _owners(tmp_path) == {"alive"} and _locks(tmp_path) == {"alive"}
        assert remove_dead_owners(tmp_path) == []
    finally:
        os.close(held)
    assert remove_dead_owners(tmp_path) == ["alive"]
    assert list(tmp_path.iterdir()) == []


def test_a_running_broker_sweeps_periodically(tmp_path: Path) -> None:
    cache = FileTailCache(tmp_path, "root", "me", 1 << 20, Metrics(), sweep_interval_s=0.05)
    base = tmp_path / "root"
    try:
        # A broker that died after this one started: only the periodic sweep can see it.
        (base / "gone-1" / "t" / "0").mkdir(parents=True)
        (base / "gone-1.lock").touch()
        wait_until(lambda: not (base / "gone-1").exists() and not (base / "gone-1.lock").exists(), 30,
                   "the periodic sweep")
        assert _locks(base) == {cache.own.name}  # its own lock is held: never swept
    finally:
        cache.close()
    assert list(base.iterdir()) == []
