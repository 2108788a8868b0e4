"""``llog produce`` and ``llog consume``: records in and out from a shell.

``produce`` reads one record per line from stdin or files. With ``--key-separator``
each line is ``KEY<sep>VALUE`` and the key picks the partition (Kafka's murmur2, see
:mod:`llog.partitioner`) unless ``--partition`` is given. ``consume`` prints records
as text or JSON lines and can follow the tail.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import threading
from collections.abc import Iterator
from typing import IO, Any

from llog.cli.common import connection_from_args
from llog.cli.progress import Progress
from llog.errors import InvalidInput
from llog.partitioner import partition_for_key
from llog.reader import Reader
from llog.records import AppendGroup, ConsumedRecord, Record
from llog.writer import AppendFailure, Writer


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("produce", help="append lines from stdin or files as records")
    p.add_argument("topic")
    p.add_argument("files", nargs="*", help="files to read (default: stdin)")
    p.add_argument("-p", "--partition", type=int, help="partition (default: by key, else 0)")
    p.add_argument("--key-separator", help="split each line into KEY<sep>VALUE")
    p.add_argument("--batch", type=int, default=1000, help="lines per shared append (default 1000)")
    p.add_argument("--progress", action="store_true", default=None, help="rate lines on stderr (default: on a tty)")
    p.set_defaults(func=_produce)

    p = subparsers.add_parser("consume", help="print records of a partition")
    p.add_argument("topic")
    p.add_argument("-p", "--partition", type=int, default=0)
    p.add_argument("--from", dest="start", default="earliest", help="earliest, latest or an offset")
    p.add_argument("-n", "--max", type=int, help="stop after this many records")
    p.add_argument("-f", "--follow", action="store_true", help="keep waiting for new records")
    p.add_argument("--json", action="store_true", help="JSON lines with offset, timestamp, key, value, headers")
    p.add_argument("--progress", action="store_true", default=None, help="rate lines on stderr (default: on a tty)")
    p.set_defaults(func=_consume)


def _lines(files: list[str]) -> Iterator[bytes]:
    if not files:
        yield from (line.rstrip(b"\r\n") for line in sys.stdin.buffer)
        return
    for name in files:
        with open(name, "rb") as f:
            yield from (line.rstrip(b"\r\n") for line in f)


def _produce(args: argparse.Namespace) -> int:
    if args.batch <= 0:
        raise InvalidInput(f"--batch must be positive, got {args.batch}")
    sep = args.key_separator.encode() if args.key_separator else None
    progress = Progress("produced", enabled=args.progress)
    with connection_from_args(args) as conn, Writer(conn) as writer:
        partitions = conn.topic(args.topic).partitions
        pending: dict[int, list[Record]] = {}
        buffered = 0

        def flush() -> None:
            nonlocal buffered
            if not pending:
                return
            groups = [AppendGroup(args.topic, p, recs) for p, recs in sorted(pending.items())]
            for out in writer.append_shared(groups):
                if isinstance(out, AppendFailure):
                    raise out.error
            progress.add(sum(map(len, pending.values())), sum(len(r.value) for recs in pending.values() for r in recs))
            pending.clear()
            buffered = 0

        for line in _lines(args.files):
            key = None
            value = line
            if sep is not None and sep in line:
                key, value = line.split(sep, 1)
            if args.partition is not None:
                part = args.partition
            elif key is not None:
                part = partition_for_key(key, partitions)
            else:
                part = 0
            pending.setdefault(part, []).append(Record(value, key=key))
            buffered += 1
            if buffered >= args.batch:
                flush()
        flush()
    progress.done()
    return 0


def _text(b: bytes | None) -> str | None:
    return None if b is None else b.decode("utf-8", "backslashreplace")


def _print(rec: ConsumedRecord, as_json: bool, out: IO[str]) -> None:
    if not as_json:
        out.write(f"{rec.offset}\t{_text(rec.value)}\n")
        return
    try:
        value: Any = rec.value.decode()
    except UnicodeDecodeError:
        value = {"base64": base64.b64encode(rec.value).decode()}
    out.write(json.dumps({
        "topic": rec.topic,
        "partition": rec.partition,
        "offset": rec.offset,
        "timestamp": rec.timestamp,
        "key": _text(rec.key),
        "value": value,
        "headers": [[k, _text(v)] for k, v in rec.headers],
    }) + "\n")


def _consume(args: argparse.Namespace) -> int:
    stop = threading.Event()
    seen = 0
    progress = Progress("consumed", enabled=args.progress)
    with connection_from_args(args) as conn, Reader(conn) as reader:
        low, high = reader.high_watermark(args.topic, args.partition)
        if args.start == "earliest":
            offset = low
        elif args.start == "latest":
            offset = high
        else:
            try:
                offset = int(args.start)
            except ValueError:
                raise InvalidInput(f"--from must be earliest, latest or an offset, got {args.start!r}") from None
        while not stop.is_set():
            for rec in reader.scan(args.topic, args.partition, offset):
                _print(rec, args.json, sys.stdout)
                offset = rec.offset + 1
                seen += 1
                progress.add(1, len(rec.value))
                if args.max is not None and seen >= args.max:
                    return 0
            sys.stdout.flush()
            if not args.follow:
                break
            # Poll the tail; the broker's consume long-polls on an etcd watch instead.
            stop.wait(0.2)
    return 0
