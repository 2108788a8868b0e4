"""The ``llog`` command line against the real test stack, as a user runs it."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from llog.cli import build_parser
from llog.config import LlogConfig
from llog.connection import Connection, connect
from llog.groups.offsets import GroupOffsets
from llog.partitioner import partition_for_key
from llog.reader import Reader
from llog.topics import Topics
from tests.conftest import config_env


def llog_cli(
    cfg: LlogConfig, *args: str, stdin: str | None = None, ok: bool = True
) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(
        [sys.executable, "-m", "llog", *args], env=config_env(cfg), input=stdin,
        capture_output=True, text=True, timeout=120,
    )
    if ok:
        assert out.returncode == 0, out.stderr
    return out


def _subcommands() -> list[list[str]]:
    parser = build_parser()
    out = []
    for action in parser._subparsers._group_actions:  # type: ignore[union-attr]
        for name, sub in action.choices.items():  # type: ignore[union-attr]
            out.append([name])
            for sa in getattr(sub._subparsers, "_group_actions", []) if sub._subparsers else []:
                out.extend([name, n] for n in sa.choices)
    return out


@pytest.mark.parametrize("cmd", _subcommands(), ids=" ".join)
def test_every_command_has_help(cmd: list[str]) -> None:
    out = subprocess.run([sys.executable, "-m", "llog", *cmd, "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "usage: llog" in out.stdout


def test_topics_produce_consume_fence(config: LlogConfig, conn: Connection) -> None:
    llog_cli(config, "topics", "create", "clicks", "-p", "3")
    assert "clicks\t3" in llog_cli(config, "topics", "list").stdout

    lines = "".join(f"user-{i % 5}\tclick {i}\n" for i in range(60))
    llog_cli(config, "produce", "clicks", "--key-separator", "\t", "--batch", "7", stdin=lines)
    with Reader(conn) as r:
        for p in range(3):
            for rec in r.scan("clicks", p):
                assert rec.key is not None
                assert partition_for_key(rec.key, 3) == p
        total = sum(r.high_watermark("clicks", p)[1] for p in range(3))
    assert total == 60

    p0 = partition_for_key(b"user-0", 3)
    out = llog_cli(config, "consume", "clicks", "-p", str(p0), "--json", "-n", "2").stdout.splitlines()
    assert [json.loads(x)["offset"] for x in out] == [0, 1]
    assert json.loads(out[0])["key"] == "user-0" or json.loads(out[0])["key"].startswith("user-")

    desc = json.loads(llog_cli(config, "topics", "describe", "clicks", "--json").stdout)
    assert sum(p["next_offset"] for p in desc["partition_info"]) == 60

    llog_cli(config, "fence", "clicks", "0")
    bad = llog_cli(config, "produce", "clicks", "-p", "0", stdin="x\n", ok=False)
    assert bad.returncode == 1 and bad.stderr == "llog: error: partition clicks/0 is fenced: appends are rejected\n"
    llog_cli(config, "unfence", "clicks", "0")
    llog_cli(config, "produce", "clicks", "-p", "0", stdin="x\n")


def test_bad_input_is_one_line_not_a_traceback(config: LlogConfig) -> None:
    out = llog_cli(config, "produce", "no-such-topic", stdin="x\n", ok=False)
    assert (out.returncode, out.stderr) == (1, "llog: error: unknown topic 'no-such-topic'\n")
    out = llog_cli(config, "topics", "create", "bad/name", ok=False)
    assert out.returncode == 2 and "invalid topic name 'bad/name'" in out.stderr and "Traceback" not in out.stderr


def test_groups_list_describe_reset(config: LlogConfig, conn: Connection) -> None:
    llog_cli(config, "topics", "create", "gt", "-p", "2")
    llog_cli(config, "produce", "gt", "-p", "1", stdin="".join(f"{i}\n" for i in range(10)))
    GroupOffsets(conn, "billing").commit("gt", 1, 8)
    assert llog_cli(config, "groups", "list").stdout.split() == ["billing"]
    d = json.loads(llog_cli(config, "groups", "describe", "billing", "--topic", "gt", "--json").stdout)
    assert d["total_lag"] == 2
    assert {(p["partition"], p["committed"], p["lag"]) for p in d["partitions"]} == {(0, None, 0), (1, 8, 2)}
    llog_cli(config, "groups", "reset", "billing", "gt", "-p", "1", "--to", "earliest")
    committed = GroupOffsets(conn, "billing").get("gt", 1)
    assert committed is not None and committed.offset == 0


def test_dev_up_serves_a_stack_with_a_broker_and_stops_cleanly(tmp_path: Path) -> None:
    env_file = tmp_path / "dev.env"
    proc = subprocess.Popen(
        [sys.executable, "-m", "llog", "dev", "up", "--broker-port", "0", "--dir", str(tmp_path / "stack"),
         "--env-file", str(env_file)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        lines = []
        while not lines or not lines[-1].startswith("# broker: "):
            line = proc.stdout.readline()
            assert line, f"dev up ended early: {proc.stderr.read() if proc.stderr else ''}"
            lines.append(line.strip())
        exports = dict(x[len("export "):].split("=", 1) for x in lines if x.startswith("export "))
        assert exports == dict(
            x[len("export "):].split("=", 1) for x in env_file.read_text().splitlines() if x.startswith("export ")
        )
        url = lines[-1].split()[2]
        cfg = LlogConfig.from_env(exports)
        with connect(cfg) as conn:
            Topics(conn).create("devt", 1)
        req = urllib.request.Request(
            f"{url}/produce", method="POST", headers={"content-type": "application/json"},
            data=json.dumps({"topic_partitions": [{"topic": "devt", "partition": 0, "records": ["a", "b"]}]}).encode(),
        )
        with urllib.request.urlopen(req, timeout=60) as resp:
            assert json.loads(resp.read())["success_count"] == 1
        with connect(cfg) as conn, Reader(conn) as r:
            assert [rec.value for rec in r.scan("devt", 0)] == [b"a", b"b"]
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    etcd_port = int(exports["LLOG_ETCD_ENDPOINTS"].rsplit(":", 1)[1])
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", etcd_port)) != 0  # etcd stopped with it
