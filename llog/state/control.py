"""The partition control record and the materialize/settle steps of the commit
protocol (protocol/README.md, "Commit protocol"). Shared by writer, reader and
compactor."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from llog.codec.etcd_values.compaction import CompactionCursor
from llog.codec.etcd_values.maps import MetaFormatError
from llog.codec.etcd_values.partition import Control, IndexEntry, Pending
from llog.connection import Connection
from llog.errors import CorruptMetadata
from llog.etcd.operations import KV, Get, Op, Put, mod_revision_is

log = logging.getLogger(__name__)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class ControlState:
    """A control value and the ``mod_revision`` it was read (or written) at; 0 means
    the key does not exist yet (a partition that was never written)."""

    control: Control
    mod_revision: int


def decode_control(key: str, kv: KV | None) -> ControlState:
    if kv is None:
        return ControlState(Control(), 0)
    try:
        return ControlState(Control.decode(kv.value), kv.mod_revision)
    except MetaFormatError as exc:
        raise CorruptMetadata(key, str(exc)) from exc


def decode_index(key: str, raw: bytes) -> IndexEntry:
    try:
        return IndexEntry.decode(raw)
    except MetaFormatError as exc:
        raise CorruptMetadata(key, str(exc)) from exc


def decode_cursor(key: str, raw: bytes) -> int:
    """The offset of a compaction cursor value (``meta/compaction-cursor``)."""
    try:
        return CompactionCursor.decode(raw).offset
    except MetaFormatError as exc:
        raise CorruptMetadata(key, str(exc)) from exc


def read_control(conn: Connection, topic: str, partition: int) -> ControlState:
    key = conn.keys.control(topic, partition)
    return decode_control(key, conn.etcd.get(key))


def materialize_ops(conn: Connection, topic: str, partition: int, pending: Pending) -> list[Op]:
    """The put that turns ``pending`` into its index entry (idempotent: same key, same value)."""
    return [Put(conn.keys.index(topic, partition, pending.end_offset), pending.index_entry().encode())]


def settle(
    conn: Connection,
    topic: str,
    partition: int,
    *,
    min_age_ms: int = 0,
    state: ControlState | None = None,
    max_attempts: int = 16,
) -> ControlState:
    """Materialize the partition's pending append if it is at least ``min_age_ms`` old.

    Always safe to call from any process: it writes the pending's own index entry and
    clears ``pending`` in one transaction guarded by the control's mod_revision. Returns
    the state after (or the state that made it unnecessary).
    """
    key = conn.keys.control(topic, partition)
    st = state if state is not None else read_control(conn, topic, partition)
    for _ in range(max_attempts):
        p = st.control.pending
        # min_age_ms 0 settles whatever the writer's clock said in created_at_ms.
        if p is None or (min_age_ms > 0 and now_ms() - p.created_at_ms < min_age_ms):
            return st
        new = st.control.with_changes(pending=None)
        r = conn.etcd.txn(
            [mod_revision_is(key, st.mod_revision)],
            [*materialize_ops(conn, topic, partition, p), Put(key, new.encode())],
            [Get(key)],
        )
        if r.succeeded:
            conn.metrics.pending_settled.inc()
            log.debug("settled pending %s of %s/%s", p.append_id, topic, partition)
            return ControlState(new, r.revision)
        got = r.responses[0]
        assert isinstance(got, list)
        st = decode_control(key, got[0] if got else None)
    return st
