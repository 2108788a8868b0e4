"""Key compaction of compacted topics (protocol/README.md §10.2): Kafka's log cleaner
over llog's compacted entries.

A pass over one partition of a topic whose ``cleanup_policy`` includes ``compact``:

1. **Plan.** The cleanable prefix is the COMPACTED entries from the log start up to the
   compaction cursor, cut before the first entry holding a record newer than the
   topic's ``min_compaction_lag_ms``. Its **dirty** part starts at the clean cursor
   (``meta/clean-cursor``). A pass runs when the dirty part is at least
   ``compact_min_dirty_ratio`` of the prefix's bytes, or when tombstones kept by the
   last pass are now older than ``delete_retention_ms``.
2. **Key map.** Every key of the dirty part, as a 16-byte BLAKE2b digest, with its
   latest offset: entry by entry until the map would pass
   ``compact_key_map_entries`` (the pass then cleans up to there; memory stays bounded
   whatever the number of keys). Its end is the new clean cursor.
3. **Rewrite.** The prefix up to that end, in groups of consecutive entries of about
   ``compact_target_bytes``: a record goes when the map has a later offset for its key,
   and a tombstone also when it lies below the old clean cursor (an earlier pass kept
   it) in an entry written at least ``delete_retention_ms`` ago on the revision clock.
   Records without a key (stored before the policy was set) stay. A group that loses
   records (or merges several entries) becomes one ``bytes-batch-v1`` body carrying its
   records' offset deltas (the removed ones leave gaps; offsets never change), swapped
   in by the compaction stages (:mod:`compactor.stages`) under a record that names the
   entry it replaces. A group that would lose every record keeps its last one.
4. **Clean cursor** moved to the map's end, with the number of tombstones kept below it.

A crash anywhere leaves an orphan blob (vacuum) or a record the next compactor
finishes; a pass run again drops nothing more than the first would have.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import repeat

from compactor.claims import Claim, claimed_txn, process_owner
from compactor.metrics import CompactorMetrics
from compactor.planner import read_cursor
from compactor.recovery import finish_interrupted
from compactor.revision_clock import RevisionClock
from compactor.stages import WRITING_COMPACTED_INDEX, StageHook, StageRunner
from llog.codec import batch
from llog.codec.etcd_values.compaction import CleanCursor, CompactionRecord
from llog.codec.etcd_values.maps import MetaFormatError
from llog.codec.etcd_values.partition import COMPACTED, IndexEntry
from llog.codec.etcd_values.topic import TopicMeta
from llog.connection import Connection
from llog.errors import CorruptMetadata, OffsetOutOfRange
from llog.etcd.operations import Put, absent, mod_revision_is
from llog.reader import Reader
from llog.records import Headers
from llog.state.control import decode_index, now_ms, read_control
from llog.state.session import Sessions

log = logging.getLogger(__name__)

#: Records a pass turns into objects at a time.
CHUNK_ROWS = 8192
#: Outcomes of :meth:`Cleaner.clean_once`.
CLEANED = "cleaned"
IDLE = "idle"
CONFLICT = "conflict"


@dataclass(frozen=True)
class CleanResult:
    """What one pass did: ``cleaned`` (the clean cursor moved to ``clean_offset``),
    ``idle`` (nothing due) or ``conflict`` (the partition changed under the pass: a
    later one goes on). ``groups`` entries were rewritten, ``removed`` records dropped,
    ``keys`` distinct keys mapped."""

    topic: str
    partition: int
    outcome: str
    clean_offset: int | None = None
    groups: int = 0
    removed: int = 0
    keys: int = 0
    tombstones: int = 0


@dataclass(frozen=True)
class _Entry:
    start: int
    end: int
    entry: IndexEntry
    mod_revision: int


@dataclass(frozen=True)
class _Plan:
    #: The log start (DeleteRecords may have moved it inside the first entry).
    log_start: int
    #: The partition's last offset when the pass began: its record always stays, so a
    #: Kafka fetch from any gap reaches a record (a client only moves past records).
    last_offset: int
    #: The old clean cursor: records below it were cleaned by an earlier pass.
    clean: int
    clean_rev: int
    #: The cleanable prefix's entries (COMPACTED ones, and damaged WAL ones between).
    entries: list[_Entry]
    #: Entries written at or before this revision are ``delete_retention_ms`` old.
    tombstone_revision: int


#: A record as a pass reads it: ``(offset, timestamp, key, value, headers)``.
_Row = tuple[int, int, bytes | None, bytes | None, Headers]


@dataclass
class _Kept:
    """The records of a group that stay, as columns, with their offsets."""

    stamps: list[int | None]
    keys: list[bytes | None]
    values: list[bytes | None]
    headers: list[Headers]
    offsets: list[int]

    def add(self, row: _Row) -> None:
        offset, ts, key, value, headers = row
        self.offsets.append(offset)
        self.stamps.append(ts)
        self.keys.append(key)
        self.values.append(value)
        self.headers.append(headers)


def key_digest(key: bytes) -> bytes:
    """What the key map holds for a key: 16 bytes whatever the key's size (a collision
    of two keys is as likely as one of 128-bit hashes)."""
    return hashlib.blake2b(key, digest_size=16).digest()


class Cleaner:
    """Key compaction passes, sharing a :class:`~compactor.compact.Compactor`'s reader,
    sessions, revision clock and metrics."""

    def __init__(
        self, conn: Connection, reader: Reader, sessions: Sessions, clock: RevisionClock, metrics: CompactorMetrics,
        hook: StageHook | None = None,
    ) -> None:
        self.conn, self.reader, self.sessions, self.clock = conn, reader, sessions, clock
        self.metrics, self.hook = metrics, hook
        self.config = conn.config

    def clean_once(self, topic: str, partition: int, *, claim: Claim | None = None) -> CleanResult:
        """One pass over the partition (idle unless its topic is compacted)."""
        meta = self.conn.topic(topic, refresh=True)
        if not meta.compacted:
            return CleanResult(topic, partition, IDLE)
        finish_interrupted(self.conn, topic, partition, claim=claim, metrics=self.metrics, hook=self.hook)
        plan = self._plan(topic, partition, meta)
        if plan is None:
            return self._counted(CleanResult(topic, partition, IDLE))
        keymap, end = self._key_map(topic, partition, plan)
        groups = removed = tombstones = 0
        # Entries every record of which goes are swapped out with the next group that
        # keeps one (a body holds at least one record; keeping a superseded one instead
        # could bring a deleted key's old value back once its tombstone expires).
        carry: list[_Entry] = []
        carried = 0  # the records of the carried entries, all removed
        span = min(self.config.compact_max_records, 2**31 - 1)
        try:
            for group in _groups([e for e in plan.entries if e.end < end], self.config.compact_target_bytes, span):
                if carry and (carry[-1].end + 1 != group[0].start or group[-1].end - carry[0].start >= span):
                    carry, carried = [], 0  # not adjacent, or too long a range: those entries stay as they are
                outcome = self._clean_group(topic, partition, carry, group, keymap, plan, claim)
                if outcome is None:
                    return self._counted(CleanResult(topic, partition, CONFLICT, None, groups, removed, len(keymap)))
                dropped, kept_tombstones, rewritten = outcome
                if rewritten < 0:
                    carry, carried = [*carry, *group], carried + dropped
                    continue
                removed += dropped + (carried if rewritten else 0)
                carry, carried = [], 0
                tombstones += kept_tombstones
                groups += rewritten
        except OffsetOutOfRange:  # DeleteRecords moved the log start during the pass
            return self._counted(CleanResult(topic, partition, CONFLICT, None, groups, removed, len(keymap)))
        if not self._move_clean_cursor(topic, partition, plan, CleanCursor(end, tombstones), claim):
            return self._counted(CleanResult(topic, partition, CONFLICT, None, groups, removed, len(keymap)))
        if groups:
            log.info("key-compacted %s/%s below %d: %d records removed in %d groups (%d keys mapped)",
                     topic, partition, end, removed, groups, len(keymap))
        return self._counted(CleanResult(topic, partition, CLEANED, end, groups, removed, len(keymap), tombstones))

    def _counted(self, res: CleanResult) -> CleanResult:
        self.metrics.clean_passes.labels(res.outcome).inc()
        self.metrics.clean_removed.inc(res.removed)
        return res

    # -- 1. plan ------------------------------------------------------------------
    def _plan(self, topic: str, partition: int, meta: TopicMeta) -> _Plan | None:
        conn, keys = self.conn, self.conn.keys
        self.clock.observe()
        control = read_control(conn, topic, partition).control
        log_start = control.log_start_offset
        cursor, _ = read_cursor(conn, topic, partition)
        top = log_start if cursor is None else max(cursor, log_start)
        clean, tombstones, clean_rev = self._clean_cursor(topic, partition)
        clean = max(clean, log_start)
        lag_cutoff = now_ms() - meta.compaction_lag_ms
        entries: list[_Entry] = []
        for kv in conn.etcd.scan(keys.index(topic, partition, log_start), keys.index(topic, partition, top)):
            e = decode_index(kv.key, kv.value)
            end = keys.end_offset_of(kv.key)
            if meta.compaction_lag_ms and e.max_timestamp > lag_cutoff:
                break  # records this new stay as they are, and so does all after them
            entries.append(_Entry(end - e.msg_count + 1, end, e, kv.mod_revision))
        tombstone_revision = self.clock.aged_revision(meta.tombstone_retention_ms)
        total = sum(e.entry.byte_length for e in entries if e.entry.kind == COMPACTED)
        dirty = sum(e.entry.byte_length for e in entries if e.entry.kind == COMPACTED and e.end >= clean)
        due = dirty > 0 and dirty >= self.config.compact_min_dirty_ratio * total
        if not due and not (tombstones and clean_rev <= tombstone_revision):
            return None
        return _Plan(log_start, control.next_offset - 1, clean, clean_rev, entries, tombstone_revision)

    def _clean_cursor(self, topic: str, partition: int) -> tuple[int, int, int]:
        """``(offset, tombstones, mod_revision)`` of the clean cursor (absent: zeros)."""
        kv = self.conn.etcd.get(self.conn.keys.clean_cursor(topic, partition))
        if kv is None:
            return 0, 0, 0
        try:
            c = CleanCursor.decode(kv.value)
        except MetaFormatError as exc:
            raise CorruptMetadata(kv.key, str(exc)) from exc
        return c.offset, c.tombstones, kv.mod_revision

    # -- 2. key map ---------------------------------------------------------------
    def _key_map(self, topic: str, partition: int, plan: _Plan) -> tuple[dict[bytes, int], int]:
        """The dirty part's keys and their latest offsets, and where the map ends."""
        keymap: dict[bytes, int] = {}
        end = plan.clean
        cap = self.config.compact_key_map_entries
        for e in plan.entries:
            if e.end < plan.clean:
                continue
            if e.entry.kind != COMPACTED:  # a damaged entry (§10 K3'): nothing of it reads
                end = e.end + 1
                continue
            latest: dict[bytes, int] = {}
            for offset, _, key, _, _ in self._records(topic, partition, max(e.start, plan.clean), e.end):
                if key is not None:
                    latest[key_digest(key)] = offset
            if keymap and len(keymap) + sum(1 for d in latest if d not in keymap) > cap:
                break  # full: this pass cleans up to here, the next one goes on
            keymap.update(latest)
            end = e.end + 1
        self.metrics.clean_key_map.set(len(keymap))
        return keymap, end

    def _records(self, topic: str, partition: int, lo: int, hi: int) -> Iterator[_Row]:
        """The records of offsets ``[lo, hi]``, built :data:`CHUNK_ROWS` at a time (a
        compacted body can hold a million: its records as objects all at once would be
        hundreds of MiB)."""
        for first, b, a, z in self.reader.scan_batches(topic, partition, lo, hi + 1):
            start, stop = b.span(a - first, z - first)
            for at in range(start, stop, CHUNK_ROWS):
                upto = min(stop, at + CHUNK_ROWS)
                ts, ks, vs, hs = b.columns(at, upto)
                yield from zip(b.offsets(first, at, upto), ts, ks if ks is not None else repeat(None), vs,
                               hs if hs is not None else repeat(()), strict=False)

    # -- 3. rewrite -----------------------------------------------------------------
    def _clean_group(
        self, topic: str, partition: int, carry: list[_Entry], group: list[_Entry], keymap: dict[bytes, int],
        plan: _Plan, claim: Claim | None,
    ) -> tuple[int, int, int] | None:
        """``(records removed, tombstones kept, entries rewritten: 0 or 1, or -1 when
        every record of the group goes and it is carried into the next)``, or ``None``
        when the partition changed under the pass. ``carry``: entries just before the
        group that lost every record, swapped out with it."""
        first, last = group[0], group[-1]
        lo = max(first.start, plan.log_start)  # records below the log start are gone
        starts = [e.start for e in group]
        aged = [e.mod_revision <= plan.tombstone_revision for e in group]
        kept = _Kept([], [], [], [], [])
        removed = tombstones = 0
        row: _Row | None = None
        for row in self._records(topic, partition, lo, last.end):
            offset, _, key, value, _ = row
            if key is not None and offset != plan.last_offset:
                superseded = keymap.get(key_digest(key), -1) > offset
                # A tombstone an earlier pass kept, in an entry written long enough ago.
                expired = value is None and offset < plan.clean and aged[bisect_right(starts, offset) - 1]
                if superseded or expired:
                    removed += 1
                    continue
            kept.add(row)
            tombstones += value is None
        if not kept.offsets:
            return removed, 0, -1
        if carry:
            lo = max(carry[0].start, plan.log_start)
        elif not removed and len(group) == 1:
            return 0, tombstones, 0
        if not self._swap(topic, partition, [*carry, *group], lo, kept, claim):
            return None
        return removed, tombstones, 1

    def _swap(
        self, topic: str, partition: int, group: list[_Entry], lo: int, kept: _Kept, claim: Claim | None
    ) -> bool:
        """PUT the group's kept records (from offset ``lo`` on) as one body and swap it
        in for the group's entries (record, then the compaction stages); ``False`` if
        the group changed."""
        conn, m = self.conn, self.metrics
        first, last = group[0], group[-1]
        encoded = batch.encode_columns((kept.stamps, kept.keys, kept.values, kept.headers),
                                       deltas=[o - lo for o in kept.offsets])
        session = self.sessions.acquire()
        try:
            data_key = conn.keys.compacted_blob(topic, partition, session.id, uuid.uuid4().hex)
            with m.time("put"):
                conn.store.put(data_key, encoded.tobytes(), crc32=encoded.full_crc())
            rec = CompactionRecord(
                stage=WRITING_COMPACTED_INDEX, start_offset=lo, end_offset=last.end,
                last_wal_start_offset=last.start, msg_count=last.end - lo + 1, data_key=data_key,
                byte_length=encoded.length, max_timestamp=max(t for t in kept.stamps if t is not None),
                created_at_ms=now_ms(), owner=claim.token if claim is not None else f"{process_owner()}/unclaimed",
                replaces=last.entry.data_key,
            )
            runner = StageRunner(conn, topic, partition, claim=claim, metrics=m, hook=self.hook)
            runner.emit("after_put", rec, 0)
            keys = conn.keys
            rk = keys.compaction(topic, partition)
            r = claimed_txn(
                conn, topic, partition, claim,
                [absent(rk), session.compare(),
                 mod_revision_is(keys.index(topic, partition, first.end), first.mod_revision),
                 mod_revision_is(keys.index(topic, partition, last.end), last.mod_revision)],
                [Put(rk, rec.encode())],
            )
        finally:
            self.sessions.release(session)
        if not r.succeeded:  # the group changed, or the session ended: a later pass goes on
            return False
        runner.emit("after_record", rec, r.revision)
        return runner.finish(rec, r.revision).outcome == "done"

    # -- 4. clean cursor --------------------------------------------------------------
    def _move_clean_cursor(
        self, topic: str, partition: int, plan: _Plan, cursor: CleanCursor, claim: Claim | None
    ) -> bool:
        keys = self.conn.keys
        ck = keys.clean_cursor(topic, partition)
        return claimed_txn(self.conn, topic, partition, claim,
                           [absent(keys.compaction(topic, partition)), mod_revision_is(ck, plan.clean_rev)],
                           [Put(ck, cursor.encode())]).succeeded


def _groups(entries: list[_Entry], target_bytes: int, span: int) -> Iterator[list[_Entry]]:
    """Runs of consecutive COMPACTED entries of about ``target_bytes`` and fewer than
    ``span`` offsets (a body's offset deltas are 32-bit; at least one entry each); a
    damaged WAL entry between ends a run and is left out."""
    group: list[_Entry] = []
    size = 0
    for e in entries:
        if e.entry.kind != COMPACTED:
            if group:
                yield group
            group, size = [], 0
            continue
        if group and (size + e.entry.byte_length > target_bytes or e.end - group[0].start >= span):
            yield group
            group, size = [], 0
        group.append(e)
        size += e.entry.byte_length
    if group:
        yield group
