"""Documentation that runs (issue 23): every fenced ``python`` and ``sh`` example of
README.md, docs/*.md, bench/README.md and loadtest/README.md is run against the suite's
etcd and S3, in document order, one test per block (``README.md:49``); and the README
lists every ``LLOG_*`` setting and every ``llog`` subcommand the code has.

Each document gets its own key root. Its python blocks share one namespace in one
worker process whose working directory is a scratch directory (so relative paths land
there; a pytest-xdist worker handed a block whose document's earlier blocks ran
elsewhere runs those first); its sh blocks run with bash at the repository root (their paths name the
repository's files) through the installed ``llog`` command, with ``curl`` failing on an
HTTP error status. Markers in the Markdown (tests/docs_blocks.py) skip a block with its
reason, or start a server for it.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from llog.cli import build_parser
from llog.config import LlogConfig
from tests.conftest import TEST_BUCKET, Servers, config_env
from tests.docs_blocks import REPO, Block, fenced_blocks, runnable_blocks, section_blocks
from tests.docs_runner import DocumentRun

README = REPO / "README.md"
BLOCKS = runnable_blocks()

#: Seconds one block may take (a Spark block starts a JVM on a busy 2-core machine).
BLOCK_TIMEOUT_S = 600.0

#: Lines some README blocks must print: what the README's comments promise.
EXPECTED_LINES = {
    ("README.md", "writer.append_shared(["): ["orders 0 0 1", "orders 1 0 0", "b'order-3'"],
    ("README.md", "Consumer(conn, \"billing\""): ["orders 1 0 b'order-3'"],
    ("README.md", "llog.Transaction(conn, \"enricher-1\")"): ["3 records enriched"],
}


class DocumentRuns:
    """One :class:`DocumentRun` per document, made when its first block runs and closed
    after its last one (or at the end of the session)."""

    def __init__(self, servers: Servers) -> None:
        self.servers = servers
        self.runs: dict[str, DocumentRun] = {}
        self.last = {b.doc: b for b in BLOCKS if b.marker != "skip"}

    def get(self, block: Block) -> DocumentRun:
        if block.doc not in self.runs:
            cfg = LlogConfig(
                etcd_endpoints=(self.servers.etcd_endpoint,), object_store=f"s3://{TEST_BUCKET}",
                s3_endpoint_url=self.servers.s3_endpoint, root_prefix=f"docs-{uuid.uuid4().hex[:12]}",
            )
            workdir = self.servers.workdir / "docs" / block.doc.replace("/", "_")
            shutil.rmtree(workdir, ignore_errors=True)
            workdir.mkdir(parents=True)
            self.runs[block.doc] = DocumentRun(block.doc, config_env(cfg), workdir)
        return self.runs[block.doc]

    def finish(self, block: Block) -> list[str]:
        """After ``block``: close its document's run if that was its last block."""
        if self.last.get(block.doc) == block and block.doc in self.runs:
            return self.runs.pop(block.doc).close()
        return []

    def close(self) -> list[str]:
        problems = [p for run in self.runs.values() for p in run.close()]
        self.runs = {}
        return problems


@pytest.fixture(scope="module")
def document_runs(servers: Servers) -> Iterator[DocumentRuns]:
    runs = DocumentRuns(servers)
    yield runs
    assert runs.close() == []


def _param(block: Block) -> object:
    marks = [pytest.mark.skip(reason=f"{block.test_id}: {block.reason}")] if block.marker == "skip" else []
    return pytest.param(block, id=block.test_id, marks=marks)


@pytest.mark.parametrize("block", [_param(b) for b in BLOCKS])
def test_block_runs(block: Block, document_runs: DocumentRuns) -> None:
    new = block.doc not in document_runs.runs
    run = document_runs.get(block)
    if block.lang == "sh" and not shutil.which("llog", path=run.env.get("PATH")):
        pytest.fail("the `llog` command is not on PATH (make test puts the venv's bin there)")
    try:
        if new:  # the blocks before it ran in another worker (pytest-xdist took this one over): again here
            for earlier in BLOCKS[:BLOCKS.index(block)]:
                if earlier.doc == block.doc and earlier.marker != "skip":
                    _run_block(run, earlier)
        _run_block(run, block)
    finally:
        problems = document_runs.finish(block)
    assert problems == []


