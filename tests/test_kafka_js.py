"""kafkajs, the JavaScript Kafka client, against the Kafka listener, on the suite's real
etcd and S3 servers: ``tests/js/client.js`` runs on the machine's Node.js with kafkajs
from the npm registry (``npm ci`` into ``.cache/js`` of this checkout): its admin creates
a topic, an idempotent gzip producer writes keyed records, a consumer group reads and
commits them; llog's SDK checks the records and the commits."""

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

SOURCES = Path(__file__).resolve().parent / "js"
CACHE = Path(__file__).resolve().parent.parent / ".cache" / "js"


@functools.cache
def _node_modules() -> Path:
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            pytest.fail(f"the kafkajs tests need {tool} (Node.js 18 or later) on PATH")
    CACHE.mkdir(parents=True, exist_ok=True)
    lock, installed = SOURCES / "package-lock.json", CACHE / ".installed-lock"
    with exclusive("js"):
        if not (CACHE / "node_modules" / "kafkajs").exists() or not installed.exists() or \
                installed.read_bytes() != lock.read_bytes():
            for name in ("package.json", "package-lock.json"):
                shutil.copy(SOURCES / name, CACHE / name)
            proc = subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=CACHE, capture_output=True,
                                  text=True, timeout=600)
            if proc.returncode != 0:
                pytest.fail(f"npm ci of kafkajs failed:\n{proc.stderr[-4000:]}")
            installed.write_bytes(lock.read_bytes())  # last: it says the install finished
    return CACHE / "node_modules"


def test_kafkajs_admin_produce_and_group(kb: KafkaBroker, conn: Connection) -> None:
    env = {**os.environ, "NODE_PATH": str(_node_modules())}
    proc = subprocess.run(["node", str(SOURCES / "client.js"), kb.bootstrap, "js", "js-group", "60"], env=env,
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    assert out[:2] == ["created js", "produced 60"]
    records = sorted(tuple(line.split()[1:]) for line in out if line.startswith("record "))
    assert records == sorted((str(i % 2), str(i // 2), f"k{i}", f"v{i}") for i in range(60))  # each once
    assert sorted(line for line in out if line.startswith("committed ")) == ["committed 0 30", "committed 1 30"]
    with Reader(conn) as r:
        for p in range(2):
            assert [(rec.key, rec.value) for rec in r.scan("js", p, 0)] == [
                (f"k{i}".encode(), f"v{i}".encode()) for i in range(p, 60, 2)]
    offsets = GroupOffsets(conn, "js-group")
    assert [c.offset if (c := offsets.get("js", p)) else None for p in range(2)] == [30, 30]
