"""tests/cpu_profile.py: CPU given to the test whose pytest process is the nearest
ancestor, sampled from /proc."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.cpu_profile import NO_TEST, Sampler, attribute


def test_cpu_goes_to_the_test_of_the_nearest_pytest_ancestor() -> None:
    # 1 init; 10 and 20 pytest workers; 11 a broker of 10's, 12 its worker; 21 of 20's; 30 an orphan.
    procs = {1: (0, 0), 10: (1, 0), 11: (10, 0), 12: (11, 0), 20: (1, 0), 21: (20, 0), 30: (1, 0)}
    ticks = {10: 1, 11: 2, 12: 4, 20: 8, 21: 16, 30: 32, 99: 64}  # 99: gone before it was seen
    got = attribute(procs, ticks, {10: "t.py::a", 20: ""})
    assert got == {"t.py::a": 7, NO_TEST: 8 + 16 + 32 + 64}


def test_a_child_process_s_cpu_is_its_test_s(tmp_path: Path) -> None:
    (tmp_path / str(os.getpid())).write_text("tests/x.py::busy")
    sampler = Sampler(tmp_path, interval=0.2)
    sampler.start()
    busy = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass"
    subprocess.run([sys.executable, "-c", busy], check=True)
    sampler.stop()
    assert sampler.by_test["tests/x.py::busy"] >= 30  # ticks (1/100 s): the child's 0.6 s, most of it
    assert sampler.by_program["python -c"] >= 30
