"""Any bench of this directory, this tree against an earlier commit, interleaved.

Checks out ``--baseline`` into a temporary git worktree and runs the bench given after
``--`` alternately from that tree and from this one (each in its own child process,
importing its own llog: the worktree is first on ``PYTHONPATH``, and the bench's
brokers start from there too), ``--runs`` rounds, the order swapped every round so
drift on a shared machine hits both. Each run's last stdout line is the bench's JSON
object; for every numeric field the table shows the median over the rounds for each
tree, the median of the per-round ratios (this tree / baseline) and their range (the
noise). The last line is one JSON object.

    python bench/versus.py --baseline 57dcce7 --runs 3 -- bench/kafka.py --quick
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a file: python bench/...

from bench.common import bench_args, emit_json, median, print_table

REPO = Path(__file__).resolve().parent.parent


def _run(tree: Path, bench: list[str]) -> dict[str, Any]:
    """One run of ``bench`` from ``tree``: its last stdout line, parsed."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, *bench], cwd=tree, env=env, capture_output=True, text=True,
                         timeout=3600)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(bench)} in {tree} failed:\n{out.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _numbers(d: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """The numeric fields of a bench's JSON object, nested ones as ``a.b``."""
    out: dict[str, float] = {}
    for k, v in d.items():
        if isinstance(v, bool):
            continue
        if isinstance(v, (int, float)):
            out[prefix + k] = float(v)
        elif isinstance(v, dict):
            out.update(_numbers(v, f"{prefix}{k}."))
    return out


def main() -> None:
    p = bench_args(__doc__.splitlines()[0])
    p.add_argument("--baseline", required=True, help="the git revision to compare with")
    p.add_argument("bench", nargs="+", help="the bench and its arguments, after --")
    args = p.parse_args()
    runs = args.runs or 3
    rounds: list[tuple[dict[str, float], dict[str, float]]] = []
    with tempfile.TemporaryDirectory(prefix="llog-versus-") as tmp:
        base = Path(tmp) / "baseline"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(base), args.baseline],
                       check=True)
        try:
            for r in range(runs):
                order = [("base", base), ("this", REPO)] if r % 2 == 0 else [("this", REPO), ("base", base)]
                got: dict[str, dict[str, float]] = {}
                for name, tree in order:
                    print(f"round {r + 1}/{runs}: {name}", file=sys.stderr, flush=True)
                    got[name] = _numbers(_run(tree, args.bench))
                rounds.append((got["base"], got["this"]))
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(base)], check=False)
    keys = [k for k in rounds[0][1] if all(k in b and k in t for b, t in rounds)]
    rows, result = [], {}
    for k in keys:
        b = median([b[k] for b, _ in rounds])
        t = median([t[k] for _, t in rounds])
        ratios = [t_[k] / b_[k] for b_, t_ in rounds if b_[k]]
        ratio = median(ratios) if ratios else float("nan")
        low, high = (min(ratios), max(ratios)) if ratios else (float("nan"), float("nan"))
        rows.append([k, b, t, ratio, f"{low:.2f} to {high:.2f}"])
        result[k] = {"baseline": b, "this": t, "ratio": ratio, "ratio_low": low, "ratio_high": high}
    print_table(["field", f"baseline {args.baseline}", "this tree", "ratio", "rounds' ratios"], rows)
    emit_json({"baseline": args.baseline, "bench": " ".join(args.bench), "runs": runs, "fields": result})


if __name__ == "__main__":
    main()
