"""The write path: pack one shared WAL blob for many partitions, PUT it once, then
commit each partition with the pending protocol (protocol/README.md, "Commit protocol").

Steady state costs one etcd transaction per partition-append: the writer caches each
partition's control value and mod_revision from its own last commit, so it can CAS
without a read, and the transaction that sets the new ``pending`` also materializes the
previous one. When every partition of a shared blob is cached, their transactions go to
etcd as one (step W2', "combined commit"): each keeps its own compare, so all commit or
none, and a blob for 16 partitions costs one round trip instead of 16. Idempotent
appends (``producer_id`` + ``sequence``) add the producer's key to that same
transaction, cached the same way ("Idempotent produce" in the spec).

Every blob is written under the writer's current session (:mod:`llog.state.session`) and its
commit transaction compares the session key's create_revision: a writer paused past
its session's TTL gets :class:`SessionExpired` instead of committing a blob that vacuum
may have deleted. The compare rides in the same transaction, so it costs no round trip.

The pieces, in protocol order: :mod:`llog.write.validation` (W0), :mod:`llog.write.staging` (W1),
:mod:`llog.write.commit_plan`, :mod:`llog.write.commit_runner` and :mod:`llog.write.partition_commit`
(W2, W2', §8.3-§8.7), :mod:`llog.write.acknowledgement` (W3) and :mod:`llog.write.caches`;
:class:`Writer` ties them together.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor

from llog.config import LlogConfig
from llog.connection import Connection
from llog.errors import LlogError
from llog.records import AppendGroup, Record
from llog.state.control import now_ms, settle
from llog.state.session import Sessions
from llog.store.hedging import HedgedPuts
from llog.write.acknowledgement import AppendFailure, AppendResult, Outcome
from llog.write.backpressure import UncompactedKeysGate
from llog.write.caches import CACHE_PARTITIONS, WriterCaches
from llog.write.commit_runner import TXN_PARTITIONS, CommitRunner
from llog.write.partition_commit import FaultHook
from llog.write.staging import EncodedBlob, StagedBlob, pack_groups, pendings_of, with_digests
from llog.write.validation import GroupInput, PreparedGroup, check_records, normalize_record, prepare_groups

__all__ = [
    "CACHE_PARTITIONS",
    "TXN_PARTITIONS",
    "AppendFailure",
    "AppendResult",
    "EncodedBlob",
    "FaultHook",
    "Outcome",
    "StagedBlob",
    "Writer",
    "check_records",
    "normalize_record",
]

log = logging.getLogger(__name__)


class Writer:
    """Appends records to any partitions; thread-safe.

    >>> with Writer(conn) as w:                                   # doctest: +SKIP
    ...     [res] = w.append_shared([AppendGroup("orders", 0, [b"a", b"b"])])
    ...     res.start_offset, res.end_offset
    (0, 1)
    """

    def __init__(
        self,
        conn: Connection | LlogConfig | None = None,
        *,
        commit_workers: int = 8,
        fault_hook: FaultHook | None = None,
    ) -> None:
        self._owns_conn = not isinstance(conn, Connection)
        self.conn = conn if isinstance(conn, Connection) else Connection(conn)
        self.config = self.conn.config
        self._fault = fault_hook
        self._caches = WriterCaches(CACHE_PARTITIONS)
        self._sessions = Sessions(self.conn, "writer")
        self._pool = ThreadPoolExecutor(commit_workers, thread_name_prefix="llog-commit")
        # The clock is looked up at each call, so a test can shift this module's now_ms.
        self._runner = CommitRunner(self.conn, self._caches, self._pool, self._hook, lambda: now_ms())
        self._gate = UncompactedKeysGate(self.conn)
        cfg = self.config
        self._puts = HedgedPuts(self.conn.store, self.conn.metrics, quantile=cfg.put_hedge_quantile,
                                min_delay_s=cfg.put_hedge_min_ms / 1000)
        self._closed = False

    # -- public API ------------------------------------------------------------
    def append(self, topic: str, partition: int, records: Sequence[Record | bytes]) -> AppendResult:
        """Append to one partition; raise the failure instead of returning it."""
        [out] = self.append_shared([AppendGroup(topic, partition, records)])
        if isinstance(out, AppendFailure):
            raise out.error
        return out

    def validate(
        self,
        groups: Iterable[GroupInput],
        *,
        records_checked: bool = False,
    ) -> list[PreparedGroup]:
        """Check every group (names, partitions against the topic, record types and
        sizes) without writing anything; raise the first problem found. With
        ``records_checked`` the records are taken as :func:`check_records` returned
        them (the :class:`~llog.producer.BatchingProducer` checks each send, a compacted
        topic's keys included), and only the groups themselves are checked."""
        return prepare_groups(self.conn, groups, now=now_ms(), records_checked=records_checked)

    def append_shared(
        self, groups: Iterable[GroupInput]
    ) -> list[Outcome]:
        """Append many groups through one shared WAL blob.

        Bad input (names, partitions, record types, sizes, unknown topics) and
        :class:`~llog.errors.BackPressure` raise before anything is written. Otherwise
        returns one outcome per group, in order: an
        :class:`AppendResult` with its offsets, or an :class:`AppendFailure` carrying a
        typed error (:class:`Fenced`, :class:`CasConflict`, :class:`SequenceError`,
        :class:`AmbiguousCommit`, ...). A group with ``producer_id``/``sequence`` whose
        sequence is the producer's last committed one gets that batch's original
        :class:`AppendResult` back and appends nothing.
        """
        return self.commit_staged(self.stage_shared(groups))

    def stage_shared(
        self,
        groups: Iterable[GroupInput],
        *,
        records_checked: bool = False,
    ) -> StagedBlob:
        """The first half of :meth:`append_shared`: validate, encode and PUT the shared
        blob (:meth:`encode_shared`, then :meth:`put_encoded`). Nothing is committed (or
        visible) until :meth:`commit_staged`; a staged blob that is never committed is
        an orphan for vacuum (and keeps its session open until the writer closes).
        Pipelining callers stage the next blob while the previous
        one commits. ``records_checked``: see :meth:`validate`."""
        return self.put_encoded(self.encode_shared(groups, records_checked=records_checked))

    def encode_shared(
        self,
        groups: Iterable[GroupInput],
        *,
        records_checked: bool = False,
    ) -> EncodedBlob:
        """Validate ``groups`` and build their shared blob in memory; no I/O but, when
        the writer needs a new session, opening it. A pipeline encodes the next blob
        while the previous one is PUT. ``records_checked``: see :meth:`validate`."""
        if self._closed:
            raise LlogError("writer is closed")
        prepared = self.validate(groups, records_checked=records_checked)
        self._gate.admit((g.topic, g.partition) for g in prepared)
        created = now_ms()
        packed = pack_groups(prepared, created, self.config.max_blob_bytes)
        # Opened (if needed) before the PUT, as vacuum's proof requires (spec §11), and
        # only for valid input, which must change nothing in etcd.
        session = self._sessions.acquire()
        blob_id = uuid.uuid4().hex
        data_key = self.conn.keys.wal_blob(session.id, blob_id)
        pendings = pendings_of(prepared, packed, blob_id, data_key, created)
        return EncodedBlob(with_digests(prepared, packed), pendings, packed.data, session, packed.crc32)

    def put_encoded(self, encoded: EncodedBlob) -> StagedBlob:
        """PUT an encoded blob (protocol step W1); it is ready for :meth:`commit_staged`."""
        try:
            if self._closed:
                raise LlogError("writer is closed")
            self._puts.put(encoded.data_key, encoded.data, crc32=encoded.crc32)
        except BaseException:
            self._sessions.release(encoded.session)
            raise
        self.conn.metrics.blob_bytes.observe(len(encoded.data))
        if self.config.peer_url is not None:  # other brokers read it from here (llog/store/peers.py)
            self.conn.blob_cache.keep_object(encoded.data_key, encoded.data)
        self._hook("after_put", encoded.data_key)
        return StagedBlob(encoded.groups, encoded.pendings, encoded.data, encoded.session)

    def commit_staged(self, staged: StagedBlob) -> list[Outcome]:
        """The second half of :meth:`append_shared`: commit every group of a staged
        blob (protocol step W2) and return one outcome per group, in order. Callers
        that stage several blobs commit them in staging order, so each partition's
        appends land in the order they were handed in. A group whose blob's session
        ended before its commit fails with :class:`SessionExpired` (nothing of it
        committed); write its records again."""
        try:
            return self._runner.commit_staged(staged)
        finally:
            self._sessions.release(staged.session)

    def release_staged(self, staged: StagedBlob | EncodedBlob) -> None:
        """Done with a blob that another protocol references instead of
        :meth:`commit_staged` (a transaction's stage, spec §15.2 T2), or with one
        encoded and never PUT: its session may end once nothing else of it is in
        flight."""
        self._sessions.release(staged.session)

    def settle_all(self) -> int:
        """Materialize the pending appends this writer left behind; return how many.
        Called by :meth:`close` so a cleanly stopped writer leaves no pending."""
        n = 0
        for (topic, partition), st in list(self._caches.controls.items()):
            if st.control.pending is None:
                continue
            try:
                after = settle(self.conn, topic, partition)
                self._hook("after_settle", st.control.pending.data_key)
                n += 1
                self._caches.remember(topic, partition, after)
            except LlogError as exc:
                log.warning("could not settle %s/%s: %s", topic, partition, exc)
        return n

    def close(self) -> None:
        """Settle what this writer left pending (:meth:`settle_all`), then stop its
        commit threads and end its sessions; idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self.settle_all()
        finally:
            self._pool.shutdown(wait=True)
            self._puts.close()
            self._sessions.close()
            if self._owns_conn:
                self.conn.close()

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _hook(self, point: str, data_key: str) -> None:
        if self._fault is not None:
            self._fault(point, data_key)
