"""The order the parallel phase hands its tests out in: every worker starts with its
share of the long tests.

pytest-xdist's ``worksteal`` splits the collected tests into one contiguous chunk per
worker, in collection order, and an idle worker then steals the back half of the
longest queue. A test of a minute or two near the end of a chunk leaves the other
workers idle while it finishes: in the run that measured it the last fifth of the
parallel phase kept the two cores 53-76 % busy. The ~100 tests of 8 s or more are
70 % of the worker time, so they go first, spread over the chunks longest first to the
chunk with the least so far (LPT); the other tests fill each chunk in collection order
(a module's tests stay together, sharing the module's servers; a document's blocks are
never moved, they run in order).

Known seconds come from ``tests/data/test_seconds.tsv``, written from a run's JUnit
reports by ``python -m tests.durations --seconds``; a test it does not name counts as
short. A stale file costs packing, never a test.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TypeVar

import pytest

SECONDS = Path(__file__).resolve().parent / "data" / "test_seconds.tsv"
#: A test this long or longer is placed first.
LONG_S = 8.0
#: Tests that must run in collection order, on one worker: never moved (a document's
#: blocks share what the earlier ones made, tests/test_docs.py).
PINNED = ("tests/test_docs.py::",)

T = TypeVar("T")


def known_seconds(path: Path = SECONDS) -> dict[str, float]:
    """``nodeid → seconds`` from the file (empty when there is none)."""
    if not path.exists():
        return {}
    out = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            seconds, nodeid = line.split("\t", 1)
            out[nodeid] = float(seconds)
    return out


def chunk_sizes(n: int, workers: int) -> list[int]:
    """The sizes of worksteal's first chunks of ``n`` tests (``len(pending) // nodes
    remaining``, node by node)."""
    sizes, left = [], n
    for i in range(workers):
        size = left // (workers - i)
        sizes.append(size)
        left -= size
    return sizes


def packed(items: Sequence[T], ids: Sequence[str], seconds: Mapping[str, float], workers: int) -> list[T]:
    """``items`` (named ``ids``) reordered so each of ``workers`` chunks starts with its
    long tests, longest first."""
    if workers < 2 or len(items) < 2 * workers:
        return list(items)
    long = sorted((i for i, nodeid in enumerate(ids)
                   if seconds.get(nodeid, 0.0) >= LONG_S and not nodeid.startswith(PINNED)),
                  key=lambda i: (-seconds[ids[i]], ids[i]))
    sizes = chunk_sizes(len(items), workers)
    loads = [0.0] * workers
    heads: list[list[int]] = [[] for _ in range(workers)]
    for i in long:
        open_ = [c for c in range(workers) if len(heads[c]) < sizes[c]]
        c = min(open_, key=lambda c: (loads[c], c))
        heads[c].append(i)
        loads[c] += seconds[ids[i]]
    placed = set(long)
    rest = iter(i for i in range(len(items)) if i not in placed)
    order: list[int] = []
    for c in range(workers):
        order += heads[c]
        order += [next(rest) for _ in range(sizes[c] - len(heads[c]))]
    return [items[i] for i in order]


@pytest.hookimpl(trylast=True)  # after ``-m`` deselected: the chunks are of what runs
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    workers = int(getattr(config, "workerinput", {}).get("workercount", 1))
    if workers > 1:  # every worker collects, and all must come to the same order
        items[:] = packed(items, [i.nodeid for i in items], known_seconds(), workers)
