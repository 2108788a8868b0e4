"""Which consumer groups exist: the names under ``{root}/_groups/`` (spec §3). Below
the groups themselves, so topic deletion can clear every group's offsets for a topic."""

from __future__ import annotations

from llog.connection import Connection
from llog.state.keys import prefix_range_end


def list_groups(conn: Connection) -> list[str]:
    """Every group with any state, by name (one ceiling lookup per group)."""
    root = conn.keys.groups_prefix()
    end = prefix_range_end(root)
    out: list[str] = []
    cursor = root
    while True:
        kv = conn.etcd.ceiling(cursor, end)
        if kv is None:
            return out
        name = kv.key[len(root) :].split("/", 1)[0]
        out.append(name)
        cursor = prefix_range_end(conn.keys.group_prefix(name))
