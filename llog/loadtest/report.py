"""Pictures of a load-test run: PNG charts and ``report.html`` in its run directory.

Reads what a run leaves behind (``client/client_samples.jsonl``, ``collector.jsonl``,
``chaos.json``, ``summary.json``) and draws, over the run's time axis with every fault
marked: acknowledged records/s, produce latency p50/p99, CPU per process, etcd
operations/s and S3 requests/s. ``report.html`` shows the charts next to the
reconciliation verdict and the run's headline figures; it references the PNGs by
relative path, so the directory can be copied or served as it is.

Needs matplotlib (the ``loadtest`` extra, also in ``dev``); without it the report says
so and has no charts. ``python -m llog.loadtest.report RUN_DIR`` redraws an old run.
"""

from __future__ import annotations

import html
import json
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: Up to this many chaos steps are labelled on the charts.
_LABELLED = 8
#: Chart files, in the order the report shows them.
CHARTS = ("throughput.png", "latency.png", "cpu.png", "etcd_s3.png")


def _jsonl(path: Path) -> Iterator[dict[str, Any]]:
    if not path.exists():
        return
    with path.open() as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def _json(path: Path, default: Any) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return default


def client_series(run_dir: Path) -> dict[str, list[float]]:
    """Per interval: time, acknowledged records/s, p50 and p99 produce latency (ms)."""
    out: dict[str, list[float]] = {"t": [], "acked_rec_s": [], "p50_ms": [], "p99_ms": []}
    prev_t, prev_acked = 0.0, 0
    for s in _jsonl(run_dir / "client" / "client_samples.jsonl"):
        t, acked = float(s["t"]), int(s["acked_records"])
        out["t"].append(t)
        out["acked_rec_s"].append((acked - prev_acked) / max(t - prev_t, 1e-9))
        lat = s.get("latency") or {}
        out["p50_ms"].append(float(lat.get("p50_ms") or 0.0))
        out["p99_ms"].append(float(lat.get("p99_ms") or 0.0))
        prev_t, prev_acked = t, acked
    return out


def _rate(prev: dict[str, float], now: dict[str, float], dt: float) -> float:
    """Sum of the counters' increase per second; a counter that went down belongs to a
    restarted process, whose whole new value is its increase."""
    total = 0.0
    for k, v in now.items():
        before = prev.get(k, 0.0)
        total += v - before if v >= before else v
    return total / max(dt, 1e-9)


def collector_series(run_dir: Path) -> dict[str, Any]:
    """Per collector sample: time, CPU % per process, etcd ops/s, S3 requests/s."""
    t: list[float] = []
    cpu: dict[str, list[float | None]] = {}
    etcd: list[float] = []
    s3: list[float] = []
    prev_t = 0.0
    prev: dict[str, dict[str, float]] = {"etcd": {}, "s3": {}}
    for i, s in enumerate(_jsonl(run_dir / "collector.jsonl")):
        now = float(s["t"])
        t.append(now)
        for name, p in s.get("processes", {}).items():
            cpu.setdefault(name, [None] * i).append(p.get("cpu_pct"))
        for series in cpu.values():
            if len(series) < i + 1:
                series.append(None)
        counters: dict[str, dict[str, float]] = {"etcd": {}, "s3": {}}
        for proc, metrics in s.get("metrics", {}).items():
            for k, v in metrics.items():
                if k.startswith("llog_etcd_ops_total"):
                    counters["etcd"][f"{proc}/{k}"] = v
                elif k.startswith("llog_s3_ops_total"):
                    counters["s3"][f"{proc}/{k}"] = v
        etcd.append(_rate(prev["etcd"], counters["etcd"], now - prev_t))
        s3.append(_rate(prev["s3"], counters["s3"], now - prev_t))
        prev, prev_t = counters, now
    return {"t": t, "cpu": cpu, "etcd_ops_s": etcd, "s3_requests_s": s3}


def _faults(run_dir: Path) -> list[tuple[float, str]]:
    return [(float(e.get("done_s") or e.get("planned_s") or 0.0), f"{e.get('action')} {e.get('target')}")
            for e in _json(run_dir / "chaos.json", [])]


