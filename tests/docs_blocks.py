"""The runnable examples of llog's documentation: fenced ``python`` and ``sh`` blocks.

A block may be preceded (on the nearest non-blank line above its fence) by one marker
that tells tests/test_docs.py how to run it:

- ``<!-- docs-test: skip: REASON -->``: not run; reported as skipped with REASON.
- ``<!-- docs-test: server -->``: the block starts a long-running HTTP server on port
  8080; it is started in the background, must answer ``GET /health``, and stays up for
  the document's later blocks.
- ``<!-- docs-test: broker -->``: the block (sh or python) talks to a broker on
  ``localhost:8080`` or its Kafka listener on ``localhost:9092``; one is started for
  the document unless a ``server`` block already did.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

#: Languages that are run; every other fence (json, yaml, plain) is illustration.
RUN_LANGUAGES = ("python", "sh")

MARKER = re.compile(r"<!--\s*docs-test:\s*(?P<kind>[a-z-]+)\s*(?::\s*(?P<reason>.*?))?\s*-->")
MARKER_KINDS = ("skip", "server", "broker")
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w+-]*)\s*$")


def documents() -> list[Path]:
    """Every Markdown file whose examples are run, in a stable order."""
    return [
        REPO / "README.md",
        *sorted((REPO / "docs").glob("*.md")),
        REPO / "bench" / "README.md",
        REPO / "loadtest" / "README.md",
    ]


@dataclass(frozen=True)
class Block:
    """One fenced example: where it is, its language and code, and its marker."""

    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    marker: str | None = None
    reason: str | None = None

    @property
    def doc(self) -> str:
        return self.path.relative_to(REPO).as_posix()

    @property
    def test_id(self) -> str:
        return f"{self.doc}:{self.line}"


def fenced_blocks(path: Path) -> list[Block]:
    """Every fenced block of ``path``, in document order, with the marker above it."""
    lines = path.read_text().splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, indent = i, len(m["indent"])
        i += 1
        body: list[str] = []
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][indent:])
            i += 1
        if i == len(lines):
            raise ValueError(f"{path}:{start + 1}: unclosed code fence")
        i += 1
        kind, reason = _marker_above(path, lines, start)
        if kind == "server" and m["lang"] != "sh":
            raise ValueError(f"{path}:{start + 1}: a docs-test {kind} marker needs an sh block")
        out.append(Block(path, start + 1, m["lang"], "\n".join(body) + "\n", kind, reason))
    return out


def _marker_above(path: Path, lines: list[str], fence: int) -> tuple[str | None, str | None]:
    j = fence - 1
    while j >= 0 and not lines[j].strip():
        j -= 1
    m = MARKER.search(lines[j]) if j >= 0 else None
    if not m:
        return None, None
    kind, reason = m["kind"], m["reason"]
    if kind not in MARKER_KINDS:
        raise ValueError(f"{path}:{j + 1}: unknown docs-test marker {kind!r} (one of {MARKER_KINDS})")
    if kind == "skip" and not reason:
        raise ValueError(f"{path}:{j + 1}: a docs-test skip needs a reason")
    return kind, reason


def runnable_blocks() -> list[Block]:
    """The python and sh blocks of every document, in document order."""
    return [b for path in documents() for b in fenced_blocks(path) if b.lang in RUN_LANGUAGES]


def section_blocks(path: Path, heading: str) -> list[Block]:
    """The fenced blocks under the Markdown heading ``heading`` (up to the next heading
    of the same or a higher level)."""
    level = len(heading.split(" ", 1)[0])
    inside, in_fence = False, False
    first = last = 0
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        hashes = line.split(" ", 1)[0]
        if in_fence or not line.startswith("#") or set(hashes) != {"#"}:
            continue
        if inside and len(hashes) <= level:
            last = n
            break
        if line == heading:
            inside, first = True, n
    if not inside:
        raise AssertionError(f"{path} has no heading {heading!r}")
    return [b for b in fenced_blocks(path) if first < b.line and (not last or b.line < last)]
