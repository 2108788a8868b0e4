"""Compaction: what it costs and what it buys, on a partition of 10,000 small appends.

Starts a local stack (real etcd + moto S3 on loopback, see ``bench/common.py``). One
trial:

1. write ``--appends`` single-record appends (``--value-bytes`` each) to partition 0,
   packed 50 to a shared WAL blob and interleaved with another partition's appends, so
   no two slices of partition 0 touch — as when many writers each flush one slice of
   it per blob. Every append is its own index key.
2. scan the partition ``--runs`` times with ``Reader.scan``: time, GETs (whole and
   ranged), bytes.
3. compact it (``compact_once`` until idle) with the default run bounds.
4. scan it again the same way.

Readers (and the compactor) run with ``read_coalesce_gap_bytes=0``; before compaction
a scan reads each shared blob whole once (the blob cache, spec §9), so GETs before
count blobs, not slices; each scan before compaction is a new connection's, with its
blob cache empty. MiB are record payload (value bytes) throughout, the same
before and after. Figures are medians over scans and trials; the last line is one
JSON object with ``compaction_mib_s``, ``index_keys_before``, ``index_keys_after``,
``index_cut``, ``gets_per_mib_before``, ``gets_per_mib_after``, ``gets_cut``.
Targets: index keys cut >= 100x, GETs per MiB cut >= 10x.

Each trial writes and compacts two topics, one compacted to ``bytes-batch-v1`` and one
to Parquet (``compacted_format="parquet"``, spec §7.6), alternating which goes first,
and then scans them after compaction in turn, ``--runs`` times each, so both see the
machine at the same speed; the JSON adds ``parquet_scan_mib_s_after``,
``parquet_over_bytes_batch_scan`` (scan after compaction, Parquet / ``bytes-batch-v1``)
and the compacted bytes per record of each
(``compacted_bytes_per_record``, ``parquet_bytes_per_record``).

Last, a range of ``--range-records`` (140,000) JSON events of about 100 bytes, written
2,000 to an append, is compacted into one body of each format, just under the
compactor's default 16 MiB target, and scanned 3 x ``--runs`` times each way in turn: the
scan of a compacted range as large as the compactor makes them. The JSON adds
``range_parquet_over_bytes_batch_scan`` and both formats' bytes per record. Issue 21
asks the Parquet scan to be at least as fast as the ``bytes-batch-v1`` one.

``--quick`` (under a minute) measures a partition of 2,000 appends, one trial, five
scans each way (full: 10,000 appends, three trials, nine scans). A Parquet file costs a
fixed few tenths of a millisecond more to open (pyarrow) than a ``bytes-batch-v1`` body,
and less per record after that (Arrow turns its values into ``bytes``), so the ratio
grows with the records per compacted file: the small appends' files of 2,000 and
10,000 records sit near where the two meet, the large range is where compacted
history mostly lives.
"""

from __future__ import annotations

import gc
import json
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    MIB,
    LocalStack,
    bench_args,
    emit_json,
    median,
    mib_s,
    print_table,
    ratio,
)

from compactor import Compactor
from compactor.compact import COMPACTED
from llog import AppendGroup, Reader, Topics, Writer
from llog.codec.etcd_values.partition import IndexEntry
from llog.config import LlogConfig
from llog.connection import Connection

PER_BLOB = 50
#: Records per append when writing a range to compact into one large body.
RANGE_APPEND = 2_000
#: Events (:func:`_event`) that make one ``bytes-batch-v1`` body just under the
#: compactor's default ``compact_target_bytes`` (16 MiB).
RANGE_RECORDS = 140_000
EVENTS = ("view", "click", "add_to_cart", "purchase", "search")


@dataclass(frozen=True)
class Scan:
    seconds: float
    gets: float
    payload: int

    @property
    def mib_s(self) -> float:
        return mib_s(self.payload, self.seconds)

    @property
    def gets_per_mib(self) -> float:
        return self.gets / (self.payload / MIB)


