"""``llog demo`` runs the whole system once and says so, one line a step."""

from __future__ import annotations

import os
import subprocess
import sys


def test_demo_runs_every_step() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "llog", "demo", "--no-spark", "--records", "4000"],
        capture_output=True, text=True, timeout=300, env={**os.environ},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    steps = [line.split()[0] for line in lines if line.startswith("[")]
    assert steps == [f"[{i}/7]" for i in range(1, 8)]
    verdict = next(line for line in lines if line.startswith("[7/7]"))
    assert "every one of 4,400 records read back exactly once" in verdict
    group = next(line for line in lines if line.startswith("[4/7]"))
    assert "0 re-delivered" in group and "committed offsets sum to 4,400" in group
    assert "skipped (--no-spark)" in out.stdout
    assert lines[-1].startswith("  docs:")
    assert "Traceback" not in out.stderr
