"""Every script in ``examples/`` runs as its docstring says (``python examples/X.py``,
no ``LLOG_*`` variables, so each starts its own throw-away etcd and file store), with
fewer records, and prints what shows it worked. The Spark ones start a JVM of their
own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: script -> (arguments, a line its output must hold)
EXAMPLES = {
    "exactly_once_sqlite.py": ([], "output 1000 rows, 1000 distinct"),
    "spark_pipeline.py": (["--records", "2000"], "2000 orders"),
    "table_pipeline.py": (["--records", "2000"], "all counts agree"),
}


def test_every_example_is_listed() -> None:
    assert sorted(p.name for p in (ROOT / "examples").glob("*.py")) == sorted(EXAMPLES)


@pytest.mark.parametrize("script", sorted(EXAMPLES))
def test_example_runs_as_documented(script: str) -> None:
    args, expected = EXAMPLES[script]
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLOG_")}
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / script), *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert expected in done.stdout, done.stdout[-2000:]
