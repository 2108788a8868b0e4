"""``--plot`` of the bench scripts (bench/charts.py): a recorded result drawn to PNG."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.charts import plot_result

PNG = b"\x89PNG\r\n\x1a\n"
REPO = Path(__file__).resolve().parent.parent


def test_ratios_and_latencies_are_drawn(tmp_path: Path) -> None:
    result = {"broker_ratio": 0.83, "e2e_over_produce_p99": 1.05, "produce_p99_ms": 22.9, "e2e_p99_ms": 24.1,
              "clients": 16, "shared_tail_cache": True}
    out = plot_result(result, tmp_path / "b.png", "broker.py --quick")
    assert out.read_bytes().startswith(PNG)


def test_rows_are_drawn(tmp_path: Path) -> None:
    rows = [{"profile": "standard", "offered_rps": 200.0, "produce_p50_ms": 132.0, "produce_p99_ms": 260.0,
             "e2e_p50_ms": 232.9, "e2e_p99_ms": 477.1},
            {"profile": "fixed:1", "offered_rps": 200.0, "produce_p50_ms": 31.8, "produce_p99_ms": 67.0,
             "e2e_p50_ms": 59.0, "e2e_p99_ms": 191.2}]
    out = plot_result({"rows": rows, "partitions": 16}, tmp_path / "sub" / "t.png", "tail_latency.py")
    assert out.read_bytes().startswith(PNG)


def test_a_result_with_nothing_to_draw_says_so(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="nothing to draw"):
        plot_result({"runs": 3, "kind": "x"}, tmp_path / "n.png", "x")
    assert not (tmp_path / "n.png").exists()


#: Runs each bench script given with ``--help`` as ``python SCRIPT --help`` would, in
#: this one interpreter (one start for ~25 scripts, not one each), and prints a JSON line
#: per script: its exit status and what it printed.
_HELP_OF_EACH = """
import contextlib, io, json, runpy, sys
for script in sys.argv[1:]:
    out = io.StringIO()
    sys.argv, sys.path[0] = [script, "--help"], script.rsplit("/", 1)[0]
    with contextlib.redirect_stdout(out):
        try:
            runpy.run_path(script, run_name="__main__")
            code = 0
        except SystemExit as exc:
            code = exc.code or 0
    print(json.dumps({"script": script, "code": code, "out": out.getvalue()}))
"""


def test_every_bench_takes_plot() -> None:
    scripts = [str(s) for s in sorted((REPO / "bench").glob("*.py"))
               if s.name not in ("common.py", "charts.py", "__init__.py")]
    assert len(scripts) > 20
    out = subprocess.run([sys.executable, "-c", _HELP_OF_EACH, *scripts], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    helped = [json.loads(line) for line in out.stdout.splitlines()]
    assert [h["script"] for h in helped] == scripts
    for h in helped:
        assert h["code"] == 0 and "--plot" in h["out"], h["script"]
