"""Retention: drop a partition's oldest index entries by age or size.

A topic's ``retention_ms`` drops leading entries whose newest record timestamp is
older than that (record time, as Kafka does) or whose index key was last written longer
ago than that (commit time, judged by etcd revision on the compactor's clock,
:mod:`compactor.revision_clock`): a record timestamp in the future cannot pin the log.
``retention_bytes`` drops leading entries while the partition's
slices (index entries plus the pending) still add up to at least that without them
(Kafka's rule: the log keeps at least ``retention_bytes``, never less). Whole entries only:
``log_start_offset`` moves to the start of the first entry kept. One transaction
advances ``log_start_offset`` in ``meta/control``, deletes the index keys below it and
lifts the compaction cursor to it, guarded by the control's and cursor's
``mod_revision``, the absence of an in-flight compaction, and the claim (a compaction
that selected its run before this moved the cursor then fails to create its record). The objects
are left to vacuum; reads below the new start get :class:`OffsetOutOfRange`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from compactor.claims import Claim, claimed_txn
from compactor.metrics import compactor_metrics
from compactor.planner import read_cursor
from compactor.revision_clock import RevisionClock
from llog.codec.etcd_values.compaction import CompactionCursor
from llog.connection import Connection
from llog.errors import CasConflict
from llog.etcd.operations import Delete, Get, Op, Put, TxnResult, absent, mod_revision_is
from llog.state.control import ControlState, decode_index, now_ms, read_control

log = logging.getLogger(__name__)

_ATTEMPTS = 16


@dataclass(frozen=True)
class RetentionResult:
    """``log_start_offset`` moved from ``old_start`` to ``new_start`` (equal: nothing
    expired), dropping ``index_keys`` entries."""

    topic: str
    partition: int
    old_start: int
    new_start: int
    index_keys: int


def retention_cut(
    entries: list[tuple[int, int, int, int]],
    pending_bytes: int,
    *,
    retention_ms: int | None,
    retention_bytes: int | None,
    now_ms: int,
    expired_revision: int = 0,
) -> int:
    """How many leading entries expire. ``entries`` are ``(end_offset, byte_length,
    max_timestamp, mod_revision)`` in offset order; ``pending_bytes`` is the pending
    slice (never dropped, but it counts toward the size). By size, an entry expires if
    the slices after it add up to at least ``retention_bytes``. By time, an entry expires if
    its newest record is older than ``now_ms - retention_ms`` or its index key's
    ``mod_revision`` is at most ``expired_revision`` (written at least ``retention_ms``
    ago)."""
    by_time = 0
    if retention_ms is not None:
        while by_time < len(entries) and (
            entries[by_time][2] < now_ms - retention_ms or entries[by_time][3] <= expired_revision
        ):
            by_time += 1
    by_size = 0
    if retention_bytes is not None:
        # Kafka's rule: an entry goes only if what remains is still at least the limit,
        # so a limit smaller than the newest compacted file never empties the partition.
        total = pending_bytes + sum(e[1] for e in entries)
        while by_size < len(entries) and total - entries[by_size][1] >= retention_bytes:
            total -= entries[by_size][1]
            by_size += 1
    return max(by_time, by_size)


def apply_retention(
    conn: Connection,
    topic: str,
    partition: int,
    *,
    claim: Claim | None = None,
    now: int | None = None,
    clock: RevisionClock | None = None,
) -> RetentionResult:
    """Apply the topic's retention to one partition (a no-op result when the topic has
    none or nothing expired), and delete the index keys that DeleteRecords left wholly
    below the log start. ``clock`` judges commit ages (default: one loaded from the
    persisted samples). :class:`CasConflict` if appends kept moving the control for
    every attempt; :class:`ClaimLost` if the claim went away."""
    conn.check_partition(topic, partition)
    meta = conn.topic(topic, refresh=True)
    retained = (meta.retention_ms is not None or meta.retention_bytes is not None) and meta.retained
    expired_revision = _expired_revision(conn, meta.retention_ms, clock) if retained else 0
    for _ in range(_ATTEMPTS):
        st = read_control(conn, topic, partition)
        ctl = st.control
        old = ctl.log_start_offset
        if not retained and not _keys_below(conn, topic, partition, old):
            return RetentionResult(topic, partition, old, old, 0)  # cleanup.policy=compact: no retention
        cursor = read_cursor(conn, topic, partition)
        entries = _index_entries(conn, topic, partition)
        n = 0
        if retained:
            n = retention_cut(
                entries,
                ctl.pending.byte_length if ctl.pending is not None else 0,
                retention_ms=meta.retention_ms,
                retention_bytes=meta.retention_bytes,
                now_ms=now_ms() if now is None else now,
                expired_revision=expired_revision,
            )
        new = max(old, entries[n - 1][0] + 1 if n else old)
        keys = sum(1 for end, *_ in entries if end < new)
        if not keys:
            return RetentionResult(topic, partition, old, old, 0)
        r = _advance_start(conn, topic, partition, st, cursor, new, claim)
        if r.succeeded:
            return _applied(conn, RetentionResult(topic, partition, old, new, keys))
        inflight = r.responses[0]
        assert isinstance(inflight, list)
        if inflight:  # a compaction is in flight: retention waits for the next pass
            return RetentionResult(topic, partition, old, old, 0)
    raise CasConflict(conn.keys.control(topic, partition), _ATTEMPTS)


def _advance_start(
    conn: Connection,
    topic: str,
    partition: int,
    st: ControlState,
    cursor: tuple[int | None, int],
    new: int,
    claim: Claim | None,
) -> TxnResult:
    """The one transaction (module doc): move ``log_start_offset`` to ``new``, delete
    the index keys (and damaged-range records) below it and lift the cursor (``(offset, mod_revision)`` as read)
    to it, if the control, cursor and claim are unchanged and no compaction is in
    flight. Failure responses: the compaction record, the claim key; :class:`ClaimLost`
    when the claim moved."""
    keys = conn.keys
    ckey, rkey = keys.control(topic, partition), keys.compaction(topic, partition)
    curkey = keys.compaction_cursor(topic, partition)
    offset, cursor_rev = cursor
    ops: list[Op] = [
        Put(ckey, st.control.with_changes(log_start_offset=new).encode()),
        Delete(keys.index_prefix(topic, partition), keys.index(topic, partition, new)),
        # The damaged entries (§10 K3') among them go too: their records are gone.
        Delete(keys.damaged_prefix(topic, partition), keys.damaged(topic, partition, new)),
    ]
    if offset is None or offset < new:
        ops.append(Put(curkey, CompactionCursor(new).encode()))
    return claimed_txn(
        conn, topic, partition, claim,
        [mod_revision_is(ckey, st.mod_revision), mod_revision_is(curkey, cursor_rev), absent(rkey)],
        ops, [Get(rkey)],
    )


def _expired_revision(conn: Connection, retention_ms: int | None, clock: RevisionClock | None) -> int:
    """The newest revision written at least ``retention_ms`` ago on ``clock`` (after a
    fresh sample); 0 without time retention."""
    if retention_ms is None:
        return 0
    clock = clock if clock is not None else RevisionClock.load(conn)
    clock.observe()
    return clock.aged_revision(retention_ms)


def _keys_below(conn: Connection, topic: str, partition: int, log_start: int) -> bool:
    """Whether an index key ends below ``log_start`` (one ranged read of one key)."""
    keys = conn.keys
    return bool(conn.etcd.range(keys.index_prefix(topic, partition), keys.index(topic, partition, log_start),
                                limit=1))


def _index_entries(conn: Connection, topic: str, partition: int) -> list[tuple[int, int, int, int]]:
    """The partition's index as :func:`retention_cut` takes it: ``(end_offset,
    byte_length, max_timestamp, mod_revision)`` in offset order."""
    keys = conn.keys
    return [
        (keys.end_offset_of(kv.key), e.byte_length, e.max_timestamp, kv.mod_revision)
        for kv in conn.etcd.scan(keys.index_prefix(topic, partition), keys.index_range_end(topic, partition))
        for e in (decode_index(kv.key, kv.value),)
    ]


def _applied(conn: Connection, res: RetentionResult) -> RetentionResult:
    """Count and log a committed retention step; return it."""
    m = compactor_metrics(conn.metrics)
    m.retention_records.inc(res.new_start - res.old_start)
    m.retention_keys.inc(res.index_keys)
    log.info(
        "retention on %s/%s: log start %d -> %d (%d index keys)",
        res.topic, res.partition, res.old_start, res.new_start, res.index_keys,
    )
    return res
