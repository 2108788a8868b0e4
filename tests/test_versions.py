"""Every process says which llog release it runs (issue 60): ``llog --version``, a
broker's ``GET /health`` and ``GET /brokers``, its Kafka registration, the writers' and
compactors' sessions, and ``llog doctor``, which warns when more than one release runs
(an upgrade under way, or a process left behind). Real etcd, S3 and brokers."""

from __future__ import annotations

import importlib.metadata
import json

import msgpack

from llog.cli.doctor import diagnose
from llog.config import LlogConfig
from llog.connection import Connection
from llog.kafka.registry import scan_brokers
from llog.topic.admin import Topics
from llog.version import __version__
from tests import forked_llog
from tests.test_kafka import kafka_broker


def test_the_version_is_written_once_and_installed_as_the_package_version() -> None:
    out = forked_llog.run(["--version"], timeout=60)
    assert (out.returncode, out.stdout) == (0, f"llog {__version__}\n")
    assert importlib.metadata.version("llog") == __version__  # pyproject reads llog/version.py


def test_a_broker_names_its_release_everywhere_and_doctor_lists_every_process(
    config: LlogConfig, conn: Connection,
) -> None:
    Topics(conn).create("v", 1)
    with kafka_broker(config) as kb:
        assert kb.http.request("GET", "/health")[1]["version"] == __version__
        assert [b["version"] for b in kb.http.request("GET", "/brokers")[1]["brokers"]] == [__version__]
        assert [node.version for node, _kv in scan_brokers(conn)] == [__version__]
        assert kb.http.post("/produce", {"topic_partitions": [{"topic": "v", "partition": 0,
                                                               "records": ["x"]}]})[0] == 200
        [versions] = [f for f in diagnose(conn) if f.check == "versions"]
        assert (versions.level, versions.detail) == (
            "OK", f"llog {__version__}: 1 HTTP broker, 1 Kafka broker, 1 writer session")

        # A process of a release before this one names none: doctor warns of two releases.
        lease = conn.etcd.grant_lease(30)
        old = {"kind": "compactor", "host": "h", "pid": 1, "started_at_ms": 0}
        conn.etcd.put(conn.keys.session("0ld"), msgpack.packb(old), lease=lease)
        conn.etcd.put(conn.keys.broker(99), json.dumps({"host": "h", "port": 1}).encode(), lease=lease)
        [versions] = [f for f in diagnose(conn) if f.check == "versions"]
        assert versions.level == "WARN" and "more than one release" in versions.detail
        assert "llog before 0.2.0: 1 Kafka broker, 1 compactor session" in versions.detail
        assert f"llog {__version__}: 1 HTTP broker, 1 Kafka broker, 1 writer session" in versions.detail
        conn.etcd.revoke_lease(lease)


def test_a_process_names_the_llog_variables_it_ignores_at_its_start(config: LlogConfig) -> None:
    from tests.conftest import config_env

    env = config_env(config) | {"LLOG_ZONEE": "a"}
    out = forked_llog.run(["topics", "list"], env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "LLOG_ZONEE is not a setting of this llog and is ignored; did you mean LLOG_ZONE?" in out.stderr