def draw_charts(run_dir: Path) -> list[str]:
    """Write the PNG charts into ``run_dir``; return their file names (none without
    matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("matplotlib is not installed: no charts (pip install 'llog[loadtest]')")
        return []
    client, coll, faults = client_series(run_dir), collector_series(run_dir), _faults(run_dir)

    def chart(name: str, title: str, ylabel: str, lines: list[tuple[list[float], list[Any], str]]) -> str:
        fig, ax = plt.subplots(figsize=(9, 3.2), dpi=100)
        for xs, ys, label in lines:
            ax.plot(xs, [float("nan") if y is None else y for y in ys], label=label, linewidth=1.4)
        for at, what in faults:
            ax.axvline(at, color="crimson", linestyle="--", linewidth=1 if len(faults) <= _LABELLED else 0.5)
            if len(faults) <= _LABELLED:  # beyond that the labels overlap: report.html lists them
                ax.annotate(what, (at, 1), xycoords=("data", "axes fraction"), xytext=(3, -12),
                            textcoords="offset points", color="crimson", fontsize=8)
        if len(faults) > _LABELLED:
            title += f" ({len(faults)} chaos steps dashed; listed in report.html)"
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("seconds since load start")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        top = ax.get_ylim()[1]
        ax.set_ylim(0, top * 1.15 if top > 0 else 1)  # room above the peak for the fault labels
        if len(lines) > 1:
            ax.legend(fontsize=8, loc="lower right", ncol=min(4, len(lines)))
        fig.tight_layout()
        fig.savefig(run_dir / name)
        plt.close(fig)
        return name

    return [
        chart("throughput.png", "acknowledged records/s (clients)", "records/s",
              [(client["t"], client["acked_rec_s"], "acked")]),
        chart("latency.png", "produce latency per interval", "ms",
              [(client["t"], client["p50_ms"], "p50"), (client["t"], client["p99_ms"], "p99")]),
        chart("cpu.png", "CPU per process", "% of one core",
              [(coll["t"], ys, name) for name, ys in sorted(coll["cpu"].items())]),
        chart("etcd_s3.png", "etcd operations/s and S3 requests/s (all processes)", "per second",
              [(coll["t"], coll["etcd_ops_s"], "etcd ops"), (coll["t"], coll["s3_requests_s"], "S3 requests")]),
    ]


def _figures(summary: dict[str, Any]) -> list[tuple[str, str]]:
    c, v = summary.get("client", {}), summary.get("verdict", {})
    lat = c.get("latency", {})
    return [
        ("acknowledged records", f"{v.get('acked', 0):,}"),
        ("verified / lost / duplicated", f"{v.get('verified', 0):,} / {v.get('lost', 0)} / {v.get('duplicated', 0)}"),
        ("acked rate", f"{c.get('acked_rate_rec_s', 0)} rec/s"),
        ("produce p50 / p99", f"{lat.get('p50_ms')} / {lat.get('p99_ms')} ms"),
        ("etcd ops per acked record", str(summary.get("etcd", {}).get("ops_per_acked_record"))),
        ("S3 class A / B requests", f"{summary.get('s3', {}).get('class_a_requests', 0):.0f} / "
                                    f"{summary.get('s3', {}).get('class_b_requests', 0):.0f}"),
    ]


def _availability(a: dict[str, Any]) -> str:
    """The availability section: the headline, then one row per fault window."""
    if not a:
        return "<p>No availability figures in summary.json.</p>"
    head = (f"<p>{len(a['zero_ack_intervals'])} interval(s) of {a['interval_s']} s with nothing acknowledged, "
            f"{len(a['zero_ack_intervals_unexcused'])} while etcd had a majority; longest gap "
            f"{a['longest_gap_s']} s ({a['longest_unexcused_gap_s']} s unexcused); steady rate "
            f"{a['steady_rate_rec_s']} rec/s.</p>")
    cells = ("kind", "target", "start_s", "end_s", "rate_rec_s", "vs_steady", "zero_ack_intervals", "longest_gap_s")
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(str(f.get(c)))}</td>" for c in cells) + "</tr>"
                   for f in a.get("faults", []))
    return head + "<table><tr>" + "".join(f"<th>{c}</th>" for c in cells) + f"</tr>{rows}</table>"


def write_report(run_dir: Path) -> Path:
    """Draw the charts and write ``report.html``; return its path."""
    charts = draw_charts(run_dir)
    summary = _json(run_dir / "summary.json", {})
    ok = bool(summary.get("verdict", {}).get("all_acked_verified"))
    verdict = ("every acknowledged record verified: none lost, misplaced or duplicated" if ok
               else "RECONCILIATION FAILED: see summary.json")
    faults = "".join(f"<li>{at:.1f} s: {html.escape(what)}</li>" for at, what in _faults(run_dir)) or "<li>none</li>"
    rows = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in _figures(summary))
    avail = _availability(summary.get("availability", {}))
    imgs = "".join(f'<figure><img src="{c}" alt="{c}"></figure>' for c in charts) or (
        "<p>No charts: matplotlib is not installed (<code>pip install 'llog[loadtest]'</code>).</p>")
    name = html.escape(str(summary.get("scenario", run_dir.name)))
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>llog load test: {name}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 960px; color: #222; }}
.verdict {{ padding: .6em 1em; border-radius: 6px; font-weight: 600;
           background: {"#e6f4ea" if ok else "#fce8e6"}; color: {"#137333" if ok else "#a50e0e"}; }}
table {{ border-collapse: collapse; margin: 1em 0; }} th, td {{ text-align: left; padding: .2em 1em .2em 0; }}
img {{ max-width: 100%; }} figure {{ margin: 1em 0; }}
</style></head><body>
<h1>llog load test: {name}</h1>
<p class="verdict" id="verdict">{verdict}</p>
<table>{rows}</table>
<h2>Faults injected</h2><ul>{faults}</ul>
<h2>Availability through the faults</h2>{avail}
<h2>Over time</h2>{imgs}
<p>Run directory: <code>{html.escape(str(run_dir))}</code>; every figure comes from its
<code>summary.json</code>, <code>client/client_samples.jsonl</code> and <code>collector.jsonl</code>.</p>
</body></html>
"""
    out = run_dir / "report.html"
    out.write_text(page)
    return out


if __name__ == "__main__":
    for arg in sys.argv[1:] or ["."]:
        print(write_report(Path(arg)))
