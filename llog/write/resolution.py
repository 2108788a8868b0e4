"""Resolving a commit whose outcome is unknown from etcd's history of the control key
(protocol/README.md §8.5).

An attempt that would have taken ``[start, start + n - 1]`` compared the control key
``C`` at the revision where its ``next_offset`` was ``start``; only commits raise
``next_offset``, never by less than one record. So the attempt committed iff the first
version of ``C`` whose ``next_offset`` reached ``start + n`` set ``pending`` to this
append. That version is found in ``C``'s history by revision, whatever compaction or
retention did to the index since; only when etcd has compacted that history does the
old lookup by index key decide, and what it cannot decide is :class:`AmbiguousCommit`.
"""

from __future__ import annotations

import logging

from llog.codec.etcd_values.partition import WAL, Control, Pending
from llog.connection import Connection
from llog.errors import AmbiguousCommit, CoordinationError, HistoryCompacted
from llog.state.control import decode_control, decode_index

log = logging.getLogger(__name__)


def find_committed(
    conn: Connection,
    topic: str,
    partition: int,
    append_id: str,
    ctl: Control,
    control_revision: int,
    unknown_starts: list[int],
    n: int,
) -> Pending | None:
    """The pending of append ``append_id`` if one of the attempts that would have
    started at ``unknown_starts`` committed, else ``None`` (none did, so far: an attempt
    still in flight can only commit while ``C`` stays at the revision it compared).
    ``ctl`` is the control read at ``control_revision``. Never ``None`` for an append
    that exists: :class:`AmbiguousCommit` when that cannot be told, etcd failing
    during these reads included (a plain :class:`CoordinationError` would let a caller
    take the append for not written and send it again)."""
    if not unknown_starts:
        return None
    if ctl.pending is not None and ctl.pending.append_id == append_id:
        return ctl.pending
    try:
        for start in unknown_starts:
            found = _committed_at(conn, topic, partition, append_id, ctl, control_revision, start, n)
            if found is not None:
                return found
    except AmbiguousCommit:
        raise
    except CoordinationError as exc:
        raise AmbiguousCommit(
            f"commit of append {append_id} to {topic}/{partition} has an unknown outcome and etcd "
            f"failed while it was being resolved: the append may exist ({exc})",
            topic=topic, partition=partition, append_id=append_id,
        ) from exc
    return None


def _committed_at(
    conn: Connection, topic: str, partition: int, append_id: str, ctl: Control, revision: int, start: int, n: int
) -> Pending | None:
    """The append if the attempt that would have started at ``start`` committed."""
    if ctl.next_offset < start + n:
        return None  # no commit has reached past where this attempt would have ended
    try:
        first = _first_reaching(conn, topic, partition, start + n, ctl, revision)
    except HistoryCompacted as exc:
        log.warning("history of %s/%s compacted; resolving %s by its index key", topic, partition, append_id)
        return _by_index_key(conn, topic, partition, append_id, start, n, exc)
    p = first.pending
    return p if p is not None and p.append_id == append_id and p.start_offset == start else None


def _first_reaching(
    conn: Connection, topic: str, partition: int, target: int, ctl: Control, revision: int
) -> Control:
    """The first version of the control whose ``next_offset`` is at least ``target``,
    given ``ctl`` (at ``revision``), a version that is. Gallops back through history,
    then bisects: O(log k) reads for k changes since."""
    key = conn.keys.control(topic, partition)

    def reached(at: int) -> tuple[bool, int, Control]:
        kv = conn.etcd.get_at(key, at)
        if kv is None:
            return False, 0, Control()
        c = decode_control(key, kv).control
        return c.next_offset >= target, kv.mod_revision, c

    hi, hi_ctl = revision, ctl  # a version that reached the target, by its mod_revision
    lo, step = -1, 1  # lo: a revision at which the control had not reached it
    while lo < 0:
        probe = hi - step
        if probe < 1:
            lo = 0
            break
        ok, rev, c = reached(probe)
        if ok:
            hi, hi_ctl, step = rev, c, step * 2
        else:
            lo = probe
    while hi - lo > 1:
        mid = (lo + hi) // 2
        ok, rev, c = reached(mid)
        if ok:
            hi, hi_ctl = rev, c
        else:
            lo = mid
    return hi_ctl


def _by_index_key(
    conn: Connection, topic: str, partition: int, append_id: str, start: int, n: int, cause: HistoryCompacted
) -> Pending | None:
    """Without history: the WAL index key the attempt would have written. Ours: it
    committed; another append's WAL entry at that key: it did not. Anything else may be
    compaction's or retention's doing, so the outcome stays unknown."""
    key = conn.keys.index(topic, partition, start + n - 1)
    kv = conn.etcd.get(key)
    if kv is not None:
        e = decode_index(key, kv.value)
        if e.kind == WAL and e.append_id == append_id:
            return Pending(
                append_id, start, start + n - 1, n, e.data_key, e.byte_offset,
                e.byte_length, e.created_at_ms, e.max_timestamp,
            )
        if e.kind == WAL:
            return None
    raise AmbiguousCommit(
        f"commit of append {append_id} to {topic}/{partition} has an unknown outcome: etcd "
        f"compacted the history needed to resolve it and {key} does not tell: the append may exist",
        topic=topic, partition=partition, append_id=append_id,
    ) from cause