@dataclass(frozen=True)
class Trial:
    keys_before: int
    keys_after: int
    before: Scan
    after: Scan
    compact_seconds: float
    compactions: int
    payload: int
    compacted_bytes: int


def _index_keys(conn: Connection, topic: str) -> int:
    k = conn.keys
    return conn.etcd.count(k.index_prefix(topic, 0), k.index_range_end(topic, 0))


def _compacted_bytes(conn: Connection, topic: str) -> int:
    k = conn.keys
    kvs = conn.etcd.scan(k.index_prefix(topic, 0), k.index_range_end(topic, 0))
    return sum(e.byte_length for e in (IndexEntry.decode(kv.value) for kv in kvs) if e.kind == "COMPACTED")


def _write(conn: Connection, topic: str, appends: int, value_bytes: int) -> None:
    with Writer(conn) as w:
        for base in range(0, appends, PER_BLOB):
            groups = []
            for i in range(base, min(appends, base + PER_BLOB)):
                value = (b"%08d" % i).ljust(value_bytes, b".")
                groups += [AppendGroup(topic, 0, [value]), AppendGroup(topic, 1, [b"filler"])]
            assert all(o.ok for o in w.append_shared(groups))


def _gets(conn: Connection) -> float:
    """GETs so far, whole-object (the blob cache's) and ranged."""
    return sum(conn.metrics.value("llog_s3_ops_total", op=op) for op in ("get", "get_range"))


def _scan(conn: Connection, topic: str, expect: int) -> Scan:
    gc.collect()  # each scan starts from a collected heap, not the previous scan's garbage
    gets0 = _gets(conn)
    t0 = time.perf_counter()
    n = payload = 0
    with Reader(conn) as r:
        for rec in r.scan(topic, 0, 0, expect):
            n += 1
            payload += len(rec.value)
    secs = time.perf_counter() - t0
    assert n == expect, f"scan returned {n} records, expected {expect}"
    return Scan(secs, _gets(conn) - gets0, payload)


def _cold_scan(cfg: LlogConfig, topic: str, expect: int) -> Scan:
    """A scan by a new connection: before compaction, a connection that scanned the
    partition once holds its shared blobs in its blob cache."""
    with Connection(cfg) as conn:
        return _scan(conn, topic, expect)


def _median_scan(scans: list[Scan]) -> Scan:
    return Scan(median([s.seconds for s in scans]), median([s.gets for s in scans]), scans[0].payload)


@dataclass(frozen=True)
class _Compacted:
    """A topic written, scanned and compacted; its scans after compaction still to do."""

    topic: str
    keys_before: int
    keys_after: int
    before: Scan
    compact_seconds: float
    compactions: int


def _write_and_compact(conn: Connection, appends: int, value_bytes: int, runs: int,
                       compacted_format: str | None) -> _Compacted:
    topic = f"bench-{compacted_format or 'llb1'}-{time.monotonic_ns() % 10**6}"
    Topics(conn).create(topic, 2, compacted_format=compacted_format)
    _write(conn, topic, appends, value_bytes)
    keys_before = _index_keys(conn, topic)
    before = _median_scan([_cold_scan(conn.config, topic, appends) for _ in range(runs)])
    t0 = time.perf_counter()
    compactions = 0
    with Compactor(conn) as c:
        while c.compact_once(topic, 0).outcome == COMPACTED:
            compactions += 1
    return _Compacted(topic, keys_before, _index_keys(conn, topic), before, time.perf_counter() - t0, compactions)


def trial(stack: LocalStack, appends: int, value_bytes: int, runs: int,
          formats: tuple[str | None, ...]) -> dict[str | None, Trial]:
    """One trial of each compacted format. The scans after compaction alternate between
    the formats, so a machine that speeds up or slows down meanwhile moves both alike."""
    cfg = stack.config("s3", compact_min_age_ms=0, settle_after_ms=0, read_coalesce_gap_bytes=0)
    with Connection(cfg) as conn:
        done = {fmt: _write_and_compact(conn, appends, value_bytes, runs, fmt) for fmt in formats}
        afters = _scans_in_turn(conn, {fmt: c.topic for fmt, c in done.items()}, appends, runs)
        return {
            fmt: Trial(c.keys_before, c.keys_after, c.before, afters[fmt], c.compact_seconds, c.compactions,
                       afters[fmt].payload, _compacted_bytes(conn, c.topic))
            for fmt, c in done.items()
        }


