"""``llog dev up`` (a local etcd + object store until Ctrl-C) and ``llog demo``
(start one, produce, read back, verify, stop)."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from llog.cli import values
from llog.connection import connect
from llog.devstack import DevStackError, LocalStack
from llog.reader import Reader
from llog.records import AppendGroup, Record
from llog.topics import Topics
from llog.writer import AppendFailure, Writer


def register(subparsers: Any) -> None:
    dev = subparsers.add_parser("dev", help="local development stack")
    dsub = dev.add_subparsers(dest="dev_command", metavar="ACTION", required=True)
    p = dsub.add_parser("up", help="run etcd and an object store on loopback until Ctrl-C")
    p.add_argument("--s3", action="store_true", help="serve objects from a local S3 server (moto), not a directory")
    p.add_argument("--dir", type=Path, help="working directory (default: a new temp dir)")
    p.add_argument("--env-file", type=Path, help="also write the LLOG_* variables to this file")
    p.add_argument("--broker-port", type=values.listen_port, default=8080,
                   help="HTTP broker port (default 8080, 0: any free)")
    p.add_argument("--no-broker", action="store_true", help="do not start an HTTP broker")
    p.set_defaults(func=_up)

    p = subparsers.add_parser("demo", help="start a local stack, produce and read back records, stop")
    p.add_argument("--s3", action="store_true", help="use a local S3 server (moto) instead of a directory")
    p.add_argument("--records", type=values.positive_int, default=20_000, help="records to write (default 20000)")
    p.add_argument("--partitions", type=values.partition_count, default=4)
    p.set_defaults(func=_demo)


def _up(args: argparse.Namespace) -> int:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with LocalStack(args.dir, s3=args.s3) as stack:
        env = stack.env()
        broker = None if args.no_broker else _start_broker(env, args.broker_port)
        try:
            lines = [f"export {k}={v}" for k, v in sorted(env.items())]
            if broker is not None:
                lines.append(f"# broker: {broker[1]}  (POST /produce, /consume; GET /openapi.json)")
            if args.env_file:
                args.env_file.write_text("\n".join(lines) + "\n")
            print("\n".join(lines), flush=True)
            print(f"# llog dev stack in {stack.workdir}; Ctrl-C stops it", file=sys.stderr, flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                while not stop.wait(0.5):
                    if broker is not None and broker[0].poll() is not None:
                        print(f"# broker exited with {broker[0].returncode}", file=sys.stderr)
                        return 1
        finally:
            if broker is not None:
                _stop_child(broker[0])
    return 0


def _start_broker(env: dict[str, str], port: int) -> tuple[subprocess.Popen[str], str]:
    """``llog broker`` as a child on the stack; returns it and its URL once it listens."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "llog", "broker", "--port", str(port)],
        env={**os.environ, **env}, stdout=subprocess.PIPE, text=True, start_new_session=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "listening on " not in line:
        _stop_child(proc)
        raise DevStackError(f"broker did not start (exit {proc.returncode}): {line!r}")
    return proc, line.rsplit(" ", 1)[1].strip()


def _stop_child(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _demo(args: argparse.Namespace) -> int:
    topic, parts, n = "demo", args.partitions, args.records
    with LocalStack(s3=args.s3) as stack:
        print(f"stack: etcd {stack.etcd.endpoint}, objects {stack.config.object_store}")
        with connect(stack.config) as conn:
            Topics(conn).create(topic, parts)
            values = [f"record {i} of the llog demo".encode() for i in range(n)]
            t0 = time.perf_counter()
            with Writer(conn) as w:
                step = 1000
                for lo in range(0, n, step):
                    groups = [
                        AppendGroup(topic, p, [Record(v) for v in values[lo + p : lo + step : parts]])
                        for p in range(parts)
                        if values[lo + p : lo + step : parts]
                    ]
                    for out in w.append_shared(groups):
                        if isinstance(out, AppendFailure):
                            raise out.error
            wrote = time.perf_counter() - t0
            t0 = time.perf_counter()
            got: list[bytes] = []
            with Reader(conn) as r:
                for p in range(parts):
                    got.extend(rec.value for rec in r.scan(topic, p))
            read = time.perf_counter() - t0
            desc = Topics(conn).describe(topic)
        ok = sorted(got) == sorted(values)
        digest = hashlib.sha256(b"".join(sorted(got))).hexdigest()[:16]
        print(f"wrote {n} records to {parts} partitions in {wrote:.2f}s ({n / wrote:,.0f} rec/s)")
        print(f"read back {len(got)} records in {read:.2f}s ({len(got) / read:,.0f} rec/s), sha256 {digest}")
        for info in desc.partitions:
            print(f"  partition {info.partition}: next_offset {info.next_offset}, index keys {info.index_keys}")
        print("demo OK: every record read back exactly once" if ok else "demo FAILED: read-back differs")
        return 0 if ok else 1
