"""Bad command lines, run as a user runs them: each ends with exactly one line on
stderr (``llog…: error: …``), nothing on stdout, no traceback, and exit code 2 for a
usage error (caught while parsing, before anything connects) or 1 for a runtime
failure."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from compactor.retention import apply_retention
from llog.config import LlogConfig
from llog.connection import Connection
from llog.records import AppendGroup, Record
from llog.topic.admin import Topics
from llog.writer import Writer
from tests import forked_llog
from tests.conftest import config_env

USAGE, RUNTIME = 2, 1
#: Nothing listens on port 1: a command that connected would fail with "cannot reach etcd".
DEAD_ETCD = "127.0.0.1:1"


@dataclass(frozen=True)
class Row:
    argv: tuple[str, ...]
    code: int
    #: Expected in the error line.
    says: str
    #: Run against the test stack (topic ``t`` with 2 partitions and records); else
    #: against an unreachable etcd, which proves a usage error never connects.
    stack: bool = False
    env: dict[str, str] = field(default_factory=dict)


def _scenario(tmp: Path) -> str:
    path = tmp / "sixty.toml"
    path.write_text('name = "sixty"\nduration_s = "sixty"\n[[topics]]\nname = "t"\npartitions = 1\n')
    return str(path)


TABLE: dict[str, Row] = {
    "unknown subcommand": Row(("nosuch",), USAGE, "invalid choice: 'nosuch'"),
    "no subcommand": Row((), USAGE, "the following arguments are required: COMMAND"),
    "missing topic": Row(("consume",), USAGE, "the following arguments are required: topic"),
    "missing action": Row(("topics",), USAGE, "the following arguments are required: ACTION"),
    "missing --to": Row(("groups", "reset", "g", "t"), USAGE, "required: --to"),
    "unknown flag": Row(("consume", "t", "--nosuch"), USAGE, "unrecognized arguments: --nosuch"),
    "port too big": Row(("broker", "--port", "99999"), USAGE, "port '99999' must be in 1..65535"),
    "port negative": Row(("broker", "--port=-1"), USAGE, "port '-1' must be in 1..65535"),
    "port not a number": Row(("broker", "--port", "http"), USAGE, "'http' is not a port number"),
    "compactor port": Row(("compactor", "--port", "70000"), USAGE, "port '70000' must be in 1..65535"),
    "kafka port": Row(("broker", "--kafka-port", "70000"), USAGE, "port '70000' must be in 1..65535"),
    "kafka certificate missing": Row(
        ("broker", "--port", "0", "--kafka-port", "0"), RUNTIME, "Kafka TLS certificate '/nonexistent/cert.pem'",
        env={"LLOG_KAFKA_TLS_CERT_FILE": "/nonexistent/cert.pem", "LLOG_KAFKA_TLS_KEY_FILE": "/nonexistent/key.pem"},
    ),
    "kafka certificate without key": Row(
        ("broker", "--port", "0", "--kafka-port", "0"), RUNTIME,
        "kafka_tls_cert_file and kafka_tls_key_file go together",
        env={"LLOG_KAFKA_TLS_CERT_FILE": "/nonexistent/cert.pem"},
    ),
    "dev broker port": Row(("dev", "up", "--broker-port", "65536"), USAGE, "port '65536' must be in 1..65535"),
    "host with a space": Row(("broker", "--host", "no such host"), USAGE, "'no such host' is not a host name"),
    "host bad ipv4": Row(("broker", "--host", "999.1.1.1"), USAGE, "'999.1.1.1' is not a host name"),
    "host bad ipv6": Row(("broker", "--host", "::1::2"), USAGE, "'::1::2' is not a host name"),
    "--from yesterday": Row(("consume", "t", "--from", "yesterday"), USAGE, "'yesterday' is not a start position"),
    "--from bad time": Row(("consume", "t", "--from", "@soon"), USAGE, "'@soon' is not a start position"),
    "negative partition": Row(("consume", "t", "-p", "-1"), USAGE, "partition '-1' must be in 0..99999"),
    "negative fence partition": Row(("fence", "t", "-3"), USAGE, "partition '-3' must be in 0..99999"),
    "bad topic name": Row(("consume", "bad/name"), USAGE, "invalid topic name 'bad/name'"),
    "reserved topic name": Row(("produce", ".."), USAGE, "invalid topic name '..'"),
    "topic name too long": Row(("topics", "create", "x" * 250), USAGE, "invalid topic name"),
    "zero partitions": Row(("topics", "create", "t", "-p", "0"), USAGE, "partition count '0' must be in 1..100000"),
    "bad group name": Row(("groups", "describe", "a group"), USAGE, "invalid group name 'a group'"),
    "bad reset target": Row(("groups", "reset", "g", "t", "--to", "yesterday"), USAGE, "'yesterday' is not earliest"),
    "zero batch": Row(("produce", "t", "--batch", "0"), USAGE, "'0' is not a positive integer"),
    "zero max": Row(("consume", "t", "-n", "0"), USAGE, "'0' is not a positive integer"),
    "bad duration": Row(("broker", "--send-timeout", "soon"), USAGE, "'soon' is not a duration in seconds"),
    "negative PUT rate": Row(("broker", "--put-rate", "-1"), USAGE, "rate '-1' must be >= 0 per second"),
    "zero PUT burst": Row(("broker", "--put-burst", "0"), USAGE, "'0' is not a positive integer"),
    "zero workers": Row(("broker", "--workers", "0"), USAGE, "'0' is not a positive integer"),
    "workers past the last Kafka port": Row(
        ("broker", "--port", "0", "--kafka-port", "65535", "--workers", "2"), RUNTIME,
        "kafka_port 65535 + 2 broker workers exceeds 65535"),
    "negative grace": Row(("vacuum", "--grace-s", "-1"), USAGE, "duration '-1' must be >= 0 seconds"),
    "bad log level": Row(("compactor", "--log-level", "loud"), USAGE, "invalid choice: 'LOUD'"),
    "bad --etcd port": Row(("consume", "t", "--etcd", "127.0.0.1:99999"), USAGE, "port '99999' must be in 1..65535"),
    "bad --etcd": Row(("topics", "list", "--etcd", "localhost"), USAGE, "endpoint 'localhost' is not host:port"),
    "bad --store": Row(("--store", "ftp://x", "topics", "list"), USAGE, "object store 'ftp://x': use s3://"),
    "bad --root-prefix": Row(("topics", "list", "--root-prefix", "a/b"), USAGE, "root prefix 'a/b' must be one"),
    "etcd down, flag after": Row(
        ("consume", "nosuch", "-p", "0", "--etcd", DEAD_ETCD), RUNTIME,
        f"cannot reach etcd at {DEAD_ETCD} (set --etcd or LLOG_ETCD_ENDPOINTS)",
    ),
    "etcd down, flag before": Row(
        ("--etcd", DEAD_ETCD, "topics", "list"), RUNTIME,
        f"cannot reach etcd at {DEAD_ETCD} (set --etcd or LLOG_ETCD_ENDPOINTS)",
    ),
    "etcd down, from env": Row(
        ("topics", "describe", "t"), RUNTIME, f"cannot reach etcd at {DEAD_ETCD} (set --etcd or LLOG_ETCD_ENDPOINTS)",
    ),
    "bad LLOG_ETCD_ENDPOINTS": Row(
        ("topics", "list"), RUNTIME, "etcd endpoint 'nonsense' is not host:port",
        env={"LLOG_ETCD_ENDPOINTS": "nonsense"},
    ),
    "object store down": Row(
        ("consume", "t"), RUNTIME,
        "cannot reach the object store s3://", stack=True,
        env={"LLOG_S3_ENDPOINT_URL": "http://127.0.0.1:1", "LLOG_S3_MAX_ATTEMPTS": "1"},
    ),
    "unknown topic": Row(("consume", "nosuch"), RUNTIME, "unknown topic 'nosuch'", stack=True),
    "unknown partition": Row(("consume", "t", "-p", "7"), RUNTIME, "partition 7 does not exist", stack=True),
    "offset below log start": Row(
        ("consume", "old", "--from", "0"), RUNTIME, "offset 0 of old/0 is below log start offset 2", stack=True,
    ),
    "missing input file": Row(("produce", "t", "/nonexistent/lines"), RUNTIME, "No such file", stack=True),
    "scenario sixty": Row(("loadtest", "run", "{scenario}"), RUNTIME, "duration_s = 'sixty' must be a number"),
    "missing scenario": Row(("loadtest", "run", "/nonexistent.toml"), RUNTIME, "No such file"),
}


@pytest.fixture
def stack_env(config: LlogConfig, conn: Connection) -> Iterator[dict[str, str]]:
    """Topic ``t``: 2 partitions of 3 records; topic ``old``: 1 partition whose first two
    records retention dropped (its log starts at offset 2)."""
    Topics(conn).create("t", 2)
    Topics(conn).create("old", 1, retention_ms=3_600_000)
    hours_ago = int(time.time() * 1000) - 7_200_000
    with Writer(conn) as w:
        w.append_shared([AppendGroup("t", p, [Record(b"v%d" % i) for i in range(3)]) for p in range(2)])
        w.append("old", 0, [Record(b"o1", timestamp=hours_ago), Record(b"o2", timestamp=hours_ago)])
        w.append("old", 0, [Record(b"new")])
    assert apply_retention(conn, "old", 0).new_start == 2
    yield config_env(config)


def _run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return forked_llog.run([*argv], env, timeout=120)


@pytest.mark.parametrize("name", list(TABLE))
def test_bad_command_line(name: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    row = TABLE[name]
    if row.stack:
        env = dict(request.getfixturevalue("stack_env"))
    else:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LLOG_")}
        env["LLOG_ETCD_ENDPOINTS"] = DEAD_ETCD
    env.update(row.env)
    argv = [a.replace("{scenario}", _scenario(tmp_path)) if "{scenario}" in a else a for a in row.argv]
    out = _run(argv, env)
    assert "Traceback" not in out.stdout + out.stderr, out.stderr
    assert out.returncode == row.code, out.stderr
    assert out.stdout == ""
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    (line,) = lines
    assert row.says in line
    if row.code == USAGE:
        # "llog consume: error: argument --from: … (see 'llog consume --help')"
        prog = line.split(": error: ", 1)[0]
        assert prog.startswith("llog") and line.endswith(f"(see '{prog} --help')")
    else:
        assert line.startswith("llog: error: ")


def test_broker_port_in_use_is_one_line(config: LlogConfig) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        out = _run(["broker", "--host", "127.0.0.1", "--port", str(port)], config_env(config))
    assert "Traceback" not in out.stderr
    assert out.returncode == RUNTIME
    assert out.stderr == f"llog: error: broker cannot listen on 127.0.0.1:{port}: Address already in use\n"