def _scans_in_turn(conn: Connection, topics: dict[str | None, str], expect: int, runs: int) -> dict[str | None, Scan]:
    """The median of ``runs`` scans of each topic, taken in turn, so a machine that speeds
    up or slows down meanwhile moves every topic's scans alike."""
    scans: dict[str | None, list[Scan]] = {fmt: [] for fmt in topics}
    for _ in range(runs):
        for fmt, topic in topics.items():
            scans[fmt].append(_scan(conn, topic, expect))
    return {fmt: _median_scan(s) for fmt, s in scans.items()}


def _event(rng: random.Random, i: int) -> bytes:
    """A JSON event of about 100 bytes, as an event topic holds: repeated field names
    and words, ids from ten thousand users, a random session id (the small appends'
    padded values shrink 40x in Parquet; these about 5x, closer to real data)."""
    return json.dumps({
        "user": rng.randrange(10_000), "event": EVENTS[i % len(EVENTS)], "page": f"/p/{rng.randrange(100_000)}",
        "ms": 1_700_000_000_000 + i, "session": f"{rng.getrandbits(64):016x}",
    }, separators=(",", ":")).encode()


def range_trial(stack: LocalStack, records: int, runs: int) -> dict[str | None, tuple[Scan, int]]:
    """``(scan, compacted bytes)`` of a partition of ``records`` JSON events, written
    2,000 to an append and compacted into one body of each format: the scan of a
    compacted range as large as the compactor makes them."""
    cfg = stack.config("s3", compact_min_age_ms=0, settle_after_ms=0)
    topics: dict[str | None, str] = {}
    with Connection(cfg) as conn:
        for fmt in (None, "parquet"):
            rng = random.Random(1)
            topic = topics[fmt] = f"bench-range-{fmt or 'llb1'}-{time.monotonic_ns() % 10**6}"
            Topics(conn).create(topic, 2, compacted_format=fmt)
            with Writer(conn) as w:
                for base in range(0, records, RANGE_APPEND):
                    w.append(topic, 0, [_event(rng, i) for i in range(base, min(records, base + RANGE_APPEND))])
            with Compactor(conn) as c:
                while c.compact_once(topic, 0).outcome == COMPACTED:
                    pass
            assert _index_keys(conn, topic) == 1, "the range did not compact into one body: lower --range-records"
        scans = _scans_in_turn(conn, topics, records, 3 * runs)
        return {fmt: (scans[fmt], _compacted_bytes(conn, topic)) for fmt, topic in topics.items()}


def main() -> None:
    p = bench_args(__doc__.splitlines()[0] if __doc__ else "compaction")
    p.add_argument("--appends", type=int, default=None,
                   help="appends to the measured partition (default 10,000; --quick: 2,000)")
    p.add_argument("--value-bytes", type=int, default=100, help="bytes per record value")
    p.add_argument("--trials", type=int, default=None, help="write-scan-compact-scan repetitions")
    p.add_argument("--range-records", type=int, default=RANGE_RECORDS,
                   help="records of the range compacted into one large body of each format (0: skip)")
    args = p.parse_args()
    runs = args.runs or (5 if args.quick else 9)
    trials = args.trials or (1 if args.quick else 3)
    appends = args.appends or (2_000 if args.quick else 10_000)
    import pyarrow.parquet  # noqa: F401 - a reader imports it once; keep that out of the first timed scan

    results: list[Trial] = []
    parquet: list[Trial] = []
    with LocalStack() as stack:
        for i in range(trials):
            done = trial(stack, appends, args.value_bytes, runs, (None, "parquet") if i % 2 == 0 else ("parquet", None))
            results.append(done[None])
            parquet.append(done["parquet"])
        ranged = range_trial(stack, args.range_records, runs) if args.range_records else None
    print(f"{appends} appends of {args.value_bytes} B to one partition, {PER_BLOB} per shared blob; "
          f"{trials} trial(s), {runs} scan(s) each; medians")
    figures = _small_appends(results, parquet, appends)
    if ranged is not None:
        figures |= _large_range(ranged, args.range_records, 3 * runs)
    emit_json(figures)