def _run_block(run: DocumentRun, block: Block) -> None:
    if block.marker == "server":
        run.start_server(block)
    elif block.lang == "python":
        if block.marker == "broker":
            run.ensure_broker(block)
        output = run.run_python(block, BLOCK_TIMEOUT_S)
        _check_expected_lines(block, output)
    else:
        if block.marker == "broker":
            run.ensure_broker(block)
        run.run_sh(block, BLOCK_TIMEOUT_S)


def _check_expected_lines(block: Block, output: str) -> None:
    lines = output.splitlines()
    for (doc, needle), expected in EXPECTED_LINES.items():
        if block.doc == doc and needle in block.code:
            missing = [e for e in expected if e not in lines]
            assert missing == [], f"{block.test_id} did not print {missing}; it printed:\n{output}"


def test_expected_lines_name_real_blocks() -> None:
    """An edit that drops a checked block must drop its expectation too."""
    for doc, needle in EXPECTED_LINES:
        assert any(b.doc == doc and needle in b.code for b in BLOCKS), (doc, needle)


# -- the README's lists --------------------------------------------------------------
def _config_table_settings() -> set[str]:
    text = README.read_text()
    section = text[text.index("\n## Configuration\n"):]
    section = section[: section.index("\n## ", 1)]
    return set(re.findall(r"^\| `(LLOG_[A-Z0-9_]+)`", section, re.M))


def test_readme_configuration_table_lists_every_setting() -> None:
    settings = {f"LLOG_{f.name.upper()}" for f in dataclasses.fields(LlogConfig)}
    listed = _config_table_settings()
    missing, stale = sorted(settings - listed), sorted(listed - settings)
    assert not missing, f"settings missing from the README's configuration table: {missing}"
    assert not stale, f"README configuration rows for settings LlogConfig does not have: {stale}"


def _subcommands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*prefix, name)
                yield from _subcommands(sub, (*prefix, name))


def _command_list() -> list[list[str]]:
    """The README's command list: for each ``llog`` on a line, the words after it up to
    the next one (``llog fence … / llog unfence …`` holds two commands)."""
    (block,) = [b for b in section_blocks(README, "## Command line") if b.lang == "sh"]
    commands = []
    for line in block.code.splitlines():
        for part in re.split(r"(?:^|\s)llog\s", line.split("  #", 1)[0])[1:]:
            commands.append(part.split())
    return commands


def test_readme_command_list_names_every_subcommand() -> None:
    listed = _command_list()
    missing = []
    for path in _subcommands(build_parser()):
        top, rest = path[0], path[1:]
        lines = [words for words in listed if words[:1] == [top]]
        if not lines or (rest and not any(rest[-1] in words[1:] for words in lines)):
            missing.append("llog " + " ".join(path))
    assert not missing, f"subcommands missing from the README's command list: {missing}"
    known = {path[0] for path in _subcommands(build_parser())}
    # A global option on its own (`llog --version`) is not a command.
    unknown = sorted({words[0] for words in listed if words and words[0] not in known and not words[0].startswith("-")})
    assert not unknown, f"the README's command list names commands `llog` does not have: {unknown}"



# -- the extractor itself --------------------------------------------------------------
def test_blocks_keep_their_line_marker_and_indentation(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(
        "# T\n\n```python\nx = 1\n```\n\n<!-- docs-test: skip: needs a GUI -->\n\n```sh\nxeyes\n```\n"
        "\n1. a step:\n\n   ```sh\n   llog topics list\n   ```\n```json\n{}\n```\n"
    )
    blocks = fenced_blocks(doc)
    assert [(b.line, b.lang, b.code, b.marker, b.reason) for b in blocks] == [
        (3, "python", "x = 1\n", None, None),
        (9, "sh", "xeyes\n", "skip", "needs a GUI"),
        (15, "sh", "llog topics list\n", None, None),
        (18, "json", "{}\n", None, None),
    ]


@pytest.mark.parametrize("marker, error", [
    ("<!-- docs-test: skipp: typo -->", "unknown docs-test marker"),
    ("<!-- docs-test: skip -->", "needs a reason"),
    ("<!-- docs-test: server -->", "needs an sh block"),
])
def test_bad_markers_are_refused(tmp_path: Path, marker: str, error: str) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(f"{marker}\n```python\npass\n```\n")
    with pytest.raises(ValueError, match=error):
        fenced_blocks(doc)
