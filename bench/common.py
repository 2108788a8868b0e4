"""Shared helpers for the bench scripts: a local stack, timing, ratios, output.

A bench script does, in one process::

    args = bench_args("what it measures").parse_args()      # --quick, --runs
    with LocalStack() as stack:                               # real etcd + moto S3 on loopback
        cfg = stack.config("s3")                              # or "file"; fresh key root
        base = [seconds(lambda: raw_op()) for _ in range(runs)]
        mine = [seconds(lambda: llog_op()) for _ in range(runs)]
    print_table(["row", "MiB/s", "ratio"], [["x", mib_s(n, median(mine)),
                                            median_ratio(n, mine, n, base)]])
    emit_json({...})                                          # ONE JSON object, the last line

Figures on a shared machine are noisy: time the baseline next to the thing measured, in
the same run, alternate their order, and report medians of repeated runs.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import shutil
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

from llog.config import LlogConfig
from llog.devstack import EtcdServer, S3ProxyServer, S3Server, scratch_dir
from llog.errors import ConfigError
from llog.nemesis.latency import profile
from llog.store.s3 import S3Store

MIB = 1024 * 1024
BUCKET = "llog-bench"

os.environ.setdefault("AWS_ACCESS_KEY_ID", "llog")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "llog-secret")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")


#: Clock ticks per second of /proc's CPU times.
_TICKS = os.sysconf("SC_CLK_TCK")


def bench_args(description: str) -> argparse.ArgumentParser:
    """An argument parser with the options every bench takes (``--quick``, ``--runs``);
    add your own before ``parse_args()``."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="a short run (under 2 minutes)")
    p.add_argument("--runs", type=int, default=None, help="repetitions per figure (median reported)")
    p.add_argument(
        "--s3-profile", action=_S3ProfileAction, metavar="PROFILE",
        help="put the nemesis S3 proxy with this latency profile between the bench and S3: "
        "standard, express, none or fixed:<ms> (sets LLOG_BENCH_S3_PROFILE, which LocalStack reads)",
    )
    p.add_argument("--plot", action=_PlotAction, metavar="PNG",
                   help="also draw the result into this PNG file (bench/charts.py; needs matplotlib)")
    return p


#: Where :func:`emit_json` draws the result (``--plot``), if anywhere.
_plot_path: Path | None = None


class _PlotAction(argparse.Action):
    """Notes the chart's path for :func:`emit_json`, so every bench draws without
    passing it on."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        global _plot_path
        _plot_path = Path(str(values))
        setattr(namespace, self.dest, values)


class _S3ProfileAction(argparse.Action):
    """Hands the profile to :class:`LocalStack` through the environment, so every bench
    script gets the flag without passing it on (and child processes see it too)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        try:
            profile(str(values))  # an unknown name fails at parse time
        except ConfigError as exc:
            raise argparse.ArgumentError(self, str(exc)) from None
        os.environ["LLOG_BENCH_S3_PROFILE"] = str(values)
        setattr(namespace, self.dest, values)


