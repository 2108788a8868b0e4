"""franz-go (and its kadm admin client), the Go Kafka client, against the Kafka
listener, on the suite's real etcd and S3 servers: ``tests/go/main.go`` is built with
the machine's Go (modules from the Go module proxy, cached in ``.cache/go`` of this
checkout) and run: kadm creates a topic, a zstd producer writes keyed records, a
consumer group reads and commits them, kadm reports no lag; llog's SDK checks the
records and the commits."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from llog.connection import Connection
from llog.groups.offsets import GroupOffsets
from llog.reader import Reader
from tests.test_kafka import KafkaBroker, kb_fixture  # noqa: F401 (the fixture kb)

SOURCES = Path(__file__).resolve().parent / "go"
CACHE = Path(__file__).resolve().parent.parent / ".cache" / "go"


@functools.cache
def _binary() -> Path:
    if shutil.which("go") is None:
        pytest.fail("the Go client tests need Go 1.26 or later (franz-go's requirement) on PATH")
    env = {**os.environ, "GOPATH": str(CACHE / "path"), "GOMODCACHE": str(CACHE / "mod"),
           "GOCACHE": str(CACHE / "build"), "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=readonly"}
    out = CACHE / "bin" / "goclient"
    proc = subprocess.run(["go", "build", "-o", str(out), "."], cwd=SOURCES, env=env, capture_output=True,
                          text=True, timeout=900)
    if proc.returncode != 0:
        pytest.fail(f"building tests/go failed:\n{proc.stderr[-4000:]}")
    return out


def test_franz_go_admin_produce_group_and_lag(kb: KafkaBroker, conn: Connection) -> None:
    proc = subprocess.run([str(_binary()), kb.bootstrap, "franz", "franz-group", "90"], capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    assert out[:2] == ["created franz", "produced 90"]
    records = sorted(tuple(line.split()[1:]) for line in out if line.startswith("record "))
    assert records == sorted((str(i % 3), str(i // 3), f"k{i}", f"v{i}") for i in range(90))  # each once
    # kadm's lag: partition, committed offset, end offset, lag
    assert sorted(line for line in out if line.startswith("lag ")) == [f"lag {p} 30 30 0" for p in range(3)]
    with Reader(conn) as r:
        for p in range(3):
            assert [(rec.key, rec.value) for rec in r.scan("franz", p, 0)] == [
                (f"k{i}".encode(), f"v{i}".encode()) for i in range(p, 90, 3)]
    offsets = GroupOffsets(conn, "franz-group")
    assert [c.offset if (c := offsets.get("franz", p)) else None for p in range(3)] == [30, 30, 30]
