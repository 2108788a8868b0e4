"""What a process's environment says of its settings, checked at its start: an ``LLOG_*``
name :class:`~llog.config.LlogConfig` does not know (misspelled, removed, or a newer
release's) is named with the closest known one, and a renamed setting read under its old
name (:data:`llog.config.RENAMED`, for one release) is named with its new one. Nothing
here refuses: a process runs with the settings it knows, and says which it ignored.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Mapping
from dataclasses import fields

from llog.config import RENAMED, LlogConfig

log = logging.getLogger(__name__)

#: ``LLOG_*`` variables that are not settings: the dev tools' and the test suite's.
NOT_SETTINGS = frozenset({"LLOG_ETCD_BIN", "LLOG_FUZZ_SECONDS"})
NOT_SETTINGS_PREFIXES = ("LLOG_TEST_", "LLOG_BENCH_")


def setting_names() -> list[str]:
    """Every setting's environment variable, ``LLOG_<FIELD>``."""
    return [f"LLOG_{f.name.upper()}" for f in fields(LlogConfig)]


def environment_warnings(env: Mapping[str, str]) -> list[str]:
    """One line for each ``LLOG_*`` variable of ``env`` that is no setting, or a renamed
    one's old name."""
    known = setting_names()
    out = []
    for name in sorted(n for n in env if n.startswith("LLOG_")):
        if name in RENAMED:
            new = RENAMED[name]
            state = (f"{new} is set too, so {name} is ignored" if new in env
                     else f"{name} is read as {new} in this release")
            out.append(f"{name} is renamed {new}: {state}; set {new} instead")
        elif name not in known and name not in NOT_SETTINGS and not name.startswith(NOT_SETTINGS_PREFIXES):
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.7)
            hint = f"; did you mean {close[0]}?" if close else " (README.md's Configuration lists the settings)"
            out.append(f"{name} is not a setting of this llog and is ignored{hint}")
    return out


def warn_unknown(env: Mapping[str, str]) -> None:
    """Log :func:`environment_warnings` at WARNING: a process's first lines."""
    for line in environment_warnings(env):
        log.warning("%s", line)
