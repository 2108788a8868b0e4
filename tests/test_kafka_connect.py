"""Kafka Connect (``connect-runtime`` 4.1) in distributed mode against the Kafka
listener, on the suite's real etcd and S3 servers: its config, offset and status topics
are compacted llog topics it creates and checks itself; the FileStream source connector
copies a file's lines into a topic and the FileStream sink connector writes them to
another file, each line once; after a worker restart both resume from their stored
offsets (the source's in Connect's offset topic, the sink's as a consumer group)."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from llog.connection import Connection
from llog.groups.offsets import GroupOffsets
from llog.local_ports import free_port
from llog.topic.admin import Topics
from tests import java_client
from tests.test_kafka import KafkaBroker, kb_fixture  # noqa: F401 (the fixture kb)

CONNECT = "org.apache.kafka.connect.cli.ConnectDistributed"


def _rest(port: int, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def _until(what: str, check: Any, timeout: float, worker: subprocess.Popen[str], log: Path) -> Any:
    """``check()``'s first truthy value, asked every 0.2 s (a file or a REST answer
    has no event to wait on); fails with the worker's log after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if worker.poll() is not None:
            raise AssertionError(f"the Connect worker exited ({worker.returncode}):\n{log.read_text()[-4000:]}")
        got = check()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"{what} did not happen in {timeout} s:\n{log.read_text()[-4000:]}")


def _start(props: Path, log: Path) -> subprocess.Popen[str]:
    return java_client.start(str(props), main_class=CONNECT, stdout=subprocess.DEVNULL, stderr=log.open("a"))


def _up(port: int) -> bool:
    try:
        return _rest(port, "GET", "/connectors")[0] == 200
    except OSError:
        return False


def test_connect_distributed_copies_a_file_through_a_topic_and_resumes(
    kb: KafkaBroker, conn: Connection, tmp_path: Path
) -> None:
    port = free_port()
    props = tmp_path / "worker.properties"
    props.write_text("\n".join([
        f"bootstrap.servers={kb.bootstrap}", "group.id=llog-connect", f"listeners=http://127.0.0.1:{port}",
        "key.converter=org.apache.kafka.connect.storage.StringConverter",
        "value.converter=org.apache.kafka.connect.storage.StringConverter",
        "config.storage.topic=connect-configs", "offset.storage.topic=connect-offsets",
        "status.storage.topic=connect-status", "config.storage.replication.factor=1",
        "offset.storage.replication.factor=1", "status.storage.replication.factor=1",
        "offset.storage.partitions=3", "status.storage.partitions=2", "offset.flush.interval.ms=500",
    ]) + "\n")
    source, sink, log = tmp_path / "in.txt", tmp_path / "out.txt", tmp_path / "connect.log"
    first = [f"line {i}" for i in range(1000)]
    source.write_text("".join(f"{line}\n" for line in first))
    Topics(conn).create("connect-lines", 1)

    def sunk(n: int) -> list[str] | None:
        lines = sink.read_text().splitlines() if sink.exists() else []
        return lines if len(lines) >= n else None

    worker = _start(props, log)
    try:
        _until("the worker's REST API", lambda: _up(port), 120, worker, log)
        for name, cls, extra in (
            ("file-source", "FileStreamSourceConnector", {"file": str(source), "topic": "connect-lines"}),
            ("file-sink", "FileStreamSinkConnector", {"file": str(sink), "topics": "connect-lines"}),
        ):
            status, body = _rest(port, "POST", "/connectors", {"name": name, "config": {
                "connector.class": f"org.apache.kafka.connect.file.{cls}", "tasks.max": "1", **extra}})
            assert status == 201, body
        assert _until("the first 1,000 lines in the sink", lambda: sunk(1000), 120, worker, log) == first
        # Connect's internal topics are llog topics, compacted as Connect requires.
        for topic in ("connect-configs", "connect-offsets", "connect-status"):
            assert conn.topic(topic, refresh=True).cleanup_policy == "compact", topic
        worker.send_signal(signal.SIGTERM)  # a clean stop: offsets flushed and committed
        assert worker.wait(timeout=60) in (0, 143), log.read_text()[-4000:]
        more = [f"line {i}" for i in range(1000, 1500)]
        with source.open("a") as f:
            f.write("".join(f"{line}\n" for line in more))
        worker = _start(props, log)
        _until("the next 500 lines in the sink", lambda: sunk(1500), 120, worker, log)
        # The sink's group committed past every line: nothing more is coming.
        offsets = GroupOffsets(conn, "connect-file-sink")
        _until("the sink's commit of all 1,500 lines",
               lambda: (c := offsets.get("connect-lines", 0)) is not None and c.offset == 1500, 60, worker, log)
        assert sink.read_text().splitlines() == first + more  # each line once: both resumed where they were
    finally:
        worker.kill()
        worker.wait(timeout=30)
