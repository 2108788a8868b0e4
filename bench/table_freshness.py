"""Table freshness: seconds from a table topic's commit to its records being in the
Iceberg table, under steady load, with the default settings (issue 40).

Starts a local stack (real etcd + moto S3 on loopback, see ``bench/common.py``), a
one-partition table topic, pyiceberg's SQL catalog on SQLite, and the compactor service
in this process with its defaults (``LLOG_ICEBERG_FRESHNESS_S`` 30, pass interval 5 s,
sync interval 10 s). A writer appends ``--batch`` records ``--rate`` times a second for
``--seconds``, noting when each append was acknowledged; a poller loads the table twice
a second (the catalog and its current snapshot, as an engine planning a query would)
and notes when its row count first covered each offset. An offset's freshness is that
time minus its acknowledgement; appends in the first ``--warmup`` seconds are left out.

Prints p50, p90, p99 and the maximum over the measured appends of each run and the
median of each over ``--runs`` runs; the last line is one JSON object
(``freshness_p99_s`` and the others, ``appends``, the settings). Timers dominate the
figure (compaction age, pass and sync intervals), not CPU, so it holds on a busy host.
``--quick``: 75 s of load, 15 s of warm-up, one run (full: 240 s, 30 s, one run).
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import LocalStack, bench_args, emit_json, median, print_table

from compactor.service import CompactorService
from llog import Record, Topics, Writer
from llog.config import LlogConfig
from llog.connection import Connection
from llog.table import TableCatalog

TOPIC = "fresh"


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class _Poller:
    """Loads the table every ``interval_s`` and notes when each row count was first seen."""

    def __init__(self, conn: Connection, interval_s: float = 0.5) -> None:
        self.conn, self.interval_s = conn, interval_s
        self.seen: list[tuple[float, int]] = []  # (time, rows), rows increasing
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="freshness-poller")

    def _run(self) -> None:
        with TableCatalog(self.conn) as tables:
            while not self._stop.wait(self.interval_s):
                table = tables.table(TOPIC, create=False)
                snap = table.current_snapshot() if table is not None else None
                rows = int(snap.summary.get("total-records", "0")) if snap is not None and snap.summary else 0
                if not self.seen or rows > self.seen[-1][1]:
                    self.seen.append((time.time(), rows))

    def visible_at(self, offset: int) -> float | None:
        """When the table first held ``offset`` (offsets are dense from 0)."""
        return next((t for t, rows in self.seen if rows > offset), None)

    def __enter__(self) -> _Poller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def trial(cfg: LlogConfig, seconds: float, warmup: float, rate: float, batch: int) -> list[float]:
    """One run: the freshness of every measured append's last record."""
    acked: list[tuple[float, int]] = []  # (ack time, last offset)
    with Connection(cfg) as conn:
        Topics(conn).create(TOPIC, 1, table="iceberg")
        with CompactorService(cfg, http=False), _Poller(conn) as poller, Writer(conn) as w:
            start = time.time()
            n = 0
            while time.time() - start < seconds:
                res = w.append(TOPIC, 0, [Record(b"x" * 100) for _ in range(batch)])
                if time.time() - start >= warmup:
                    acked.append((time.time(), res.end_offset))
                n += 1
                time.sleep(max(0.0, start + n / rate - time.time()))
            last = acked[-1][1]
            deadline = time.time() + 4 * cfg.iceberg_freshness_s + 60
            while poller.visible_at(last) is None and time.time() < deadline:
                time.sleep(0.5)  # a bench, not a test: the figure is the wait
    out: list[float] = []
    for t, offset in acked:
        seen = poller.visible_at(offset)
        out.append(float("inf") if seen is None else seen - t)
    return out


def main() -> None:
    p = bench_args(__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=None, help="seconds of load per run")
    p.add_argument("--warmup", type=float, default=None, help="seconds of load left out of the figures")
    p.add_argument("--rate", type=float, default=20.0, help="appends per second")
    p.add_argument("--batch", type=int, default=50, help="records per append")
    args = p.parse_args()
    seconds = args.seconds or (75.0 if args.quick else 240.0)
    warmup = args.warmup if args.warmup is not None else (15.0 if args.quick else 30.0)
    runs = args.runs or 1
    rows: list[list[object]] = []
    figures: dict[str, list[float]] = {"p50": [], "p90": [], "p99": [], "max": []}
    with LocalStack() as stack:
        for r in range(runs):
            cfg = stack.config(iceberg_catalog_uri=f"sqlite:///{stack.workdir / f'catalog-{r}.db'}",
                               compactor_port=0, vacuum_interval_s=0)
            fresh = trial(cfg, seconds, warmup, args.rate, args.batch)
            got = {"p50": _percentile(fresh, 0.5), "p90": _percentile(fresh, 0.9),
                   "p99": _percentile(fresh, 0.99), "max": max(fresh)}
            for k, v in got.items():
                figures[k].append(v)
            rows.append([r + 1, len(fresh), *(f"{got[k]:.1f}" for k in ("p50", "p90", "p99", "max"))])
    print_table(["run", "appends", "p50 s", "p90 s", "p99 s", "max s"], rows)
    result: dict[str, object] = {f"freshness_{k}_s": round(median(v), 2) for k, v in figures.items()}
    result.update(appends=len(fresh), runs=runs, seconds=seconds, rate=args.rate, batch=args.batch,
                  iceberg_freshness_s=cfg.iceberg_freshness_s, iceberg_sync_interval_s=cfg.iceberg_sync_interval_s,
                  compactor_pass_interval_s=cfg.compactor_pass_interval_s)
    emit_json(result)


if __name__ == "__main__":
    main()
