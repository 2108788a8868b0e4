"""The broker's produce-body decode cost: this tree's ``parse_produce`` against the one
at ``--baseline`` (a git revision, loaded from ``git show``), on the same bodies in the
same process, alternating. No servers: it is the CPU a request costs before anything
is written.

Rows: one 100-byte record (the tail-latency workload), ten (``bench/broker.py``'s
requests), ten with a key and a header, and 8 partitions x 100 records. Figures are
medians of ``--runs`` timings; ``ratio`` is baseline time / this tree's time (> 1:
this tree is faster). The last line is one JSON object.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tempfile
import timeit
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a file: python bench/...

from bench.common import bench_args, emit_json, median, print_table
from llog.broker import schemas

ROOT = Path(__file__).resolve().parent.parent


def baseline_module(rev: str, workdir: Path) -> ModuleType:
    """``llog/broker/schemas.py`` as it was at ``rev``, imported under another name."""
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:llog/broker/schemas.py"],
                            check=True, capture_output=True, text=True).stdout
    path = workdir / "baseline_schemas.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("baseline_schemas", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["baseline_schemas"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def body(partitions: int, records: int, size: int, keyed: bool = False) -> bytes:
    value = "x" * size
    record: Any = {"value": value, "key": "k", "headers": [["h", "y"]]} if keyed else value
    return json.dumps({"topic_partitions": [
        {"topic": "t", "partition": p, "records": [record] * records} for p in range(partitions)]}).encode()


def _us_per_call(parse: Callable[[bytes], object], b: bytes, number: int) -> float:
    return timeit.timeit(lambda: parse(b), number=number) / number * 1e6


def main() -> None:
    p = bench_args("produce-body decode: this tree against a baseline revision")
    p.add_argument("--baseline", required=True, help="git revision whose parser is the baseline")
    args = p.parse_args()
    runs = args.runs or (5 if args.quick else 9)
    with tempfile.TemporaryDirectory() as tmp:
        base = baseline_module(args.baseline, Path(tmp))
        cases = [("1 record", body(1, 1, 100)), ("10 records", body(1, 10, 100)),
                 ("10 keyed records", body(1, 10, 100, keyed=True)), ("8 x 100 records", body(8, 100, 100))]
        rows, result = [], {}
        for name, b in cases:
            number = 2000 if len(b) < 5000 else 100
            mine: list[float] = []
            theirs: list[float] = []
            for _ in range(runs):  # alternate, so drift hits both
                theirs.append(_us_per_call(base.parse_produce, b, number))
                mine.append(_us_per_call(schemas.parse_produce, b, number))
            ratio = median(theirs) / median(mine)
            rows.append([name, f"{median(theirs):.1f}", f"{median(mine):.1f}", f"{ratio:.2f}"])
            result[name.replace(" ", "_")] = {"baseline_us": round(median(theirs), 2),
                                              "this_us": round(median(mine), 2), "ratio": round(ratio, 3)}
    print_table(["body", f"{args.baseline} us", "this tree us", "ratio"], rows)
    emit_json({"baseline": args.baseline, **result})


if __name__ == "__main__":
    main()
