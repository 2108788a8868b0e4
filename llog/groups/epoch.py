"""Exclusive-consumer epochs: each exclusive consumer that starts bumps the group's
epoch, so commits from any older instance (a zombie) are rejected."""

from __future__ import annotations

from llog.codec.etcd_values.groups import GroupEpoch
from llog.connection import Connection
from llog.errors import CasConflict
from llog.etcd.operations import Get, Put, mod_revision_is
from llog.groups.offsets import decode_epoch
from llog.names import check_group
from llog.state.control import now_ms


def current_epoch(conn: Connection, group: str) -> GroupEpoch | None:
    kv = conn.etcd.get(conn.keys.group_epoch(check_group(group)))
    return None if kv is None else decode_epoch(kv)


def bump_epoch(conn: Connection, group: str, owner: str) -> GroupEpoch:
    """Start a new epoch owned by ``owner``; every older epoch is fenced from now on."""
    key = conn.keys.group_epoch(check_group(group))
    kv = conn.etcd.get(key)
    for _ in range(conn.config.commit_max_attempts):
        prev = 0 if kv is None else decode_epoch(kv).epoch
        new = GroupEpoch(prev + 1, owner, now_ms())
        r = conn.etcd.txn(
            [mod_revision_is(key, 0 if kv is None else kv.mod_revision)],
            [Put(key, new.encode())],
            [Get(key)],
        )
        if r.succeeded:
            return new
        got = r.responses[0]
        assert isinstance(got, list)
        kv = got[0] if got else None
    raise CasConflict(key, conn.config.commit_max_attempts)
