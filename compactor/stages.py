"""The compaction stage machine: from a ``meta/compaction`` record to done.

The record names the stage to run next. Each stage is one etcd transaction that does
the stage's work and moves the record on, guarded by the record's ``mod_revision`` and
by the caller's claim, so it runs at most once and any process can pick up where a
dead one stopped:

``WRITING_COMPACTED_INDEX``
    overwrite ``index/{end_offset}`` — verified to still hold the WAL entry that starts
    at ``last_wal_start_offset`` — with the COMPACTED entry; record → ``DELETING_OLD``.
``DELETING_OLD``
    delete the index keys of ``[start_offset, end_offset)``; record → ``UPDATING_CURSOR``.
``UPDATING_CURSOR``
    ``meta/compaction-cursor`` = ``end_offset + 1`` and delete the record.

A key compaction's record (``replaces`` set, spec §10.2) runs the same stages over
COMPACTED entries below the cursor: the first checks ``index/{end_offset}`` still holds
the COMPACTED entry named by ``replaces``, and the last only deletes the record.

Readers stay correct throughout: before the first stage the WAL entries cover the
range; between the first two, the COMPACTED entry overlaps WAL entries holding the
same records (readers skip what they already returned); after, it alone covers it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from compactor.claims import Claim, claimed_txn
from compactor.metrics import CompactorMetrics
from llog.codec.etcd_values.compaction import CompactionCursor, CompactionRecord
from llog.codec.etcd_values.maps import MetaFormatError
from llog.codec.etcd_values.partition import COMPACTED, WAL, IndexEntry
from llog.connection import Connection
from llog.errors import CorruptMetadata
from llog.etcd.operations import KV, Compare, Delete, Get, Op, Put, TxnResult, mod_revision_is
from llog.state.control import decode_index

log = logging.getLogger(__name__)

WRITING_COMPACTED_INDEX = "WRITING_COMPACTED_INDEX"
DELETING_OLD = "DELETING_OLD"
UPDATING_CURSOR = "UPDATING_CURSOR"


@dataclass(frozen=True)
class StageEvent:
    """A protocol point passed: ``after_put`` (blob written, no record yet),
    ``after_record`` (record created), ``after_<STAGE>`` (that stage's transaction
    committed), ``abandoned``. ``revision`` is the etcd revision of the transaction
    (0 for ``after_put``). Tests kill the process or audit writes from a hook."""

    point: str
    topic: str
    partition: int
    record: CompactionRecord
    revision: int


StageHook = Callable[[StageEvent], None]


@dataclass(frozen=True)
class Finished:
    """How a record ended: ``done`` (cursor advanced, record cleared), ``abandoned``
    (the range changed under it; record cleared, index untouched), or ``taken_over``
    (another process moved the record on or replaced it)."""

    outcome: str
    index_keys_removed: int


@dataclass(frozen=True)
class _Step:
    result: TxnResult
    #: The record after the stage; ``None`` when the stage deletes it.
    after: CompactionRecord | None
    #: The event emitted when the transaction commits.
    point: str


def compacted_entry(rec: CompactionRecord) -> IndexEntry:
    """The index entry a finished compaction leaves at ``index/{end_offset}``."""
    return IndexEntry(
        kind=COMPACTED,
        msg_count=rec.msg_count,
        data_key=rec.data_key,
        byte_offset=0,
        byte_length=rec.byte_length,
        created_at_ms=rec.created_at_ms,
        max_timestamp=rec.max_timestamp,
        encoding=rec.encoding,
    )


def decode_record(kv: KV) -> CompactionRecord:
    try:
        return CompactionRecord.decode(kv.value)
    except MetaFormatError as exc:
        raise CorruptMetadata(kv.key, str(exc)) from exc


class StageRunner:
    """Runs a partition's compaction record to the end under ``claim`` (or, without
    one, only while nobody holds the partition's claim)."""

    def __init__(
        self,
        conn: Connection,
        topic: str,
        partition: int,
        *,
        claim: Claim | None,
        metrics: CompactorMetrics,
        hook: StageHook | None = None,
    ) -> None:
        self.conn = conn
        self.topic = topic
        self.partition = partition
        self.claim = claim
        self.metrics = metrics
        self.hook = hook
        keys = conn.keys
        self.record_key = keys.compaction(topic, partition)
        self.cursor_key = keys.compaction_cursor(topic, partition)

    def emit(self, point: str, rec: CompactionRecord, revision: int) -> None:
        if self.hook is not None:
            self.hook(StageEvent(point, self.topic, self.partition, rec, revision))

    def finish(self, rec: CompactionRecord, rev: int) -> Finished:
        """Run ``rec`` (stored at ``rev``) from its stage through the last one."""
        removed = 0
        data_key = rec.data_key
        while True:
            with self.metrics.time(rec.stage):
                if rec.stage == WRITING_COMPACTED_INDEX:
                    step = self._write_index(rec, rev)
                elif rec.stage == DELETING_OLD:
                    step = self._delete_old(rec, rev)
                else:
                    step = self._update_cursor(rec, rev)
            r = step.result
            if r.succeeded:
                if rec.stage == DELETING_OLD:
                    n = sum(x for x in r.responses if isinstance(x, int))
                    removed += n
                    self.metrics.index_keys_removed.inc(n)
                self.emit(step.point, rec, r.revision)
                if step.after is None:
                    return Finished("abandoned" if step.point == "abandoned" else "done", removed)
                rec, rev = step.after, r.revision
                continue
            got = r.responses[0]
            assert isinstance(got, list)
            if not got:
                return Finished("taken_over", removed)
            fresh = decode_record(got[0])
            if fresh.data_key != data_key:
                return Finished("taken_over", removed)
            # Someone else advanced it, or a compared index key moved: go again from there.
            rec, rev = fresh, got[0].mod_revision

    # -- the stages ------------------------------------------------------------
    def _txn(self, rev: int, compares: Sequence[Compare], ops: Sequence[Op]) -> TxnResult:
        """One stage transaction under the record and claim guards. Raises
        :class:`ClaimLost` when it failed because the claim moved."""
        return claimed_txn(self.conn, self.topic, self.partition, self.claim,
                           [mod_revision_is(self.record_key, rev), *compares], ops, [Get(self.record_key)])

    def _write_index(self, rec: CompactionRecord, rev: int) -> _Step:
        ik = self.conn.keys.index(self.topic, self.partition, rec.end_offset)
        kv = self.conn.etcd.get(ik)
        nxt = rec.at_stage(DELETING_OLD)
        point = f"after_{WRITING_COMPACTED_INDEX}"
        if kv is not None:
            e = decode_index(ik, kv.value)
            same = [mod_revision_is(ik, kv.mod_revision)]
            replaced = (e.kind == WAL if rec.replaces is None
                        else e.kind == COMPACTED and e.data_key == rec.replaces)
            if replaced and rec.end_offset - e.msg_count + 1 == rec.last_wal_start_offset:
                ops = [Put(ik, compacted_entry(rec).encode()), Put(self.record_key, nxt.encode())]
                return _Step(self._txn(rev, same, ops), nxt, point)
            if e.kind == COMPACTED and e.data_key == rec.data_key:
                return _Step(self._txn(rev, same, [Put(self.record_key, nxt.encode())]), nxt, point)
        # The entry the record was verified against is gone: leave the index as it is
        # and drop the record; the compacted blob becomes garbage for vacuum.
        log.warning(
            "compaction of %s/%s [%d, %d] abandoned: %s no longer holds the %s entry from %d",
            self.topic, self.partition, rec.start_offset, rec.end_offset, ik,
            "WAL" if rec.replaces is None else "compacted", rec.last_wal_start_offset,
        )
        unchanged = mod_revision_is(ik, kv.mod_revision if kv is not None else 0)
        return _Step(self._txn(rev, [unchanged], [Delete(self.record_key)]), None, "abandoned")

    def _delete_old(self, rec: CompactionRecord, rev: int) -> _Step:
        keys = self.conn.keys
        nxt = rec.at_stage(UPDATING_CURSOR)
        ops: list[Op] = [Put(self.record_key, nxt.encode())]
        if rec.end_offset > rec.start_offset:  # a one-entry run has no lower keys
            ops.append(Delete(
                keys.index(self.topic, self.partition, rec.start_offset),
                keys.index(self.topic, self.partition, rec.end_offset),
            ))
        return _Step(self._txn(rev, [], ops), nxt, f"after_{DELETING_OLD}")

    def _update_cursor(self, rec: CompactionRecord, rev: int) -> _Step:
        ops: list[Op] = [Delete(self.record_key)]
        if rec.replaces is None:  # a key compaction rewrites below the cursor: it stays
            ops.insert(0, Put(self.cursor_key, CompactionCursor(rec.end_offset + 1).encode()))
        return _Step(self._txn(rev, [], ops), None, f"after_{UPDATING_CURSOR}")
