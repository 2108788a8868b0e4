"""The ``llog`` command line against the real test stack, as a user runs it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from llog.cli import build_parser, main
from llog.config import LlogConfig
from llog.connection import Connection, connect
from llog.groups.offsets import GroupOffsets
from llog.partitioner import partition_for_key
from llog.reader import Reader
from llog.records import AppendGroup, Record
from llog.topic.admin import Topics
from llog.writer import Writer
from tests import forked_llog
from tests.conftest import config_env


def llog_cli(
    cfg: LlogConfig, *args: str, stdin: str | None = None, ok: bool = True
) -> subprocess.CompletedProcess[str]:
    out = forked_llog.run([*args], config_env(cfg), input=stdin, timeout=120)
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
def test_every_command_has_help(cmd: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    # In this process: the parser `python -m llog` builds (test_version_is_the_package_version
    # runs the command itself), without starting an interpreter for each of ~50 commands.
    with pytest.raises(SystemExit) as exited:
        main([*cmd, "--help"])
    out = capsys.readouterr()
    assert exited.value.code == 0, out.err
    assert "usage: llog" in out.out


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


def test_groups_delete_offsets_and_delete(config: LlogConfig, conn: Connection) -> None:
    from llog.groups.membership import Membership

    llog_cli(config, "topics", "create", "gd", "-p", "3")
    llog_cli(config, "produce", "gd", "-p", "0", stdin="a\nb\n")
    offsets = GroupOffsets(conn, "gdg")
    for p in range(2):
        offsets.commit("gd", p, 0)
    member = Membership(conn, "gdg", "m1")
    member.join()
    refused = llog_cli(config, "groups", "delete", "gdg", ok=False)
    assert refused.returncode != 0 and "1 live member(s) (m1)" in refused.stderr
    member.leave()
    out = llog_cli(config, "groups", "delete-offsets", "gdg", "gd", "-p", "1", "-p", "2").stdout
    assert "partitions 1" in out
    assert [c.partition for c in offsets.all()] == [0]
    assert "deleted group gdg" in llog_cli(config, "groups", "delete", "gdg").stdout
    assert offsets.all() == [] and llog_cli(config, "groups", "list").stdout.split() == []
    gone = llog_cli(config, "groups", "delete", "gdg", ok=False)
    assert gone.returncode != 0 and "no group 'gdg'" in gone.stderr


def test_dev_up_serves_a_stack_with_a_broker_and_stops_cleanly(tmp_path: Path) -> None:
    env_file = tmp_path / "dev.env"
    proc = subprocess.Popen(
        [sys.executable, "-m", "llog", "dev", "up", "--broker-port", "0", "--kafka-port", "0",
         "--dir", str(tmp_path / "stack"), "--env-file", str(env_file)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        lines = []
        while not lines or not lines[-1].startswith("# Kafka bootstrap servers: "):
            line = proc.stdout.readline()
            assert line, f"dev up ended early: {proc.stderr.read() if proc.stderr else ''}"
            lines.append(line.strip())
        exports = dict(x[len("export "):].split("=", 1) for x in lines if x.startswith("export "))
        assert exports == dict(
            x[len("export "):].split("=", 1) for x in env_file.read_text().splitlines() if x.startswith("export ")
        )
        url = lines[-2].split()[2]
        kafka_host, kafka_port = lines[-1].split()[4].rsplit(":", 1)
        assert any(x.startswith("# Kafka clients notice a stopped broker in seconds with ")
                   for x in env_file.read_text().splitlines())  # the whole of what it printed
        with socket.create_connection((kafka_host, int(kafka_port)), timeout=30):
            pass  # the Kafka listener is up (tests/test_kafka.py drives it)
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
        # As on a default Kafka broker, a topic nobody created is created on first use.
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": f"{kafka_host}:{kafka_port}"})
        producer.produce("made-on-first-use", value=b"hello")
        assert producer.flush(60) == 0
        with connect(cfg) as conn, Reader(conn) as r:
            assert [rec.value for rec in r.scan("made-on-first-use", 0)] == [b"hello"]
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    etcd_port = int(exports["LLOG_ETCD_ENDPOINTS"].rsplit(":", 1)[1])
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", etcd_port)) != 0  # etcd stopped with it
    assert (tmp_path / "stack").is_dir()  # a directory it was given stays


def test_dev_up_removes_the_directory_it_made_when_it_stops(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "llog", "dev", "up", "--no-broker"],
                            env={**os.environ, "TMPDIR": str(tmp_path)}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert line.startswith("# llog dev stack in ") and "(removed when it stops)" in line, line
        made = Path(line.split()[5])
        assert made.parent == tmp_path and (made / "etcd-data").is_dir()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    assert list(tmp_path.iterdir()) == []


def test_global_flags_work_before_and_after_the_subcommand(config: LlogConfig, conn: Connection) -> None:
    Topics(conn).create("flags", 2)
    env = {**config_env(config), "LLOG_ETCD_ENDPOINTS": "127.0.0.1:1", "LLOG_ROOT_PREFIX": "elsewhere"}
    flags = ["--etcd", ",".join(config.etcd_endpoints), "--store", config.object_store,
             "--root-prefix", config.root_prefix]
    for argv in (["topics", "list", *flags], [*flags, "topics", "list"], ["topics", *flags, "list"]):
        out = forked_llog.run([*argv], env, timeout=120)
        assert (out.returncode, out.stdout, out.stderr) == (0, "flags\t2\n", ""), argv
    # The subcommand's value wins over one given before it.
    out = forked_llog.run(["--root-prefix", "elsewhere", "topics", "list", *flags], env, timeout=120)
    assert out.stdout == "flags\t2\n", out.stderr


@pytest.fixture
def three_partitions(conn: Connection) -> dict[int, list[tuple[str | None, str, int]]]:
    """Topic ``kv``: partition p holds (key, value, timestamp) records p-0 .. p-3, the
    odd ones keyed, stamped 1000 ms apart from 10 s after the epoch."""
    Topics(conn).create("kv", 3)
    data = {
        p: [(f"k{i}" if i % 2 else None, f"{p}-{i}", 10_000 + 1000 * i) for i in range(4)] for p in range(3)
    }
    with Writer(conn) as w:
        w.append_shared([
            AppendGroup("kv", p, [Record(v.encode(), key=None if k is None else k.encode(), timestamp=ts)
                                  for k, v, ts in recs])
            for p, recs in data.items()
        ])
    return data


def _consumed(config: LlogConfig, *args: str) -> list[str]:
    return llog_cli(config, "consume", "kv", *args).stdout.splitlines()


def test_consume_reads_every_partition_and_prints_keys(
    config: LlogConfig, three_partitions: dict[int, list[tuple[str | None, str, int]]]
) -> None:
    values = [v for recs in three_partitions.values() for _, v, _ in recs]
    assert _consumed(config) == values  # each partition in turn, in offset order
    assert _consumed(config, "-K", "=", "-p", "1") == ["=1-0", "k1=1-1", "=1-2", "k3=1-3"]
    assert _consumed(config, "-p", "2", "-p", "0", "-n", "5") == ["0-0", "0-1", "0-2", "0-3", "2-0"]  # in order
    rows = [json.loads(x) for x in _consumed(config, "--json", "-p", "2", "--from", "3")]
    assert [(r["partition"], r["offset"], r["key"], r["value"], r["timestamp"]) for r in rows] == [
        (2, 3, "k3", "2-3", 13_000)
    ]


@pytest.mark.parametrize(
    ("start", "first_index"),
    [
        ("earliest", 0), ("latest", 4), ("2", 2), ("-1", 3), ("-10", 0), ("+1", 1),
        ("@11500", 2), ("@99000", 4), ("1970-01-01T00:00:12", 2), ("1970-01-01T01:00:11+01:00", 1),
    ],
)
def test_consume_start_positions_apply_to_each_partition(
    config: LlogConfig, three_partitions: dict[int, list[tuple[str | None, str, int]]], start: str, first_index: int
) -> None:
    expected = [v for recs in three_partitions.values() for _, v, _ in recs[first_index:]]
    assert _consumed(config, f"--from={start}") == expected


def test_ctrl_c_ends_a_follow_with_130_and_no_traceback(config: LlogConfig, conn: Connection) -> None:
    Topics(conn).create("follow", 1)
    with Writer(conn) as w:
        w.append("follow", 0, [Record(b"first")])
    proc = subprocess.Popen([sys.executable, "-m", "llog", "consume", "follow", "--follow"], env=config_env(config),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "first\n"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130
    assert "Traceback" not in err


def test_broker_listens_on_ipv6_loopback(config: LlogConfig) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "llog", "broker", "--host", "::1", "--port", "0"],
                            env=config_env(config), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("llog broker listening on http://[::1]:"), proc.stderr.read() if proc.stderr else ""
        url = line.rsplit(" ", 1)[1].strip()
        with urllib.request.urlopen(f"{url}/health", timeout=60) as resp:
            assert resp.status == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
