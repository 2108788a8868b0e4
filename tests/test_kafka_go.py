"""The Go Kafka clients against the Kafka listener, on the suite's real etcd and S3
servers, built with the machine's Go (modules from the Go module proxy, cached in
``.cache/go`` of this checkout): franz-go (``tests/go/main.go``: kadm creates a topic,
a zstd producer writes keyed records, a consumer group reads and commits them, kadm
reports no lag) and sarama (``tests/go/sarama``: its cluster admin creates a topic, an
idempotent snappy producer writes keyed records, a consumer group reads and commits
them, the admin lists the commits); llog's SDK checks the records and the commits."""

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
from tests.build_lock import exclusive
from tests.test_kafka import KafkaBroker, kb_fixture  # noqa: F401 (the fixture kb)

SOURCES = Path(__file__).resolve().parent / "go"
CACHE = Path(__file__).resolve().parent.parent / ".cache" / "go"


@functools.cache
def _binary(package: str = ".") -> Path:
    if shutil.which("go") is None:
        pytest.fail("the Go client tests need Go 1.26 or later (franz-go's requirement) on PATH")
    env = {**os.environ, "GOPATH": str(CACHE / "path"), "GOMODCACHE": str(CACHE / "mod"),
           "GOCACHE": str(CACHE / "build"), "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=readonly"}
    out = CACHE / "bin" / ("goclient" if package == "." else Path(package).name)
    fresh = out.with_name(f"{out.name}-{os.getpid()}")
    with exclusive("go"):  # another worker's build done, this one takes Go's cache
        proc = subprocess.run(["go", "build", "-o", str(fresh), package], cwd=SOURCES, env=env, capture_output=True,
                              text=True, timeout=900)
        if proc.returncode != 0:
            pytest.fail(f"building tests/go {package} failed:\n{proc.stderr[-4000:]}")
        fresh.replace(out)  # one rename: a program another worker runs is never half-written
    return out


def _run_client(package: str, kb: KafkaBroker, conn: Connection, topic: str) -> list[str]:
    """Run a Go client's program on ``topic`` (90 records over 3 partitions, group
    ``{topic}-group``), check what every client prints and what llog stored and
    committed; the program's output lines."""
    proc = subprocess.run([str(_binary(package)), kb.bootstrap, topic, f"{topic}-group", "90"],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = proc.stdout.splitlines()
    assert out[:2] == [f"created {topic}", "produced 90"]
    records = sorted(tuple(line.split()[1:]) for line in out if line.startswith("record "))
    assert records == sorted((str(i % 3), str(i // 3), f"k{i}", f"v{i}") for i in range(90))  # each once
    with Reader(conn) as r:
        for p in range(3):
            assert [(rec.key, rec.value) for rec in r.scan(topic, p, 0)] == [
                (f"k{i}".encode(), f"v{i}".encode()) for i in range(p, 90, 3)]
    offsets = GroupOffsets(conn, f"{topic}-group")
    assert [c.offset if (c := offsets.get(topic, p)) else None for p in range(3)] == [30, 30, 30]
    return out


def test_franz_go_admin_produce_group_and_lag(kb: KafkaBroker, conn: Connection) -> None:
    out = _run_client(".", kb, conn, "franz")
    # kadm's lag: partition, committed offset, end offset, lag
    assert sorted(line for line in out if line.startswith("lag ")) == [f"lag {p} 30 30 0" for p in range(3)]


def test_sarama_admin_idempotent_produce_and_group(kb: KafkaBroker, conn: Connection) -> None:
    out = _run_client("./sarama", kb, conn, "sarama")
    assert sorted(line for line in out if line.startswith("committed ")) == [f"committed {p} 30" for p in range(3)]
