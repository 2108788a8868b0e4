"""``compact_once``: rewrite one run of a partition's WAL slices into one compacted blob.

1. Finish any interrupted compaction (``meta/compaction``), then settle an idle
   ``pending`` so its append can be compacted too. Ages are judged by etcd revision
   on the compactor's own clock (:mod:`compactor.revision_clock`), never by a writer's.
2. Read the cursor (absent: the log start offset) and select one contiguous run of WAL
   index entries starting exactly there (:mod:`compactor.planner`).
3. Read the run's records through the reader and write them as ONE body (timestamps,
   keys and headers kept): ``bytes-batch-v1``, or a Parquet file for a topic whose
   ``compacted_format`` is ``parquet`` (:mod:`llog.codec.parquet_body`), to
   ``data/compacted/{session}/{uuid}``, under the compactor's session (:mod:`llog.session`).
4. Create ``meta/compaction`` if absent, guarded by the cursor's ``mod_revision`` (no
   one compacted or applied retention since step 2), the claim, and the session key's
   create_revision (the session still lives, so vacuum has not judged the blob); then
   run the stages (:mod:`compactor.stages`).

A crash anywhere leaves either an unreferenced blob (vacuum deletes it) or a record
that the next compactor finishes.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, replace

from compactor.claims import Claim, claim_guard, claim_lost, process_owner
from compactor.metrics import CompactorMetrics, compactor_metrics
from compactor.planner import WalRun, select_run
from compactor.recovery import Recovered, finish_interrupted
from compactor.revision_clock import RevisionClock
from compactor.stages import WRITING_COMPACTED_INDEX, StageHook, StageRunner
from llog.codec import batch, parquet_body
from llog.codec.etcd_values import PARQUET_ENCODING, CompactionCursor, CompactionRecord, MetaFormatError
from llog.connection import Connection
from llog.control import now_ms, read_control, settle
from llog.errors import ClaimLost, CorruptMetadata, OffsetOutOfRange
from llog.etcd import Get, Put, absent, mod_revision_is
from llog.reader import Reader
from llog.records import Headers
from llog.session import Session, Sessions

log = logging.getLogger(__name__)

#: Outcomes of :meth:`Compactor.compact_once`.
COMPACTED = "compacted"
IDLE = "idle"
CONFLICT = "conflict"
ABANDONED = "abandoned"


@dataclass(frozen=True)
class CompactionResult:
    """What one ``compact_once`` did.

    ``outcome``: ``compacted`` (a run was rewritten and the cursor advanced), ``idle``
    (nothing ready at the cursor), ``conflict`` (the cursor moved or another compaction
    started meanwhile; nothing changed but an unreferenced blob), ``abandoned`` (the
    range changed under the record; index untouched). ``recovered`` is the interrupted
    compaction finished first, if any.
    """

    topic: str
    partition: int
    outcome: str
    recovered: Recovered | None = None
    record: CompactionRecord | None = None
    entries: int = 0
    index_keys_removed: int = 0


def read_cursor(conn: Connection, topic: str, partition: int) -> tuple[int | None, int]:
    """``(cursor offset or None if never written, mod_revision or 0)``."""
    kv = conn.etcd.get(conn.keys.compaction_cursor(topic, partition))
    if kv is None:
        return None, 0
    try:
        return CompactionCursor.decode(kv.value).offset, kv.mod_revision
    except MetaFormatError as exc:
        raise CorruptMetadata(kv.key, str(exc)) from exc


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
        self._sessions = Sessions(conn, "compactor")

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
            try:
                rec = self._write_blob(topic, partition, run, claim, session)
            except OffsetOutOfRange:  # retention moved the log start past the run meanwhile
                return CompactionResult(topic, partition, CONFLICT, recovered)
            runner = StageRunner(conn, topic, partition, claim=claim, metrics=m, hook=self.hook)
            runner.emit("after_put", rec, 0)
            keys = conn.keys
            rk, ck = keys.compaction(topic, partition), keys.compaction_cursor(topic, partition)
            with m.time("create_record"):
                r = conn.etcd.txn(
                    [absent(rk), mod_revision_is(ck, cursor_rev), claim_guard(conn, topic, partition, claim),
                     session.compare()],
                    [Put(rk, rec.encode())],
                    [Get(keys.compactor_claim(topic, partition)), Get(session.key)],
                )
        finally:
            # Once the record exists it is the blob's reference; before, an orphan.
            self._sessions.release(session)
        if not r.succeeded:
            held, alive = r.responses
            assert isinstance(held, list) and isinstance(alive, list)
            if claim_lost(claim, held):
                raise ClaimLost(topic, partition)
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
        run = select_run(
            conn, topic, partition, start,
            target_bytes=cfg.compact_target_bytes,
            max_records=cfg.compact_max_records,
            aged_revision=self.clock.aged_revision(cfg.compact_min_age_ms),
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
            values: list[bytes] = []
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
        parquet = conn.topic(topic, refresh=True).compacted_format == "parquet"
        with m.time("encode"):
            if parquet:
                body, crc = parquet_body.encode((stamps, keys, values, headers), partition, run.start_offset), None
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
            encoding=PARQUET_ENCODING if parquet else None,
        )

    def close(self) -> None:
        self._sessions.close()
        self._reader.close()
        self._read_conn.close()

    def __enter__(self) -> Compactor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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

