"""Fuzzing in the suite, each for a fixed time budget (``LLOG_FUZZ_SECONDS``, default
15 s a target; docs/operations.md has the longer run): the coverage-guided atheris
targets of ``tests/fuzz/`` on the Kafka frame parser and the batch check, started from
well-formed seeds plus every input a past run found (``tests/fuzz/regressions/``, kept
so each finding stays fixed), and schemathesis against a live broker's OpenAPI
document. Each must finish its budget without a finding."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from llog.config import LlogConfig
from llog.connection import Connection
from llog.topics import Topics
from tests.broker_harness import broker_process
from tests.fuzz.seeds import write

ROOT = Path(__file__).resolve().parent.parent
REGRESSIONS = Path(__file__).resolve().parent / "fuzz" / "regressions"
SECONDS = int(os.environ.get("LLOG_FUZZ_SECONDS", "15"))


@pytest.mark.parametrize("target", ["kafka_batches", "kafka_frames"])
def test_atheris_target_finds_nothing(target: str, tmp_path: Path) -> None:
    pytest.importorskip("atheris")
    corpus, seeds = tmp_path / "corpus", tmp_path / "seeds"
    corpus.mkdir()
    write(target, seeds)
    dirs = [corpus, seeds]
    if (REGRESSIONS / target).is_dir():
        dirs.append(REGRESSIONS / target)
    # -timeout and -rss_limit_mb make a slow input or a memory blow-up a finding too.
    run = subprocess.run(
        [sys.executable, "-m", f"tests.fuzz.{target}", f"-max_total_time={SECONDS}", "-timeout=10",
         "-rss_limit_mb=1536", "-print_final_stats=1", f"-artifact_prefix={tmp_path}/", *map(str, dirs)],
        cwd=ROOT, capture_output=True, text=True, timeout=SECONDS + 300,
    )
    out = run.stdout + run.stderr
    found = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(("crash-", "timeout-", "oom-")))
    assert run.returncode == 0 and not found, f"{target} found {found}:\n{out[-4000:]}"
    executed = re.search(r"stat::number_of_executed_units:\s*(\d+)", out)
    assert executed is not None and int(executed.group(1)) > 1000, out[-2000:]


def test_schemathesis_finds_nothing_in_the_broker_api(config: LlogConfig, tmp_path: Path) -> None:
    st = shutil.which("st", path=str(Path(sys.executable).parent))
    if st is None:
        pytest.skip("schemathesis is not installed")
    with Connection(config) as conn:
        Topics(conn).create("fz", 2)
    with broker_process(config) as broker:
        run = subprocess.run(
            [st, "run", f"{broker.url}/openapi.json", "--max-time", str(SECONDS), "--workers", "1",
             "--checks", "not_a_server_error,status_code_conformance,content_type_conformance,"
             "response_schema_conformance", "--generation-database", "none", "--no-color",
             "--request-timeout", "30"],
            cwd=tmp_path, capture_output=True, text=True, timeout=SECONDS + 300,
        )
        assert broker.request("GET", "/health")[0] == 200  # still up
    assert run.returncode == 0, (run.stdout + run.stderr)[-6000:]
    print(*[line for line in run.stdout.splitlines() if "generated" in line])  # with -s: how many cases