def _small_appends(results: list[Trial], parquet: list[Trial], appends: int) -> dict[str, float]:
    """The small-appends trials' table and lines, and their JSON figures."""
    pq_after = _median_scan([t.after for t in parquet])
    before = _median_scan([t.before for t in results])
    after = _median_scan([t.after for t in results])
    compact_s = median([t.compact_seconds for t in results])
    keys_before = int(median([t.keys_before for t in results]))
    keys_after = int(median([t.keys_after for t in results]))
    print_table(
        ["", "index keys", "scan MiB/s", "GETs", "GETs per MiB"],
        [
            ["before compaction", keys_before, before.mib_s, before.gets, before.gets_per_mib],
            ["after compaction", keys_after, after.mib_s, after.gets, after.gets_per_mib],
            ["after compaction to Parquet", int(median([t.keys_after for t in parquet])), pq_after.mib_s,
             pq_after.gets, pq_after.gets_per_mib],
        ],
    )
    llb1_bpr = median([t.compacted_bytes for t in results]) / appends
    pq_bpr = median([t.compacted_bytes for t in parquet]) / appends
    print(f"compacted bytes per record: bytes-batch-v1 {llb1_bpr:.1f}, Parquet {pq_bpr:.1f}")
    print(f"compaction: {mib_s(results[0].payload, compact_s):.3f} MiB/s, {keys_before / compact_s:.0f} slices/s "
          f"({compact_s:.2f} s, {results[0].compactions} compacted blob(s))")
    return {
        "compaction_mib_s": mib_s(results[0].payload, compact_s),
        "compaction_seconds": compact_s,
        "compaction_slices_s": keys_before / compact_s,
        "index_keys_before": keys_before,
        "index_keys_after": keys_after,
        "index_cut": ratio(keys_before, keys_after),
        "scan_mib_s_before": before.mib_s,
        "scan_mib_s_after": after.mib_s,
        "scan_speedup": ratio(after.mib_s, before.mib_s),
        "gets_per_mib_before": before.gets_per_mib,
        "gets_per_mib_after": after.gets_per_mib,
        "gets_cut": ratio(before.gets_per_mib, after.gets_per_mib),
        "parquet_scan_mib_s_after": pq_after.mib_s,
        "parquet_over_bytes_batch_scan": ratio(pq_after.mib_s, after.mib_s),
        "compacted_bytes_per_record": llb1_bpr,
        "parquet_bytes_per_record": pq_bpr,
        "parquet_compaction_seconds": median([t.compact_seconds for t in parquet]),
    }


def _large_range(ranged: dict[str | None, tuple[Scan, int]], records: int, runs: int) -> dict[str, float]:
    """The large range's lines and JSON figures."""
    (llb1, llb1_bytes), (pq, pq_bytes) = ranged[None], ranged["parquet"]
    print(f"a range of {records} records compacted into one body, {runs} scan(s) each way; medians")
    print_table(
        ["compacted to", "body MiB", "scan MiB/s", "records/s"],
        [
            ["bytes-batch-v1", llb1_bytes / MIB, llb1.mib_s, records / llb1.seconds],
            ["Parquet", pq_bytes / MIB, pq.mib_s, records / pq.seconds],
        ],
    )
    return {
        "range_records": records,
        "range_scan_mib_s": llb1.mib_s,
        "range_parquet_scan_mib_s": pq.mib_s,
        "range_parquet_over_bytes_batch_scan": ratio(pq.mib_s, llb1.mib_s),
        "range_compacted_bytes_per_record": llb1_bytes / records,
        "range_parquet_bytes_per_record": pq_bytes / records,
    }


if __name__ == "__main__":
    main()
