"""The README's promises: its Python examples run against a real stack, and its
configuration table lists every ``LLOG_*`` setting."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

from llog.config import LlogConfig
from tests.conftest import config_env

README = Path(__file__).resolve().parent.parent / "README.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_readme_sdk_example_runs(config: LlogConfig) -> None:
    first = _python_blocks()[0]
    out = subprocess.run(
        [sys.executable, "-c", first], env=config_env(config), capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "orders 0 0 1" in lines
    assert "orders 1 0 0" in lines
    assert lines[-1] == "b'order-3'"


def test_readme_consumer_example_runs(config: LlogConfig) -> None:
    setup, consumer = _python_blocks()[:2]
    script = setup + "\nhandled = []\nhandle = handled.append\n" + consumer + "\nprint(len(handled))\n"
    out = subprocess.run(
        [sys.executable, "-c", script], env=config_env(config), capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "3"  # a lone member owns every partition, from earliest


def test_readme_lists_every_setting() -> None:
    text = README.read_text()
    missing = [
        f"LLOG_{f.name.upper()}"
        for f in dataclasses.fields(LlogConfig)
        if f"`LLOG_{f.name.upper()}`" not in text
    ]
    assert missing == []


def test_readme_producer_example_runs(config: LlogConfig) -> None:
    blocks = _python_blocks()
    setup = blocks[0]
    producer = next(b for b in blocks if "BatchingProducer" in b)
    script = setup + "\n" + producer + "\nprint(len(offsets), len(set(offsets)) > 1)\n"
    out = subprocess.run(
        [sys.executable, "-c", script], env=config_env(config), capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "1000 True"
