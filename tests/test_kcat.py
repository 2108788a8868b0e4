"""kcat (Debian's package; librdkafka's command-line client) against the Kafka listener,
on the suite's real etcd and S3 servers: metadata, keyed lz4 produce, consume, a
consumer group (``-G``) and offset queries (``-Q``), checked against llog's SDK."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from llog.connection import Connection
from llog.groups.offsets import GroupOffsets
from llog.reader import Reader
from llog.topic.admin import Topics
from tests.test_kafka import KafkaBroker, kb_fixture  # noqa: F401 (the fixture kb)


def _kcat(*args: str, stdin: str | None = None) -> str:
    if shutil.which("kcat") is None:
        pytest.fail("kcat is missing (make test installs Debian's kcat package)")
    proc = subprocess.run(["kcat", *args], input=stdin, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_kcat_metadata_produce_consume_group_and_offsets(kb: KafkaBroker, conn: Connection) -> None:
    b = kb.bootstrap
    Topics(conn).create("kc", 2)
    metadata = _kcat("-b", b, "-L", "-t", "kc")
    assert 'topic "kc" with 2 partitions' in metadata

    lines = [f"k{i}:v{i}" for i in range(20)]
    _kcat("-b", b, "-P", "-t", "kc", "-p", "1", "-K:", "-z", "lz4", stdin="\n".join(lines) + "\n")
    with Reader(conn) as r:
        assert [(rec.key, rec.value) for rec in r.scan("kc", 1, 0)] == [
            (f"k{i}".encode(), f"v{i}".encode()) for i in range(20)]

    out = _kcat("-b", b, "-C", "-t", "kc", "-p", "1", "-o", "beginning", "-e", "-f", "%k=%s@%o\n")
    assert out.split() == [f"k{i}=v{i}@{i}" for i in range(20)]

    grouped = _kcat("-b", b, "-G", "kc-group", "kc", "-o", "beginning", "-e", "-f", "%p/%o\n")
    assert sorted(grouped.split()) == sorted(f"1/{i}" for i in range(20))
    committed = GroupOffsets(conn, "kc-group").get("kc", 1)
    assert committed is not None and committed.offset == 20  # committed as the member left

    # -Q: the offset of a timestamp (-1: the end; 0: the first record at or after it).
    assert _kcat("-b", b, "-Q", "-t", "kc:1:-1").split()[-1] == "20"
    assert _kcat("-b", b, "-Q", "-t", "kc:1:0").split()[-1] == "0"
