"""``compact_once``: rewrite one run of a partition's WAL slices into one compacted blob.

1. Finish any interrupted compaction (``meta/compaction``), then settle an idle
   ``pending`` so its append can be compacted too. Ages are judged by etcd revision
   on the compactor's own clock (:mod:`compactor.revision_clock`), never by a writer's.
2. Read the cursor (absent: the log start offset) and select one contiguous run of WAL
   index entries starting exactly there (:mod:`compactor.planner`).
3. Read the run's records through the reader and write them as ONE body (timestamps,
   keys and headers kept): ``bytes-batch-v1``, or a Parquet file for a topic whose
   ``compacted_format`` is ``parquet`` (:mod:`llog.codec.parquet_body`), to
   ``data/compacted/{session}/{uuid}``, under the compactor's session (:mod:`llog.state.session`).
4. Create ``meta/compaction`` if absent, guarded by the cursor's ``mod_revision`` (no
   one compacted or applied retention since step 2), the claim, and the session key's
   create_revision (the session still lives, so vacuum has not judged the blob); then
   run the stages (:mod:`compactor.stages`).

A body that does not decode (bit rot, a bug) never stops the partition: the run is cut
before it, and when it is the first entry at the cursor, read again straight from the
store to be sure, it is passed (step K3', spec §10): one transaction records it under
``damaged/{end}`` and moves the cursor past it, its index entry left as it is.

A crash anywhere leaves either an unreferenced blob (vacuum deletes it) or a record
that the next compactor finishes.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, replace

from compactor.claims import Claim, claimed_txn, process_owner
from compactor.clean import Cleaner, CleanResult
from compactor.metrics import CompactorMetrics, compactor_metrics
from compactor.planner import WalRun, WalSlice, read_cursor, select_run
from compactor.recovery import Recovered, finish_interrupted
from compactor.revision_clock import RevisionClock
from compactor.stages import WRITING_COMPACTED_INDEX, StageHook, StageRunner
from compactor.typed_columns import TypedColumns
from llog.codec import batch, bodies
from llog.codec.etcd_values.compaction import CompactionCursor, CompactionRecord, DamagedRange
from llog.codec.etcd_values.partition import PARQUET_ENCODING
from llog.connection import Connection
from llog.errors import CorruptBlob, CorruptMetadata, ObjectNotFound, OffsetOutOfRange, StoreError
from llog.etcd.operations import Get, Put, absent, mod_revision_is
from llog.reader import Reader
from llog.records import Headers
from llog.state.control import now_ms, read_control, settle
from llog.state.session import Session, Sessions

log = logging.getLogger(__name__)

#: Outcomes of :meth:`Compactor.compact_once`.
COMPACTED = "compacted"
IDLE = "idle"
CONFLICT = "conflict"
ABANDONED = "abandoned"
DAMAGED = "damaged"


@dataclass(frozen=True)
class CompactionResult:
    """What one ``compact_once`` did.

    ``outcome``: ``compacted`` (a run was rewritten and the cursor advanced), ``idle``
    (nothing ready at the cursor), ``conflict`` (the cursor moved or another compaction
    started meanwhile; nothing changed but an unreferenced blob), ``abandoned`` (the
    range changed under the record; index untouched), ``damaged`` (the entry at the
    cursor does not decode: recorded in ``damaged`` and passed). ``recovered`` is the
    interrupted compaction finished first, if any.
    """

    topic: str
    partition: int
    outcome: str
    recovered: Recovered | None = None
    record: CompactionRecord | None = None
    entries: int = 0
    index_keys_removed: int = 0
    #: The entry passed, with the end offset of its range, for ``damaged``.
    damaged: tuple[int, DamagedRange] | None = None


class Compactor:
    """Compacts partitions of one connection; thread-safe (one call per partition at a
    time is the caller's job: hold the partition's claim).

    >>> with Compactor(conn) as c:                                # doctest: +SKIP
    ...     c.compact_once("orders", 0).outcome
    'compacted'
    """

    def __init__(
        self,
        conn: Connection,
        *,
        hook: StageHook | None = None,
        metrics: CompactorMetrics | None = None,
        clock: RevisionClock | None = None,
    ) -> None:
        self.conn = conn
        #: Judges the minimum age (the persisted samples unless the caller shares one).
        self.clock = clock if clock is not None else RevisionClock.load(conn)
        self.config = conn.config
        self.hook = hook
        self.metrics = metrics if metrics is not None else compactor_metrics(conn.metrics)
        # Same etcd, store and metrics; only more GETs in flight than a consumer needs.
        cfg = conn.config
        self._read_conn = Connection(
            replace(cfg, read_prefetch=max(cfg.read_prefetch, cfg.compact_read_prefetch)),
            etcd=conn.etcd, store=conn.store, metrics=conn.metrics,
        )
        self._reader = Reader(self._read_conn, settle_pending=False)
        self._typed = TypedColumns(conn)
        self._sessions = Sessions(conn, "compactor")
        self._cleaner = Cleaner(conn, self._reader, self._sessions, self.clock, self.metrics, hook)

    def compact_once(self, topic: str, partition: int, *, claim: Claim | None = None) -> CompactionResult:
        """Finish any interrupted compaction, then compact the run at the cursor.

        With ``claim``, every stage transaction requires it to still hold; without
        one, they require that no compactor holds the partition's claim. Raises
        :class:`ClaimLost` if the claim went away (the next claimant finishes).
        """
        self.conn.check_partition(topic, partition)
        result = self._compact(topic, partition, claim)
        self.metrics.runs.labels(result.outcome).inc()
        return result

    def clean_once(self, topic: str, partition: int, *, claim: Claim | None = None) -> CleanResult:
        """One key compaction pass of a compacted topic's partition (spec §10.2;
        :mod:`compactor.clean`), under ``claim`` as :meth:`compact_once`; ``idle`` for
        other topics and when nothing is due."""
        self.conn.check_partition(topic, partition)
        return self._cleaner.clean_once(topic, partition, claim=claim)

    def _compact(self, topic: str, partition: int, claim: Claim | None) -> CompactionResult:
        conn, m = self.conn, self.metrics
        with m.time("recover"):
            recovered = finish_interrupted(conn, topic, partition, claim=claim, metrics=m, hook=self.hook)
        with m.time("select"):
            run, cursor_rev = self._select(topic, partition)
        if run is None:
            return CompactionResult(topic, partition, IDLE, recovered)
        session = self._sessions.acquire()
        try:
            written = self._rewrite(topic, partition, run, cursor_rev, claim, session, recovered)
            if isinstance(written, CompactionResult):
                return written
            rec, run = written
            runner = StageRunner(conn, topic, partition, claim=claim, metrics=m, hook=self.hook)
            runner.emit("after_put", rec, 0)
            keys = conn.keys
            rk, ck = keys.compaction(topic, partition), keys.compaction_cursor(topic, partition)
            with m.time("create_record"):
                r = claimed_txn(conn, topic, partition, claim,
                                [absent(rk), mod_revision_is(ck, cursor_rev), session.compare()],
                                [Put(rk, rec.encode())], [Get(session.key)])
        finally:
            # Once the record exists it is the blob's reference; before, an orphan.
            self._sessions.release(session)
        if not r.succeeded:
            alive = r.responses[0]
            assert isinstance(alive, list)
            if not session.holds(alive):
                log.warning("compaction of %s/%s dropped: session %s expired after its PUT",
                            topic, partition, session.id)
            return CompactionResult(topic, partition, CONFLICT, recovered)
        runner.emit("after_record", rec, r.revision)
        fin = runner.finish(rec, r.revision)
        if fin.outcome != "done":
            return CompactionResult(
                topic, partition, ABANDONED, recovered, rec, run.entries, fin.index_keys_removed
            )
        m.bytes.labels("read").inc(run.byte_length)
        m.bytes.labels("written").inc(rec.byte_length)
        m.records.inc(rec.msg_count)
        log.info(
            "compacted %s/%s [%d, %d]: %d entries, %d -> %d bytes",
            topic, partition, rec.start_offset, rec.end_offset, run.entries, run.byte_length, rec.byte_length,
        )
        return CompactionResult(
            topic, partition, COMPACTED, recovered, rec, run.entries, fin.index_keys_removed
        )

    def _rewrite(
        self, topic: str, partition: int, run: WalRun, cursor_rev: int, claim: Claim | None, session: Session,
        recovered: Recovered | None,
    ) -> tuple[CompactionRecord, WalRun] | CompactionResult:
        """Step K2: the record for the run rewritten (and the run, cut before a damaged
        body if it held one); or the pass's result when there is nothing to rewrite: a
        damaged entry at the cursor passed (K3'), or retention moved past the run."""
        while True:
            try:
                return self._write_blob(topic, partition, run, claim, session), run
            except OffsetOutOfRange:  # retention moved the log start past the run meanwhile
                return CompactionResult(topic, partition, CONFLICT, recovered)
            except CorruptBlob as exc:
                j = next((j for j, sl in enumerate(run.slices) if sl.holds(exc.key, exc.offset, exc.length)), None)
                if j is None:  # not one of the run's slices: nothing to pass
                    raise
                if j == 0:
                    return self._pass_damaged(topic, partition, run.slices[0], cursor_rev, claim, exc, recovered)
                run = run.prefix(j)  # compact what precedes the damage; it comes first next time

    def _pass_damaged(
        self, topic: str, partition: int, sl: WalSlice, cursor_rev: int, claim: Claim | None, exc: CorruptBlob,
        recovered: Recovered | None,
    ) -> CompactionResult:
        """Step K3': the entry at the cursor does not decode. Read straight from the
        store (no cache, no peer) to be sure, then record it and move the cursor past
        it in one transaction guarded like K3, and by the entry's own key (retention or
        a writer's materialization has not changed it since it was selected)."""
        conn, keys = self.conn, self.conn.keys
        reason = _undecodable(conn, sl)
        if reason is None:
            log.warning("%s/%s [%d, %d] read as damaged once but decodes from the store (%s); retrying later",
                        topic, partition, sl.start_offset, sl.end_offset, exc.reason)
            return CompactionResult(topic, partition, CONFLICT, recovered)
        owner = claim.token if claim is not None else f"{process_owner()}/unclaimed"
        damaged = DamagedRange(sl.start_offset, sl.data_key, sl.byte_offset, sl.byte_length, reason, now_ms(), owner)
        ck = keys.compaction_cursor(topic, partition)
        r = claimed_txn(
            conn, topic, partition, claim,
            [absent(keys.compaction(topic, partition)), mod_revision_is(ck, cursor_rev),
             mod_revision_is(keys.index(topic, partition, sl.end_offset), sl.mod_revision)],
            [Put(keys.damaged(topic, partition, sl.end_offset), damaged.encode()),
             Put(ck, CompactionCursor(sl.end_offset + 1).encode())],
        )
        if not r.succeeded:  # someone else moved
            return CompactionResult(topic, partition, CONFLICT, recovered)
        self.metrics.damaged.inc()
        self.metrics.damaged_records.inc(sl.end_offset - sl.start_offset + 1)
        log.error("%s/%s [%d, %d] in %s bytes [%d, %d) does not decode (%s): passed by compaction, kept in the "
                  "index (readers get CorruptBlob), recorded under %s", topic, partition, sl.start_offset,
                  sl.end_offset, sl.data_key, sl.byte_offset, sl.byte_offset + sl.byte_length, reason,
                  keys.damaged(topic, partition, sl.end_offset))
        return CompactionResult(topic, partition, DAMAGED, recovered, damaged=(sl.end_offset, damaged))

    def _select(self, topic: str, partition: int) -> tuple[WalRun | None, int]:
        """Settle an idle pending, then select the run at the cursor (steps K0 and K1):
        ``(run or None, the cursor's mod_revision for the record's guard)``."""
        conn, cfg = self.conn, self.config
        self.clock.observe()
        st = read_control(conn, topic, partition)
        # An idle pending is settled by the age of its commit's revision, so a writer
        # clock ahead cannot keep it (and the run it ends) out of compaction.
        if st.control.pending is not None and st.mod_revision <= self.clock.aged_revision(cfg.settle_after_ms):
            st = settle(conn, topic, partition, state=st, max_attempts=1)
        cursor, cursor_rev = read_cursor(conn, topic, partition)
        lso = st.control.log_start_offset
        start = lso if cursor is None else max(cursor, lso)
        min_age_ms = cfg.compact_min_age_ms
        if conn.topic(topic).table is not None:  # the table's freshness bounds the wait
            min_age_ms = min(min_age_ms, round(cfg.iceberg_freshness_s * 500))
        run = select_run(
            conn, topic, partition, start,
            target_bytes=cfg.compact_target_bytes,
            max_records=cfg.compact_max_records,
            aged_revision=self.clock.aged_revision(min_age_ms),
        )
        return run, cursor_rev

    def _write_blob(
        self, topic: str, partition: int, run: WalRun, claim: Claim | None, session: Session
    ) -> CompactionRecord:
        """Read the run's records, PUT them as one body; the record to create for it."""
        conn, m = self.conn, self.metrics
        with m.time("read"):
            # Column by column, as the bodies hold them: no per-record objects.
            stamps: list[int | None] = []
            keys: list[bytes | None] = []
            values: list[bytes | None] = []
            headers: list[Headers] = []
            max_ts = 0
            scan = self._reader.scan_batches(topic, partition, run.start_offset, run.end_offset + 1)
            for first, b, lo, hi in scan:
                ts, ks, vs, hs = b.columns(lo - first, hi - first)
                max_ts = max(max_ts, *ts)
                stamps.extend(ts)
                keys.extend([None] * len(vs) if ks is None else ks)
                values.extend(vs)
                headers.extend([()] * len(vs) if hs is None else hs)
        if len(values) != run.msg_count:
            raise CorruptMetadata(
                conn.keys.index(topic, partition, run.end_offset),
                f"run [{run.start_offset}, {run.end_offset}] read back {len(values)} records",
            )
        # The topic's format as it is now: a change applies from the next compaction.
        meta = conn.topic(topic, refresh=True)
        with m.time("encode"):
            if meta.compacted_format == "parquet":
                body, crc = self._typed.encode(meta, (stamps, keys, values, headers), partition, run.start_offset), None
            else:
                encoded = batch.encode_columns((stamps, keys, values, headers))
                body, crc = encoded.tobytes(), encoded.full_crc()
        data_key = conn.keys.compacted_blob(topic, partition, session.id, uuid.uuid4().hex)
        with m.time("put"):
            conn.store.put(data_key, body, crc32=crc)
        return CompactionRecord(
            stage=WRITING_COMPACTED_INDEX,
            start_offset=run.start_offset,
            end_offset=run.end_offset,
            last_wal_start_offset=run.last_wal_start_offset,
            msg_count=run.msg_count,
            data_key=data_key,
            byte_length=len(body),
            max_timestamp=max_ts,
            created_at_ms=now_ms(),
            owner=claim.token if claim is not None else f"{process_owner()}/unclaimed",
            encoding=PARQUET_ENCODING if meta.compacted_format == "parquet" else None,
        )

    def close(self) -> None:
        self._sessions.close()
        self._reader.close()
        self._read_conn.close()

    def __enter__(self) -> Compactor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _undecodable(conn: Connection, sl: WalSlice) -> str | None:
    """Why ``sl``'s body, read straight from the store, does not decode (``None``: it
    does). A store that cannot be read proves nothing: its error is raised."""
    try:
        body = conn.store.get_upto(sl.data_key, sl.byte_offset, sl.byte_length)
    except ObjectNotFound:  # vacuumed under a re-planned read: not damage
        raise
    except StoreError:
        info = conn.store.head(sl.data_key)  # objects never change: a short one is damaged
        if info is None or info.size > sl.byte_offset:
            raise
        return f"the object ends at byte {info.size}, before the slice"
    if len(body) != sl.byte_length:
        return f"the object holds {len(body)} of the slice's {sl.byte_length} bytes"
    try:
        n = len(bodies.decode(body))
    except batch.BatchFormatError as exc:
        return str(exc)
    expected = sl.end_offset - sl.start_offset + 1
    return None if n == expected else f"body holds {n} records, its index entry {expected}"


def compact_once(
    conn: Connection,
    topic: str,
    partition: int,
    *,
    claim: Claim | None = None,
    hook: StageHook | None = None,
) -> CompactionResult:
    """One-shot :meth:`Compactor.compact_once` (debugging, scripts, the CLI)."""
    with Compactor(conn, hook=hook) as c:
        return c.compact_once(topic, partition, claim=claim)

