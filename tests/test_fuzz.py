"""Fuzzing in the suite, each for a fixed time budget (``LLOG_FUZZ_SECONDS``, default
15 s a target; docs/operations.md has the longer run): the coverage-guided atheris
targets of ``tests/fuzz/`` on the Kafka frame parser and the batch check, started from
well-formed seeds plus every input a past run found (``tests/fuzz/regressions/``, kept
so each finding stays fixed), and schemathesis with every check against a live
broker's OpenAPI document (a broker with a token: its 401s are documented too), for a
fixed number of cases per operation unless ``LLOG_FUZZ_SECONDS`` is set. Each must
finish its budget without a finding."""

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
from llog.topic.admin import Topics
from tests.broker_harness import BrokerProcess, broker_process
from tests.fuzz.seeds import write

ROOT = Path(__file__).resolve().parent.parent
REGRESSIONS = Path(__file__).resolve().parent / "fuzz" / "regressions"
SECONDS = int(os.environ.get("LLOG_FUZZ_SECONDS", "15"))
#: The broker token of the schemathesis run's broker.
TOKEN = "fuzz-token"
#: Cases schemathesis generates per operation after its coverage phase's.
ST_EXAMPLES = 30


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
    """Every check schemathesis has, against a broker that asks for a token (given to
    schemathesis, so the routes behind it are exercised; its ``ignored_auth`` check
    sends requests without it)."""
    st = shutil.which("st", path=str(Path(sys.executable).parent))
    if st is None:
        pytest.skip("schemathesis is not installed")
    with Connection(config) as conn:
        Topics(conn).create("fz", 2)
    # Cases, not seconds, bound the suite's run: a time budget spent on a loaded machine
    # left operations untested. A run with LLOG_FUZZ_SECONDS set fuzzes for that long.
    budget = ["--max-time", str(SECONDS)] if "LLOG_FUZZ_SECONDS" in os.environ else []
    with broker_process(config, LLOG_BROKER_TOKEN=TOKEN) as broker:
        _assert_documented_401s(broker)
        run = subprocess.run(
            [st, "run", f"{broker.url}/openapi.json", "--checks", "all", "-H", f"Authorization: Bearer {TOKEN}",
             "--max-examples", str(ST_EXAMPLES), *budget, "--workers", "1", "--generation-database", "none",
             # A response's time is no finding here (no timed asserts: bench/edge.py measures
             # it); the limit of `--checks all` (10 s) only guards against a hang, as the
             # request timeout does, sized for a loaded machine.
             "--no-color", "--request-timeout", "120", "--max-response-time", "120"],
            cwd=tmp_path, capture_output=True, text=True, timeout=SECONDS + 900,
        )
        assert broker.request("GET", "/health")[0] == 200  # still up
    assert run.returncode == 0, (run.stdout + run.stderr)[-6000:]
    # Every operation it selected (all but /openapi.json, the document it reads) was tested.
    counts = re.search(r"Selected:\s+(\d+)/(\d+)\s+Tested:\s+(\d+)", run.stdout)
    assert counts is not None and counts[1] == counts[2] == counts[3], run.stdout[-3000:]
    print(*[line for line in run.stdout.splitlines() if "generated" in line])  # with -s: how many cases


def _assert_documented_401s(broker: BrokerProcess) -> None:
    """Without the token, every route that needs it answers the 401 it documents; the
    public ones answer as usual."""
    status, doc = broker.request("GET", "/openapi.json")
    assert status == 200
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            status, headers, body = broker.exchange(method.upper(), path)
            if op.get("security", doc["security"]) == []:
                assert status != 401 and str(status) in op["responses"], (path, status)
                continue
            assert status == 401 and "401" in op["responses"], (path, status)
            assert headers["www-authenticate"] == "Bearer" and body["error_type"] == "Unauthorized", (path, body)
