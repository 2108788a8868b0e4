"""``--plot PATH``: a PNG of a bench's result, drawn from the JSON object it prints.

Every bench ends with one JSON object (bench/common.py ``emit_json``); this draws what
that object holds, so one function serves every script:

- **ratios** (keys holding ``ratio`` or ``_over_``: this code against the baseline
  measured in the same run, llog against Apache Kafka), as horizontal bars with the
  1.0 line;
- **latencies** (keys ending in ``_ms``), as bars by percentile;
- **rows** (a list of objects under ``rows``, as ``tail_latency.py`` prints): p50 and
  p99 of produce and end to end per row, labelled with the row's profile and rate.

Needs matplotlib (the ``loadtest`` extra, also in ``dev``), imported only when a chart
is asked for.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any


def _numbers(result: dict[str, Any], keep: Any) -> dict[str, float]:
    return {k: float(v) for k, v in sorted(result.items())
            if isinstance(v, (int, float)) and not isinstance(v, bool) and keep(k)}


def _row_label(row: dict[str, Any], i: int) -> str:
    if "profile" in row:
        return f"{row['profile']} @ {row.get('offered_rps', '?'):g}/s"
    return f"row {i}"


def plot_result(result: dict[str, Any], path: Path, title: str) -> Path:
    """Draw ``result`` into ``path`` (PNG); raises :class:`SystemExit` with a one-line
    message when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit("--plot needs matplotlib: pip install -e '.[loadtest]'") from None
    ratios = _numbers(result, lambda k: "ratio" in k or "_over_" in k)
    latencies = _numbers(result, lambda k: k.endswith("_ms"))
    rows = [r for r in result.get("rows", []) if isinstance(r, dict)]
    #: ``(height in inches, draw into an axis)`` per panel with something to show.
    panels: list[tuple[float, Callable[[Any], None]]] = []
    if ratios:
        label = "ratio to the baseline measured in the same run (1.0: equal)"
        panels.append((_height(len(ratios)), lambda ax: _bars(ax, ratios, label, reference=1.0)))
    if latencies:
        panels.append((_height(len(latencies)), lambda ax: _bars(ax, latencies, "milliseconds")))
    if rows:
        panels.append((0.9 * len(rows) + 1.2, lambda ax: _row_bars(ax, rows)))
    if not panels:
        raise SystemExit(f"--plot: nothing to draw in this bench's result (keys: {', '.join(sorted(result))})")
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 1.2 + sum(h for h, _ in panels)), squeeze=False)
    for ax, (_, draw) in zip(axes[:, 0], panels, strict=True):
        draw(ax)
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _height(bars: int) -> float:
    return 0.35 * bars + 1.0


def _bars(ax: Any, data: dict[str, float], xlabel: str, reference: float | None = None) -> None:
    names = list(data)
    ax.barh(names, [data[n] for n in names], color="#4C72B0")
    for y, n in enumerate(names):
        ax.annotate(f"{data[n]:.3g}", (data[n], y), xytext=(3, 0), textcoords="offset points", va="center",
                    fontsize=8)
    if reference is not None:
        ax.axvline(reference, color="#C44E52", linestyle="--", linewidth=1)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.tick_params(axis="y", labelsize=8)


def _row_bars(ax: Any, rows: list[dict[str, Any]]) -> None:
    series = [k for k in ("produce_p50_ms", "produce_p99_ms", "e2e_p50_ms", "e2e_p99_ms") if k in rows[0]]
    width = 0.8 / max(1, len(series))
    for j, key in enumerate(series):
        ys = [i + j * width for i in range(len(rows))]
        vals = [float(r.get(key, 0)) for r in rows]
        ax.barh(ys, vals, height=width, label=key.removesuffix("_ms"))
        for y, v in zip(ys, vals, strict=True):
            ax.annotate(f"{v:.0f}", (v, y), xytext=(3, 0), textcoords="offset points", va="center", fontsize=7)
    ax.set_yticks([i + 0.4 - width / 2 for i in range(len(rows))], [_row_label(r, i) for i, r in enumerate(rows)])
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("milliseconds (log scale)")
    ax.legend(fontsize=8, loc="lower right")
