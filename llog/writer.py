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

Every blob is written under the writer's current session (:mod:`llog.session`) and its
commit transaction compares the session key's create_revision: a writer paused past
its session's TTL gets :class:`SessionExpired` instead of committing a blob that vacuum
may have deleted. The compare rides in the same transaction, so it costs no round trip.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar, cast

from llog.backpressure import UncompactedKeysGate
from llog.bounded import BoundedCache, PartitionLocks
from llog.codec import batch, blob
from llog.codec.meta import FENCED, Control, MetaFormatError, Pending, ProducerState
from llog.commit_resolution import find_committed
from llog.config import LlogConfig
from llog.connection import Connection
from llog.control import (
    ControlState,
    decode_control,
    materialize_ops,
    now_ms,
    read_control,
    settle,
)
from llog.errors import (
    AmbiguousCommit,
    CasConflict,
    CoordinationError,
    CorruptMetadata,
    EtcdSpaceExhausted,
    Fenced,
    InvalidInput,
    InvalidRecord,
    LlogError,
    RecordTooLarge,
    SequenceError,
    SessionExpired,
)
from llog.etcd import KV, Compare, Get, Op, Put, mod_revision_is
from llog.names import TOPIC_NAME_RE, TopicPartition, check_partition, check_topic
from llog.records import AppendGroup, Headers, Record
from llog.session import Session, Sessions

log = logging.getLogger(__name__)

_T = TypeVar("_T")

#: Called at protocol points ("after_put", "after_commit", "after_settle") with the
#: data key; fault-injection tests use it to kill the process at an exact step.
FaultHook = Callable[[str, str], None]


@dataclass(frozen=True)
class AppendResult:
    """A committed partition-append: records ``[start_offset, end_offset]``."""

    topic: str
    partition: int
    start_offset: int
    end_offset: int
    count: int
    index_key: str
    data_key: str
    append_id: str
    ok: bool = True


@dataclass(frozen=True)
class AppendFailure:
    """A partition-append that did not commit (nothing of it is readable)."""

    topic: str
    partition: int
    error: LlogError
    ok: bool = False


Outcome = AppendResult | AppendFailure


@dataclass(frozen=True)
class _Prepared:
    topic: str
    partition: int
    records: tuple[Record, ...]
    #: The same records as columns, for the encoder, with their lengths if measured.
    columns: batch.RecordColumns
    lengths: batch.Lengths | None
    max_timestamp: int
    #: Append time, for the records that carry no timestamp of their own.
    stamp: int
    producer: _Producer | None = None


@dataclass(frozen=True)
class _Plan:
    """One partition's commit transaction, built from a control state: the pending it
    sets, the new control value, and the compares/ops/failure reads of the CAS."""

    mine: Pending
    compares: list[Compare]
    ops: list[Op]
    failure: list[Op]
    new: Control
    new_ps: ProducerState | None


#: Partitions per combined commit transaction: each brings up to 2 compares and 3 puts
#: (plus one session compare and one failure read per transaction), and etcd refuses a
#: transaction with more than 128 compares, success ops or failure ops (``--max-txn-ops``).
TXN_PARTITIONS = 32

#: Partitions (and producer keys) whose state and lock a writer keeps; the least
#: recently committed are forgotten beyond this (the next commit there reads first).
CACHE_PARTITIONS = 65_536


@dataclass(frozen=True)
class _Producer:
    """An idempotent group's producer id and sequence."""

    id: str
    sequence: int


@dataclass(frozen=True)
class EncodedBlob:
    """A shared blob built in memory and not yet PUT (:meth:`Writer.encode_shared`):
    its groups, their pending values (offsets still zero) and the blob's bytes."""

    groups: tuple[_Prepared, ...]
    pendings: tuple[Pending, ...]
    data: bytes
    #: The session the blob is keyed under, whose key its commit compares.
    session: Session
    #: CRC-32 of ``data`` when the codec could combine it from the bodies' CRCs,
    #: handed to the store so it need not hash the body again.
    crc32: int | None

    @property
    def data_key(self) -> str:
        return self.pendings[0].data_key


