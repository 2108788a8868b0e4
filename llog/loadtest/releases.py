"""Earlier releases for a cluster to start on (RELEASES.md): a release's ``llog`` and
``compactor`` packages taken from its commit (``git archive``) into a directory that
goes first on a process's ``PYTHONPATH``, so a member runs that release with this
tree's interpreter and dependencies (the rolling-upgrade scenarios, loadtest/README.md)."""

from __future__ import annotations

import re
import subprocess
import tarfile
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path

import tomllib

from llog.errors import ConfigError

#: The repository this tree is checked out from.
REPO = Path(__file__).resolve().parent.parent.parent
_ROW = re.compile(r"^\| (\d+\.\d+\.\d+) \| `([0-9a-f]{40})` \| (\d{4}-\d\d-\d\d) \| (\d+) \|$", re.M)


@dataclass(frozen=True)
class Release:
    """A row of RELEASES.md."""

    version: str
    commit: str
    date: str
    #: The protocol version (protocol/README.md) it writes.
    protocol: int


def releases() -> dict[str, Release]:
    """Every release RELEASES.md names, by version."""
    rows = _ROW.findall((REPO / "RELEASES.md").read_text())
    return {v: Release(v, commit, date, int(protocol)) for v, commit, date, protocol in rows}


def _git(*args: str) -> bytes:
    try:
        return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, check=True, timeout=120).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        err = getattr(exc, "stderr", b"") or b""
        raise ConfigError(f"git {' '.join(args)} in {REPO}: {err.decode(errors='replace').strip() or exc}") from exc


def checkout(version: str, into: Path) -> Path:
    """``version``'s packages under ``into/release-<version>`` (its ``PYTHONPATH``).
    :class:`ConfigError` for a release RELEASES.md does not name, a clone without its
    commit, or a release whose dependencies are not this tree's (it would need a venv
    of its own)."""
    release = releases().get(version)
    if release is None:
        raise ConfigError(f"release {version!r} is not in RELEASES.md (releases: {sorted(releases())})")
    commit = release.commit
    theirs = tomllib.loads(_git("show", f"{commit}:pyproject.toml").decode())["project"]["dependencies"]
    ours = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    if sorted(theirs) != sorted(ours):
        raise ConfigError(f"release {version} depends on {sorted(set(theirs) - set(ours))}, not this tree's "
                          "dependencies: it needs a venv of its own")
    tree = into / f"release-{version}"
    with tarfile.open(fileobj=BytesIO(_git("archive", commit, "llog", "compactor"))) as archive:
        archive.extractall(tree, filter="data")
    return tree
