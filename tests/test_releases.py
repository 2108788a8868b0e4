"""RELEASES.md and CHANGELOG.md against the repository (issue 60): each release's commit
is in the history and is that release (its ``llog/version.py`` says so), each has its
CHANGELOG section with an Upgrading note, and the tree's version comes after every
release. Pure reads of the git history and the files."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from packaging.version import Version

from llog.loadtest.releases import releases as listed
from llog.version import __version__

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.fast


def releases() -> list[tuple[str, str, str, int]]:
    """(version, commit, date, protocol) of every row of RELEASES.md."""
    return [(r.version, r.commit, r.date, r.protocol) for r in listed().values()]


def test_every_release_is_its_commit_in_the_history() -> None:
    rows = releases()
    assert rows, "RELEASES.md lists no release"
    for version, commit, _date, _protocol in rows:
        got = subprocess.run(["git", "-C", str(REPO), "show", f"{commit}:llog/version.py"], capture_output=True,
                             text=True)
        assert got.returncode == 0, (f"RELEASES.md names {commit} for {version}, which this clone does not have "
                                     f"(a shallow clone?): {got.stderr.strip()}")
        assert f'__version__ = "{version}"' in got.stdout, f"{commit} is not release {version}"


def test_every_release_has_its_changelog_section_and_the_tree_comes_after() -> None:
    changelog = (REPO / "CHANGELOG.md").read_text()
    sections = re.split(r"^## ", changelog, flags=re.M)
    assert sections[1].startswith("[Unreleased]"), "CHANGELOG.md opens with [Unreleased]"
    for version, _commit, date, _protocol in releases():
        [section] = [s for s in sections if s.startswith(f"[{version}] - {date}")]
        assert "### Upgrading" in section, f"CHANGELOG.md's {version} has no Upgrading note"
    newest = max(Version(v) for v, *_ in releases())
    assert Version(__version__) > newest, f"the tree says {__version__}, not after release {newest}"