@dataclass(frozen=True)
class StagedBlob:
    """A shared blob that is PUT but not committed: its groups and, per group, the
    pending value (offsets still zero) its commit will fill in."""

    groups: tuple[_Prepared, ...]
    pendings: tuple[Pending, ...]
    #: The blob as PUT; :meth:`body` slices one group's encoded records out of it.
    data: bytes
    session: Session

    @property
    def data_key(self) -> str:
        return self.pendings[0].data_key

    def body(self, i: int) -> memoryview:
        p = self.pendings[i]
        return memoryview(self.data)[p.byte_offset : p.byte_offset + p.byte_length]


@dataclass(frozen=True)
class _ProducerSnapshot:
    """A producer key's value (``None``: absent) and its mod_revision (0: absent)."""

    state: ProducerState | None
    mod_revision: int


def _check_producer(topic: str, partition: int, producer_id: object, sequence: object) -> _Producer | None:
    if producer_id is None and sequence is None:
        return None
    # The id becomes an etcd key segment, so it follows the topic naming rule.
    if not isinstance(producer_id, str) or TOPIC_NAME_RE.fullmatch(producer_id) is None:
        raise InvalidInput(
            f"producer_id for {topic}/{partition} must match [A-Za-z0-9._-]{{1,249}}, got {producer_id!r}"
        )
    if isinstance(sequence, bool) or not isinstance(sequence, int) or not 0 <= sequence < 2**63:
        raise InvalidInput(f"sequence for {topic}/{partition} must be an int >= 0 with a producer_id, got {sequence!r}")
    return _Producer(producer_id, sequence)


def _decode_producer(key: str, kv: KV | None) -> _ProducerSnapshot:
    if kv is None:
        return _ProducerSnapshot(None, 0)
    try:
        return _ProducerSnapshot(ProducerState.decode(kv.value), kv.mod_revision)
    except MetaFormatError as exc:
        raise CorruptMetadata(key, str(exc)) from exc


def normalize_record(topic: str, partition: int, r: object, limit: int) -> Record:
    """Check one record's types and size. A missing timestamp stays unset: the writer
    stamps append time for the whole body at encode time."""
    # Fast paths for the common cases (exact types, no headers); same results as below.
    if type(r) is bytes and len(r) <= limit:
        return Record(r)
    if type(r) is Record and r.headers == ():
        value, key, ts = r.value, r.key, r.timestamp
        if (
            type(value) is bytes
            and (key is None or type(key) is bytes)
            and len(value) + (len(key) if key is not None else 0) <= limit
            and (ts is None or (type(ts) is int and 0 <= ts < 2**63))
        ):
            return r
    if isinstance(r, (bytes, bytearray, memoryview)):
        r = Record(bytes(r))
    if not isinstance(r, Record):
        raise InvalidRecord(
            f"record for {topic}/{partition} must be bytes or llog.Record, got {type(r).__name__}"
        )
    value, key, ts, headers = r.value, r.key, r.timestamp, r.headers
    if isinstance(value, (bytearray, memoryview)):
        value = bytes(value)
    if not isinstance(value, bytes):
        raise InvalidRecord(f"record value for {topic}/{partition} must be bytes, got {type(value).__name__}")
    if key is not None:
        if isinstance(key, (bytearray, memoryview)):
            key = bytes(key)
        if not isinstance(key, bytes):
            raise InvalidRecord(f"record key for {topic}/{partition} must be bytes or None, got {type(key).__name__}")
    if ts is not None and (isinstance(ts, bool) or not isinstance(ts, int) or ts < 0 or ts >= 2**63):
        raise InvalidRecord(f"record timestamp for {topic}/{partition} must be an int >= 0 (ms), got {ts!r}")
    size = len(value) + (len(key) if key is not None else 0)
    norm_headers: Headers = ()
    if headers:
        try:
            items = tuple(headers)
        except TypeError:
            raise InvalidRecord(f"record headers for {topic}/{partition} must be a sequence of (str, bytes)") from None
        checked = []
        for h in items:
            if (
                not isinstance(h, tuple) or len(h) != 2 or not isinstance(h[0], str)
                or not isinstance(h[1], (bytes, bytearray))
            ):
                raise InvalidRecord(
                    f"record header for {topic}/{partition} must be a (str, bytes) pair, got {h!r}"
                )
            hk = h[0].encode()
            size += len(hk) + len(h[1])
            checked.append((h[0], bytes(h[1])))
        norm_headers = tuple(checked)
    if size > limit:
        raise RecordTooLarge(topic, partition, size, limit)
    if (value, key, ts, norm_headers) == (r.value, r.key, r.timestamp, r.headers):
        return r
    return Record(value, key, ts, norm_headers)


