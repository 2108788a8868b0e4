"""``llog produce`` and ``llog consume``: records in and out from a shell.

``produce`` reads one record per line from stdin or files. With ``-K SEP``
each line is ``KEY<SEP>VALUE`` and the key picks the partition (Kafka's murmur2, see
:mod:`llog.partitioner`) unless ``--partition`` is given. ``consume`` prints the
values (``KEY<SEP>VALUE`` with ``-K``) or JSON lines of every partition, or of those
given with ``-p``, from a start position (:mod:`llog.cli.start`), and can follow the tail.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import IO, Any

from llog.cli import values
from llog.cli.common import connection_from_args
from llog.cli.progress import Progress
from llog.cli.start import StartPosition, parse_start
from llog.partitioner import partition_for_key
from llog.reader import Reader
from llog.records import AppendGroup, ConsumedRecord, Record
from llog.writer import AppendFailure, Writer

#: Seconds between polls of the tail with ``--follow``.
_FOLLOW_POLL_S = 0.2


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("produce", help="append lines from stdin or files as records")
    p.add_argument("topic", type=values.topic)
    p.add_argument("files", nargs="*", help="files to read (default: stdin)")
    p.add_argument("-p", "--partition", type=values.partition, help="partition (default: by key, else 0)")
    p.add_argument("-K", "--key-separator", metavar="SEP", help="split each line into KEY<SEP>VALUE")
    p.add_argument("--batch", type=values.positive_int, default=1000, help="lines per shared append (default 1000)")
    p.add_argument("--progress", action="store_true", default=None, help="rate lines on stderr (default: on a tty)")
    p.set_defaults(func=_produce)

    p = subparsers.add_parser(
        "consume", help="print records (every partition unless -p)",
        description="Print each record's value on a line (KEY<SEP>VALUE with -K), or JSON lines with --json. "
                    "Without -p every partition is read, one after the other.",
    )
    p.add_argument("topic", type=values.topic)
    p.add_argument("-p", "--partition", type=values.partition, action="append",
                   help="read this partition (repeatable; default: all)")
    p.add_argument("--from", dest="start", type=parse_start, default=parse_start("earliest"), metavar="START",
                   help="earliest, latest, an offset N, -N (N before the end), +N (N after the start), "
                        "an ISO-8601 time (UTC unless it says) or @EPOCH_MS; per partition (default earliest)")
    p.add_argument("-K", "--key-separator", metavar="SEP", help="print KEY<SEP>VALUE (no key: empty)")
    p.add_argument("-n", "--max", type=values.positive_int, help="stop after this many records")
    p.add_argument("-f", "--follow", action="store_true", help="keep waiting for new records")
    p.add_argument("--json", action="store_true",
                   help="JSON lines with topic, partition, offset, timestamp, key, value, headers")
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
            progress.add(sum(map(len, pending.values())),
                         sum(len(r.value or b"") for recs in pending.values() for r in recs))
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


def _print(rec: ConsumedRecord, as_json: bool, key_sep: str | None, out: IO[str]) -> None:
    if not as_json:
        key = "" if key_sep is None else f"{_text(rec.key) or ''}{key_sep}"
        out.write(f"{key}{_text(rec.value) or ''}\n")
        return
    value: Any = None  # a tombstone
    if rec.value is not None:
        try:
            value = rec.value.decode()
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


#: After Ctrl-C, seconds the consumer's clean-up may take before the process just exits.
_INTERRUPT_GRACE_S = 5.0


def _on_interrupt(_signum: int, _frame: object) -> None:
    """Ctrl-C: unwind as KeyboardInterrupt (exit 130), and if the unwinding hangs (a
    read in flight that will not let go), exit anyway: a follow must stop when asked."""
    sys.stdout.flush()
    timer = threading.Timer(_INTERRUPT_GRACE_S, os._exit, (130,))
    timer.daemon = True
    timer.start()
    raise KeyboardInterrupt


def _consume(args: argparse.Namespace) -> int:
    left = args.max
    progress = Progress("consumed", enabled=args.progress)
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, _on_interrupt) if main else None
    try:
        return _consume_records(args, left, progress)
    finally:
        if main:
            signal.signal(signal.SIGINT, previous)


def _consume_records(args: argparse.Namespace, left: int | None, progress: Progress) -> int:
    with connection_from_args(args) as conn, Reader(conn) as reader:
        parts = sorted(set(args.partition)) if args.partition else range(conn.topic(args.topic).partitions)
        start: StartPosition = args.start
        offsets = {p: start.resolve(reader, args.topic, p) for p in parts}
        while True:
            requests = [(args.topic, p, off, None) for p, off in offsets.items()]
            reached: dict[tuple[str, int], int] = {}
            for rec in reader.scan_many(requests, max_records=left, progress=reached):
                _print(rec, args.json, args.key_separator, sys.stdout)
                offsets[rec.partition] = rec.offset + 1
                progress.add(1, len(rec.value or b""))
                if left is not None:
                    left -= 1
            for (_, p), done in reached.items():  # past a compacted topic's gaps too
                offsets[p] = max(offsets[p], done)
            sys.stdout.flush()
            if not args.follow or left == 0:
                break
            # Poll the tail; the broker's consume long-polls on an etcd watch instead.
            time.sleep(_FOLLOW_POLL_S)
    return 0
