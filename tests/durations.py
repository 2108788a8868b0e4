"""The suite's durations table in tests/README.md, from the JUnit reports ``make test``
leaves in ``.cache/test-reports/`` (one per phase): each file's tests and seconds, and
the slowest tests. ``python -m tests.durations`` rewrites the table between the markers;
``--seconds`` writes the parallel phase's known test seconds :mod:`tests.packing` orders
the tests by instead.

A test's seconds are its setup, call and teardown as the worker that ran it saw them:
under ``TEST_WORKERS`` workers on two cores that is longer than it takes alone.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REPORTS = ROOT / ".cache" / "test-reports"
README = ROOT / "tests" / "README.md"
START, END = "<!-- durations:start -->", "<!-- durations:end -->"


@dataclass(frozen=True)
class Case:
    file: str
    name: str
    seconds: float
    phase: str


def cases(reports: list[Path]) -> list[Case]:
    out = []
    for report in reports:
        for case in ET.parse(report).getroot().iter("testcase"):
            module = case.get("classname", "").split(".")
            out.append(Case(f"{'/'.join(module)}.py", case.get("name", ""), float(case.get("time", 0)),
                            report.stem))
    return out


def table(got: list[Case], slowest: int = 20) -> str:
    by_file: dict[str, list[Case]] = defaultdict(list)
    for c in got:
        by_file[c.file].append(c)
    total = sum(c.seconds for c in got)
    lines = [f"{len(got)} tests, {total:,.0f} s of worker time in all.", "",
             f"The slowest {slowest}:", "", "| seconds | phase | test |", "|---:|---|---|"]
    lines += [f"| {c.seconds:.1f} | {c.phase} | `{c.file}::{c.name}` |"
              for c in sorted(got, key=lambda c: -c.seconds)[:slowest]]
    lines += ["", "Every file:", "", "| file | tests | seconds | slowest test (s) |", "|---|---:|---:|---|"]
    for file, cs in sorted(by_file.items(), key=lambda kv: -sum(c.seconds for c in kv[1])):
        top = max(cs, key=lambda c: c.seconds)
        lines.append(f"| `{file}` | {len(cs)} | {sum(c.seconds for c in cs):.1f} | `{top.name}` ({top.seconds:.1f}) |")
    return "\n".join(lines)


def write(reports: list[Path]) -> None:
    text = README.read_text()
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    README.write_text(f"{head}{START}\n{table(cases(reports))}\n{END}{tail}")


def nodeid(case: Case) -> str:
    """The pytest node id of ``case`` (a test in a class: JUnit names the class as a module)."""
    file = case.file
    if not (ROOT / file).exists():
        module, cls = file.removesuffix(".py").rsplit("/", 1)
        return f"{module}.py::{cls}::{case.name}"
    return f"{file}::{case.name}"


def write_seconds(reports: list[Path], floor_s: float = 2.0) -> None:
    """``tests/data/test_seconds.tsv``: the parallel phase's tests of ``floor_s`` or more."""
    from tests.packing import SECONDS

    got = sorted((c for c in cases(reports) if c.phase == "parallel" and c.seconds >= floor_s),
                 key=lambda c: (-c.seconds, nodeid(c)))
    lines = ["# seconds<TAB>test: the parallel phase's longer tests, from a make test run (python -m tests.durations "
             "--seconds); tests/packing.py hands the long ones out first"]
    SECONDS.write_text("\n".join([*lines, *(f"{c.seconds:.1f}\t{nodeid(c)}" for c in got)]) + "\n")


if __name__ == "__main__":
    args = sys.argv[1:]
    seconds = "--seconds" in args
    found = [Path(a) for a in args if a != "--seconds"] or sorted(REPORTS.glob("*.xml"))
    if not found:
        sys.exit(f"no JUnit reports in {REPORTS}: run make test first")
    write_seconds(found) if seconds else write(found)