_NONE = type(None)


def check_records(
    topic: str, partition: int, records: Sequence[object], limit: int
) -> tuple[tuple[Record, ...], batch.RecordColumns, batch.Lengths | None]:
    """:func:`normalize_record` over one group (timestamps left unset), the records as
    columns for :func:`batch.encode_columns`, and (on the fast path) the byte lengths
    the size check measured, which the encoder reuses. When every record is an exact
    :class:`Record` of bytes without headers the checks run column by column: one
    C-level pass per field instead of a Python call per record (which cost a third of a
    2 MiB append's CPU), and the encoder reuses the same columns."""
    given = tuple(records)
    n = len(given)
    if n and set(map(type, given)) == {Record}:
        recs = cast("tuple[Record, ...]", given)
        values = [r.value for r in recs]
        keys = [r.key for r in recs]
        stamps = [r.timestamp for r in recs]
        key_types = set(map(type, keys))
        if (
            set(map(type, values)) == {bytes}
            and key_types <= {bytes, _NONE}
            and [r.headers for r in recs].count(()) == n
            and (stamps.count(None) == n or _stamps_ok(stamps))
        ):
            value_lengths = list(map(len, values))
            if _NONE in key_types:
                key_lengths = [0 if k is None else len(k) for k in keys]
            else:
                key_lengths = list(map(len, cast("list[bytes]", keys)))
            if max(value_lengths) + max(key_lengths) <= limit:
                return recs, (stamps, keys, values, None), (value_lengths, key_lengths)
    checked = tuple([normalize_record(topic, partition, r, limit) for r in given])
    return checked, batch.columns_of(checked), None