class LocalStack:
    """A real etcd and a moto S3 server on free loopback ports, stopped on exit.

    ``LLOG_BENCH_ETCD_ENDPOINT`` / ``LLOG_BENCH_S3_ENDPOINT`` point the bench at servers
    someone else runs instead (the docker-compose stack). ``s3_profile`` (default
    ``LLOG_BENCH_S3_PROFILE``, set by ``--s3-profile``) puts the nemesis S3 proxy with
    that latency profile in front of S3; :attr:`s3_endpoint` is then the proxy.
    """

    def __init__(self, s3_profile: str | None = None) -> None:
        self.workdir = scratch_dir("llog-bench-")
        self._servers: list[EtcdServer | S3Server | S3ProxyServer] = []
        self.etcd_endpoint = os.environ.get("LLOG_BENCH_ETCD_ENDPOINT", "")
        self.s3_endpoint = os.environ.get("LLOG_BENCH_S3_ENDPOINT", "")
        self.s3_profile = s3_profile or os.environ.get("LLOG_BENCH_S3_PROFILE") or None

    def __enter__(self) -> LocalStack:
        try:
            if not self.etcd_endpoint:
                etcd = EtcdServer(self.workdir)
                self._servers.append(etcd)
                etcd.wait_ready()
                self.etcd_endpoint = etcd.endpoint
            if not self.s3_endpoint:
                s3 = S3Server(self.workdir)
                self._servers.append(s3)
                s3.wait_ready()
                self.s3_endpoint = s3.endpoint_url
            if self.s3_profile:
                proxy = S3ProxyServer(self.workdir, self.s3_endpoint, self.s3_profile)
                self._servers.append(proxy)
                proxy.wait_ready()
                self.s3_endpoint = proxy.endpoint_url
            store = S3Store(BUCKET, endpoint_url=self.s3_endpoint)
            try:
                store.create_bucket()
            finally:
                store.close()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def pids(self) -> list[int]:
        """The server processes this stack started (etcd, the S3 server, the proxy)."""
        return [s.proc.pid for s in self._servers]

    def stop(self) -> None:
        for s in reversed(self._servers):
            s.stop()
        self._servers.clear()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def config(self, store: Literal["s3", "file"] = "s3", **overrides: Any) -> LlogConfig:
        """A config on this stack with a fresh key root (etcd keys and object keys)."""
        root = f"bench-{uuid.uuid4().hex[:10]}"
        if store == "s3":
            obj = f"s3://{BUCKET}"
        else:
            path = self.workdir / "file-store"
            path.mkdir(exist_ok=True)
            obj = f"file://{path}"
        return LlogConfig(
            etcd_endpoints=(self.etcd_endpoint,),
            object_store=obj,
            s3_endpoint_url=self.s3_endpoint if store == "s3" else None,
            root_prefix=root,
            **overrides,
        )


def freeze_heap() -> None:
    """Move every object allocated so far out of the garbage collector's view: a bench
    that pre-builds its workload would otherwise pay for walking it in every full
    collection inside the timed section, a cost a streaming producer does not have."""
    gc.collect()
    gc.freeze()


def seconds(fn: Callable[[], object]) -> float:
    """Wall time of one call of ``fn``."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def median_seconds(fn: Callable[[], object], runs: int) -> float:
    """Median wall time of ``runs`` calls of ``fn``."""
    return statistics.median(seconds(fn) for _ in range(runs))


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def mib_s(nbytes: float, secs: float) -> float:
    return nbytes / MIB / secs if secs > 0 else float("inf")


def ratio(value: float, baseline: float) -> float:
    return value / baseline if baseline > 0 else float("nan")


def median_ratio(
    nbytes: float, secs: Sequence[float], base_bytes: float, base_secs: Sequence[float]
) -> float:
    """Median over repetitions ``i`` of ``MiB/s(nbytes, secs[i]) / MiB/s(base_bytes, base_secs[i])``:
    each repetition's figure against the baseline measured next to it."""
    return median([
        ratio(mib_s(nbytes, s), mib_s(base_bytes, b)) for s, b in zip(secs, base_secs, strict=True)
    ])


def print_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """A plain aligned text table (floats with 2 decimals)."""

    def cell(v: object) -> str:
        return f"{v:.2f}" if isinstance(v, float) else str(v)

    text = [[cell(v) for v in r] for r in [header, *rows]]
    widths = [max(len(r[i]) for r in text) for i in range(len(header))]
    for n, r in enumerate(text):
        cells = [c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))]
        print("  ".join(cells))
        if n == 0:
            print("  ".join("-" * w for w in widths))


def cpu_seconds(pids: Sequence[int], *, children: bool = False) -> float:
    """User + system CPU seconds the processes ``pids`` (and their waited-for children)
    have used so far; with ``children``, their live child processes' too, recursively
    (a broker's workers). Linux ``/proc``."""
    return sum(_cpu_ticks(pid, children) for pid in pids) / _TICKS


def _cpu_ticks(pid: int, children: bool) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
    if children:
        for kid in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
            with contextlib.suppress(FileNotFoundError):  # a child gone meanwhile
                ticks += _cpu_ticks(int(kid), True)
    return ticks


def emit_json(result: dict[str, object]) -> None:
    """Print the bench's result as ONE JSON object; call it last."""
    clean = {k: round(v, 4) if isinstance(v, float) else v for k, v in result.items()}
    if _plot_path is not None:
        from bench.charts import plot_result

        title = f"{Path(sys.argv[0]).name} {' '.join(a for a in sys.argv[1:] if a.startswith('--quick'))}".strip()
        print(f"chart: {plot_result(clean, _plot_path, title)}", file=sys.stderr)
    print(json.dumps(clean, sort_keys=True), flush=True)