def _stamps_ok(stamps: list[int | None]) -> bool:
    if not set(map(type, stamps)) <= {int, _NONE}:
        return False
    given = [t for t in stamps if t is not None]
    return min(given) >= 0 and max(given) < 2**63


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
        self._cache: BoundedCache[TopicPartition, ControlState] = BoundedCache(CACHE_PARTITIONS)
        # Producer key -> its last known value, like the control cache.
        self._producers: BoundedCache[str, _ProducerSnapshot] = BoundedCache(CACHE_PARTITIONS)
        self._cache_lock = threading.Lock()
        # One commit at a time per partition within this writer: concurrent callers then
        # CAS against each other's cached result instead of conflicting and re-reading.
        self._partition_locks = PartitionLocks(CACHE_PARTITIONS)
        self._sessions = Sessions(self.conn, "writer")
        self._pool = ThreadPoolExecutor(commit_workers, thread_name_prefix="llog-commit")
        self._gate = UncompactedKeysGate(self.conn)
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
        groups: Iterable[AppendGroup | tuple[str, int, Sequence[Record | bytes]]],
        *,
        records_checked: bool = False,
    ) -> list[_Prepared]:
        """Check every group (names, partitions against the topic, record types and
        sizes) without writing anything; raise the first problem found. With
        ``records_checked`` the records are taken as :func:`check_records` returned
        them (the :class:`~llog.producer.BatchingProducer` checks each send), and only
        the groups themselves are checked."""
        now = now_ms()
        limit = self.config.max_record_bytes
        prepared: list[_Prepared] = []
        for g in groups:
            if isinstance(g, tuple) and len(g) == 3:
                g = AppendGroup(*g)
            if not isinstance(g, AppendGroup):
                raise InvalidInput(f"expected AppendGroup, got {type(g).__name__}")
            topic = check_topic(g.topic)
            partition = check_partition(topic, g.partition)
            if isinstance(g.records, (bytes, str)) or not isinstance(g.records, Sequence):
                raise InvalidInput(f"records for {topic}/{partition} must be a sequence")
            if len(g.records) == 0:
                raise InvalidInput(f"empty group for {topic}/{partition}")
            if records_checked:
                recs, lengths = cast("tuple[Record, ...]", tuple(g.records)), None
                cols = batch.columns_of(recs)
            else:
                recs, cols, lengths = check_records(topic, partition, g.records, limit)
            producer = _check_producer(topic, partition, g.producer_id, g.sequence)
            self.conn.check_partition(topic, partition)
            stamps = cols[0]
            max_ts = now if stamps.count(None) == len(stamps) else max([now if t is None else t for t in stamps])
            prepared.append(_Prepared(topic, partition, recs, cols, lengths, max_ts, now, producer))
        if not prepared:
            raise InvalidInput("append_shared needs at least one group")
        return prepared

    def append_shared(
        self, groups: Iterable[AppendGroup | tuple[str, int, Sequence[Record | bytes]]]
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
        groups: Iterable[AppendGroup | tuple[str, int, Sequence[Record | bytes]]],
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
        groups: Iterable[AppendGroup | tuple[str, int, Sequence[Record | bytes]]],
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
        bodies = [
            blob.BlobBody(g.topic, g.partition, len(g.records), batch.encode_columns(g.columns, g.stamp, g.lengths))
            for g in prepared
        ]
        packed = blob.pack(bodies, created)
        if len(packed.data) > self.config.max_blob_bytes:
            raise InvalidInput(
                f"shared blob of {len(packed.data)} bytes exceeds max_blob_bytes "
                f"{self.config.max_blob_bytes}; split the call"
            )
        # Opened (if needed) before the PUT, as vacuum's proof requires (spec §11), and
        # only for valid input, which must change nothing in etcd.
        session = self._sessions.acquire()
        blob_id = uuid.uuid4().hex
        data_key = self.conn.keys.wal_blob(session.id, blob_id)
        pendings = tuple(
            Pending(
                append_id=f"{blob_id}:{i}",
                start_offset=0,
                end_offset=0,
                msg_count=len(g.records),
                data_key=data_key,
                byte_offset=part.body_offset,
                byte_length=part.body_length,
                created_at_ms=created,
                max_timestamp=g.max_timestamp,
            )
            for i, (g, part) in enumerate(zip(prepared, packed.parts, strict=True))
        )
        return EncodedBlob(tuple(prepared), pendings, packed.data, session, packed.crc32)

    def put_encoded(self, encoded: EncodedBlob) -> StagedBlob:
        """PUT an encoded blob (protocol step W1); it is ready for :meth:`commit_staged`."""
        try:
            if self._closed:
                raise LlogError("writer is closed")
            self.conn.store.put(encoded.data_key, encoded.data, crc32=encoded.crc32)
        except BaseException:
            self._sessions.release(encoded.session)
            raise
        self.conn.metrics.blob_bytes.observe(len(encoded.data))
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
            return self._commit_staged(staged)
        finally:
            self._sessions.release(staged.session)

    def _commit_staged(self, staged: StagedBlob) -> list[Outcome]:
        prepared = staged.groups
        # Groups of one partition commit in order; different partitions in parallel.
        by_partition: dict[TopicPartition, list[int]] = {}
        for i, g in enumerate(prepared):
            by_partition.setdefault((g.topic, g.partition), []).append(i)
        outcomes: list[Outcome | None] = [None] * len(prepared)
        unknown: dict[int, int] = {}
        if len(by_partition) > 1 and len(by_partition) == len(prepared):
            self._commit_together(staged, outcomes, unknown)

        def run(indexes: list[int]) -> None:
            for i in indexes:
                if outcomes[i] is None:
                    g = prepared[i]
                    outcomes[i] = self._commit(
                        g.topic, g.partition, staged.pendings[i], g.producer, staged.session, unknown.get(i)
                    )

        tasks = [ix for ix in by_partition.values() if any(outcomes[i] is None for i in ix)]
        if len(tasks) == 1:
            run(tasks[0])
        elif tasks:
            for f in [self._pool.submit(run, t) for t in tasks]:
                f.result()
        return [o for o in outcomes if o is not None]

    def settle_all(self) -> int:
        """Materialize the pending appends this writer left behind; return how many.
        Called by :meth:`close` so a cleanly stopped writer leaves no pending."""
        n = 0
        for (topic, partition), st in list(self._cache.items()):
            if st.control.pending is None:
                continue
            try:
                after = settle(self.conn, topic, partition)
                self._hook("after_settle", st.control.pending.data_key)
                n += 1
                self._remember(topic, partition, after)
            except LlogError as exc:
                log.warning("could not settle %s/%s: %s", topic, partition, exc)
        return n

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self.settle_all()
        finally:
            self._pool.shutdown(wait=True)
            self._sessions.close()
            if self._owns_conn:
                self.conn.close()

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the commit protocol ---------------------------------------------------
    def _hook(self, point: str, data_key: str) -> None:
        if self._fault is not None:
            self._fault(point, data_key)

    def _remember(self, topic: str, partition: int, st: ControlState) -> None:
        with self._cache_lock:
            self._cache[(topic, partition)] = st

    def _commit_together(self, staged: StagedBlob, outcomes: list[Outcome | None], unknown: dict[int, int]) -> None:
        """Commit every partition of the blob whose control (and producer) state this
        writer has cached in one etcd transaction per :data:`TXN_PARTITIONS`: each
        partition keeps its own mod_revision compare, so the transaction commits all of
        them or none. Fills ``outcomes`` for the committed ones; a conflict refreshes the
        cache from the failure reads and leaves the partitions to the one-by-one path,
        an unknown outcome records the offset tried in ``unknown`` for it to resolve."""
        order = sorted(range(len(staged.groups)), key=lambda i: (staged.groups[i].topic, staged.groups[i].partition))
        # In (topic, partition) order: no deadlock between writers' threads.
        with self._partition_locks.hold([(staged.groups[i].topic, staged.groups[i].partition) for i in order]):
            plans: list[tuple[int, _Plan]] = []
            for i in order:
                g = staged.groups[i]
                st = self._cache.get((g.topic, g.partition))
                if st is None or st.control.log_state == FENCED:
                    continue
                ps = None
                if g.producer is not None:
                    ps = self._producers.get(self.conn.keys.producer(g.topic, g.partition, g.producer.id))
                    n = staged.pendings[i].msg_count
                    if ps is None or _sequence_verdict(g.topic, g.partition, g.producer, ps.state, n) is not None:
                        continue
                plans.append((i, self._plan(g.topic, g.partition, staged.pendings[i], st, g.producer, ps)))
            for c in range(0, len(plans), TXN_PARTITIONS):
                chunk = plans[c : c + TXN_PARTITIONS]
                if len(chunk) > 1:
                    self._commit_chunk(staged, chunk, outcomes, unknown)

    def _commit_chunk(
        self,
        staged: StagedBlob,
        chunk: list[tuple[int, _Plan]],
        outcomes: list[Outcome | None],
        unknown: dict[int, int],
    ) -> None:
        conn, keys, session = self.conn, self.conn.keys, staged.session
        try:
            r = conn.etcd.txn(
                [*(c for _, p in chunk for c in p.compares), session.compare()],
                [o for _, p in chunk for o in p.ops],
                [
                    *(Get(keys.control(staged.groups[i].topic, staged.groups[i].partition)) for i, _ in chunk),
                    Get(session.key),
                ],
            )
        except EtcdSpaceExhausted as exc:  # refused before it applied: a definite failure
            conn.metrics.appends.labels(type(exc).__name__).inc(len(chunk))
            for i, _ in chunk:
                outcomes[i] = AppendFailure(staged.groups[i].topic, staged.groups[i].partition, exc)
            return
        except CoordinationError as exc:
            log.warning("combined commit of %d partitions has an unknown outcome: %s", len(chunk), exc)
            with self._cache_lock:
                for i, p in chunk:
                    unknown[i] = p.mine.start_offset
                    g = staged.groups[i]
                    self._cache.pop((g.topic, g.partition), None)
                    if g.producer is not None:
                        self._producers.pop(keys.producer(g.topic, g.partition, g.producer.id), None)
            return
        if not r.succeeded:
            conn.metrics.commit_conflicts.inc()
            *controls, held = r.responses
            for (i, _), got in zip(chunk, controls, strict=True):
                g = staged.groups[i]
                assert isinstance(got, list)
                self._remember(g.topic, g.partition, decode_control(keys.control(g.topic, g.partition),
                                                                    got[0] if got else None))
            assert isinstance(held, list)
            if not session.holds(held):  # a definite failure: the blob can never commit
                for i, p in chunk:
                    g = staged.groups[i]
                    conn.metrics.appends.labels(SessionExpired.__name__).inc()
                    outcomes[i] = AppendFailure(
                        g.topic, g.partition, SessionExpired(g.topic, g.partition, session.id, p.mine.data_key)
                    )
            return
        for _, p in chunk:
            self._hook("after_commit", p.mine.data_key)
        for i, p in chunk:
            g = staged.groups[i]
            if p.new_ps is not None and g.producer is not None:
                pkey = keys.producer(g.topic, g.partition, g.producer.id)
                self._producers[pkey] = _ProducerSnapshot(p.new_ps, r.revision)
        acked = self._ack_many([
            (staged.groups[i].topic, staged.groups[i].partition, p.mine, ControlState(p.new, r.revision))
            for i, p in chunk
        ])
        for (i, _), res in zip(chunk, acked, strict=True):
            outcomes[i] = res

    def _plan(
        self,
        topic: str,
        partition: int,
        pending: Pending,
        st: ControlState,
        producer: _Producer | None,
        ps: _ProducerSnapshot | None,
    ) -> _Plan:
        """The commit transaction of ``pending`` against control state ``st``: the
        previous pending materialized, the new one set, CAS on the control's (and the
        producer key's) mod_revision."""
        conn, keys = self.conn, self.conn.keys
        ckey = keys.control(topic, partition)
        ctl, n = st.control, pending.msg_count
        start = ctl.next_offset
        mine = Pending(
            pending.append_id, start, start + n - 1, n, pending.data_key,
            pending.byte_offset, pending.byte_length, pending.created_at_ms,
            pending.max_timestamp,
        )
        ops: list[Op] = materialize_ops(conn, topic, partition, ctl.pending) if ctl.pending else []
        new = Control(ctl.log_state, start + n, ctl.log_start_offset, mine)
        ops.append(Put(ckey, new.encode()))
        compares: list[Compare] = [mod_revision_is(ckey, st.mod_revision)]
        failure: list[Op] = [Get(ckey)]
        new_ps: ProducerState | None = None
        if producer is not None and ps is not None:
            pkey = keys.producer(topic, partition, producer.id)
            new_ps = ProducerState(
                producer.sequence, start, start + n - 1, pending.append_id, pending.data_key, now_ms()
            )
            compares.append(mod_revision_is(pkey, ps.mod_revision))
            ops.append(Put(pkey, new_ps.encode()))
            failure.append(Get(pkey))
        return _Plan(mine, compares, ops, failure, new, new_ps)

    def _commit(
        self,
        topic: str,
        partition: int,
        pending: Pending,
        producer: _Producer | None,
        session: Session,
        unknown_start: int | None = None,
    ) -> Outcome:
        try:
            with self._partition_locks.hold([(topic, partition)]):
                return self._commit_once(topic, partition, pending, producer, session, unknown_start)
        except LlogError as exc:
            self.conn.metrics.appends.labels(type(exc).__name__).inc()
            with self._cache_lock:
                self._cache.pop((topic, partition), None)
                if producer is not None:
                    self._producers.pop(self.conn.keys.producer(topic, partition, producer.id), None)
            return AppendFailure(topic, partition, exc)

    def _commit_once(
        self,
        topic: str,
        partition: int,
        pending: Pending,
        producer: _Producer | None,
        session: Session,
        unknown_start: int | None,
    ) -> AppendResult:
        conn, keys = self.conn, self.conn.keys
        ckey = keys.control(topic, partition)
        pkey = keys.producer(topic, partition, producer.id) if producer is not None else ""
        n = pending.msg_count
        fresh = (topic, partition) not in self._cache
        pfresh = pkey not in self._producers
        if unknown_start is None:
            st = self._cache.get((topic, partition)) or read_control(conn, topic, partition)
            ps = self._producer_state(pkey) if producer is not None else None
        else:  # a combined commit's outcome is unknown: only what etcd says now counts
            where = (topic, partition, pending)
            st = self._reread(lambda: read_control(conn, topic, partition), *where)
            ps = self._reread(lambda: self._producer_state(pkey, cached=False), *where) if producer else None
            fresh = pfresh = True
        # Offsets an earlier attempt with an unknown outcome would have taken.
        unknown_starts: list[int] = [] if unknown_start is None else [unknown_start]
        attempts = self.config.commit_max_attempts
        for attempt in range(attempts):
            ctl = st.control
            if producer is not None and ps is not None:
                verdict = _sequence_verdict(topic, partition, producer, ps.state, n)
                if verdict is not None and not pfresh:
                    # Only fresh state may refuse or short-circuit; a cached one may lag
                    # behind another writer (or our own lost reply).
                    ps, pfresh = self._producer_state(pkey, cached=False), True
                    continue
                if isinstance(verdict, ProducerState):
                    if fresh:
                        self._remember(topic, partition, st)
                    return self._duplicate(topic, partition, verdict)
                if verdict is not None:
                    raise verdict
            else:
                found = find_committed(
                    conn, topic, partition, pending.append_id, ctl, st.mod_revision, unknown_starts, n
                )
                if found is not None:
                    return self._ack(topic, partition, found, st)
            if ctl.log_state == FENCED:
                if fresh:
                    raise Fenced(topic, partition)
                st, fresh = read_control(conn, topic, partition), True
                continue
            plan = self._plan(topic, partition, pending, st, producer, ps)
            start, new, new_ps, mine = plan.mine.start_offset, plan.new, plan.new_ps, plan.mine
            try:
                r = conn.etcd.txn([*plan.compares, session.compare()], plan.ops, [*plan.failure, Get(session.key)])
            except EtcdSpaceExhausted:  # refused before it applied: definite, and so is a retry
                raise
            except CoordinationError as exc:
                log.warning("commit of %s to %s/%s has an unknown outcome: %s",
                            pending.append_id, topic, partition, exc)
                unknown_starts.append(start)
                where = (topic, partition, pending)
                st, fresh = self._reread(lambda: read_control(conn, topic, partition), *where), True
                if producer is not None:
                    ps, pfresh = self._reread(lambda: self._producer_state(pkey, cached=False), *where), True
                continue
            if r.succeeded:
                after = ControlState(new, r.revision)
                self._hook("after_commit", pending.data_key)
                if new_ps is not None:
                    self._producers[pkey] = _ProducerSnapshot(new_ps, r.revision)
                return self._ack(topic, partition, mine, after)
            conn.metrics.commit_conflicts.inc()
            got = r.responses[0]
            assert isinstance(got, list)
            st, fresh = decode_control(ckey, got[0] if got else None), True
            if producer is not None:
                pgot = r.responses[1]
                assert isinstance(pgot, list)
                ps, pfresh = _decode_producer(pkey, pgot[0] if pgot else None), True
            held = r.responses[-1]
            assert isinstance(held, list)
            if not session.holds(held):
                return self._session_ended(topic, partition, pending, producer, session, st, ps, unknown_starts)
            if attempt >= 2:
                # Contended: back off a little, jittered, so writers stop colliding.
                time.sleep(random.uniform(0, min(0.05, 0.001 * 2 ** min(attempt, 6))))
        if unknown_starts:
            raise AmbiguousCommit(
                f"commit of append {pending.append_id} to {topic}/{partition} has an unknown outcome "
                f"and {attempts} attempts did not resolve it: the append may exist"
            )
        raise CasConflict(ckey, attempts)

    def _session_ended(
        self,
        topic: str,
        partition: int,
        pending: Pending,
        producer: _Producer | None,
        session: Session,
        st: ControlState,
        ps: _ProducerSnapshot | None,
        unknown_starts: list[int],
    ) -> AppendResult:
        """The commit failed because the blob's session ended: no attempt can commit
        from now on. ``st`` and ``ps`` were read in the same transaction as the session
        key, so an earlier attempt with an unknown outcome either shows in them (then
        that is the result) or never committed (spec §8.5)."""
        if producer is not None and ps is not None:
            verdict = _sequence_verdict(topic, partition, producer, ps.state, pending.msg_count)
            if isinstance(verdict, ProducerState):
                self._remember(topic, partition, st)
                return self._duplicate(topic, partition, verdict)
        else:
            found = find_committed(
                self.conn, topic, partition, pending.append_id, st.control, st.mod_revision, unknown_starts,
                pending.msg_count,
            )
            if found is not None:
                return self._ack(topic, partition, found, st)
        raise SessionExpired(topic, partition, session.id, pending.data_key)

    def _producer_state(self, pkey: str, *, cached: bool = True) -> _ProducerSnapshot:
        """The producer key's state: this writer's cached copy, else one read."""
        if cached and pkey in self._producers:
            return self._producers[pkey]
        return _decode_producer(pkey, self.conn.etcd.get(pkey))

    def _reread(self, read: Callable[[], _T], topic: str, partition: int, pending: Pending) -> _T:
        """Read after an unknown outcome, with backoff; if etcd stays unreachable the
        outcome stays unknown, which is :class:`AmbiguousCommit`, not a plain failure."""
        for delay in (0.05, 0.1, 0.2, 0.4, 0.8, 1.6, None):
            try:
                return read()
            except CoordinationError as exc:
                if delay is None:
                    raise AmbiguousCommit(
                        f"commit of append {pending.append_id} to {topic}/{partition} has an unknown "
                        f"outcome and etcd is unreachable: the append may exist ({exc})"
                    ) from exc
                time.sleep(delay)
        raise AssertionError("unreachable")

    def _ack(self, topic: str, partition: int, p: Pending, st: ControlState) -> AppendResult:
        [res] = self._ack_many([(topic, partition, p, st)])
        return res

    def _ack_many(self, acks: list[tuple[str, int, Pending, ControlState]]) -> list[AppendResult]:
        """Record committed appends: each partition's new state in the cache (one lock
        round for all), the metrics once, and each append's result."""
        with self._cache_lock:
            for topic, partition, _, st in acks:
                self._cache[(topic, partition)] = st
        self.conn.metrics.appends.labels("ok").inc(len(acks))
        self.conn.metrics.append_records.inc(sum(p.msg_count for _, _, p, _ in acks))
        return [self._result(topic, partition, p) for topic, partition, p, _ in acks]

    def _duplicate(self, topic: str, partition: int, ps: ProducerState) -> AppendResult:
        """A retried batch that already committed: its original result, nothing written."""
        self.conn.metrics.appends.labels("duplicate").inc()
        return self._result(topic, partition, ps)

    def _result(self, topic: str, partition: int, p: Pending | ProducerState) -> AppendResult:
        """The result of the append that ``p`` (its pending, or the producer state that
        recorded it) describes."""
        return AppendResult(
            topic=topic,
            partition=partition,
            start_offset=p.start_offset,
            end_offset=p.end_offset,
            count=p.msg_count,
            index_key=self.conn.keys.index(topic, partition, p.end_offset),
            data_key=p.data_key,
            append_id=p.append_id,
        )


def _sequence_verdict(
    topic: str, partition: int, producer: _Producer, last: ProducerState | None, n: int
) -> ProducerState | SequenceError | None:
    """``None``: append; the last state: a retry of the committed batch; else the error.

    An unknown producer may start at any sequence."""
    if last is None or producer.sequence == last.sequence + 1:
        return None
    if producer.sequence == last.sequence and n == last.msg_count:
        return last
    return SequenceError(topic, partition, producer.id, last.sequence + 1, producer.sequence)

