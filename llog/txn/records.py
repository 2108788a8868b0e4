"""A transactional id's record (spec §15.1): read it, and change it by compare-and-swap
on its ``mod_revision``, reading it again after each lost race."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from llog.codec.etcd_values import MetaFormatError
from llog.codec.txn_values import COMPLETE_ABORT, TxnRecord
from llog.connection import Connection
from llog.errors import CasConflict, CorruptMetadata, InvalidProducerIdMapping, LlogError, TransactionFenced
from llog.etcd import KV, Compare, Delete, Get, Op, Put, conflict_pause, mod_revision_is
from llog.keys import prefix_range_end

_T = TypeVar("_T")

#: Kafka's epochs are int16; the last one is never handed out (KIP-360).
MAX_EPOCH = 32767


@dataclass(frozen=True)
class Read:
    """A record as read (``None``: absent) and the ``mod_revision`` it was read at."""

    record: TxnRecord | None
    revision: int


@dataclass(frozen=True)
class Change:
    """What one CAS writes: the new record (``None``: leave it) with the other compares
    and ops that ride in the same etcd transaction, and what the caller gets back."""

    record: TxnRecord | None
    result: object = None
    compares: Sequence[Compare] = ()
    ops: Sequence[Op] = ()
    #: Reads of the failure branch, handed to ``refused`` (which raises when one of
    #: ``compares`` broke for good) before the next attempt.
    failure: Sequence[Get] = ()
    refused: Callable[[Sequence[list[KV] | int | None]], None] | None = None


class LastWritten:
    """The record each transactional id was last read or written at by this broker (at
    most ``size`` ids, the oldest forgotten first): :meth:`TxnRecords.change`'s first
    guess, so a producer's steps on one broker cost one etcd round trip each, not two.
    A wrong guess costs nothing but the failed CAS, whose failure branch reads the
    record. Thread-safe."""

    def __init__(self, size: int = 10_000) -> None:
        self.size = size
        self._lock = threading.Lock()
        self._reads: OrderedDict[str, Read] = OrderedDict()

    def get(self, transactional_id: str) -> Read | None:
        with self._lock:
            return self._reads.get(transactional_id)

    def put(self, transactional_id: str, read: Read) -> None:
        with self._lock:
            self._reads[transactional_id] = read
            self._reads.move_to_end(transactional_id)
            while len(self._reads) > self.size:
                self._reads.popitem(last=False)


class TxnRecords:
    """The records under ``{root}/_transactions/`` (``last``: the broker's guesses of
    them, for :meth:`change`)."""

    def __init__(self, conn: Connection, last: LastWritten | None = None) -> None:
        self.conn = conn
        self.last = last

    def key(self, transactional_id: str) -> str:
        return self.conn.keys.transaction(transactional_id)

    def read(self, transactional_id: str) -> Read:
        key = self.key(transactional_id)
        kv = self.conn.etcd.get(key)
        return Read(None, 0) if kv is None else Read(decode(key, kv.value), kv.mod_revision)

    def _remember(self, transactional_id: str, read: Read | None) -> None:
        if self.last is not None and read is not None:
            self.last.put(transactional_id, read)

    def get(self, transactional_id: str) -> Get:
        """The read of the id's record, for :meth:`decoded` of what it returns (several
        records in one round trip)."""
        return Get(self.key(transactional_id))

    def decoded(self, transactional_id: str, kvs: Sequence[KV]) -> Read:
        """The record of :meth:`get`'s answer ``kvs``."""
        return Read(None, 0) if not kvs else Read(decode(self.key(transactional_id), kvs[0].value), kvs[0].mod_revision)

    def change(self, transactional_id: str, decide: Callable[[Read], Change]) -> object:
        """Apply ``decide``'s change with a CAS, deciding again on a fresh read after
        each lost race (spec §8.3's backoff); ``decide`` raises to refuse. Returns the
        change's result. An unknown outcome raises :class:`CoordinationError`: each
        caller's step is one its client may repeat. With :class:`LastWritten`, the first
        attempt decides on the broker's last sight of the record (a refusal is only
        given on a fresh read) and a lost race reads it in the same round trip."""
        key = self.key(transactional_id)
        attempts = self.conn.config.commit_max_attempts
        guess = None if self.last is None else self.last.get(transactional_id)
        got, fresh = (guess, False) if guess is not None else (self.read(transactional_id), True)
        for attempt in range(attempts):
            try:
                ch = decide(got)
            except LlogError:
                if fresh:
                    raise
                got, fresh = self.read(transactional_id), True  # refused on a guess: decide on the record
                continue
            ops = list(ch.ops) + ([] if ch.record is None else [Put(key, ch.record.encode())])
            if not ops:
                if fresh:
                    return ch.result
                got, fresh = self.read(transactional_id), True  # nothing to do, says a guess: make sure
                continue
            r = self.conn.etcd.txn([mod_revision_is(key, got.revision), *ch.compares], ops, [*ch.failure, Get(key)])
            if r.succeeded:
                self._remember(transactional_id, Read(ch.record, r.revision) if ch.record is not None else None)
                return ch.result
            if ch.refused is not None:
                ch.refused(r.responses[:-1])
            seen = r.responses[-1]
            assert isinstance(seen, list)
            raced, got, fresh = fresh, self.decoded(transactional_id, seen), True
            self._remember(transactional_id, got)
            if raced:  # a wrong guess is no race: no pause
                conflict_pause(attempt)
        raise CasConflict(key, attempts)


def staged_data_keys(conn: Connection) -> set[str]:
    """Every object key a staged append of any transaction names (vacuum's first place
    to look, spec §15.3)."""
    prefix = conn.keys.transactions_prefix()
    return {a.data_key for kv in conn.etcd.scan(prefix, prefix_range_end(prefix))
            for a in decode(kv.key, kv.value).staged}


def group_marker_deletes(conn: Connection, transactional_id: str, record: TxnRecord) -> list[Op]:
    """The deletes of the ``transactions/{id}`` keys of the groups with staged offsets."""
    return [Delete(conn.keys.group_transaction(g, transactional_id)) for g in sorted({o.group for o in record.offsets})]


def aborted(conn: Connection, transactional_id: str, record: TxnRecord) -> Change:
    """T4: the change that aborts ``record``'s ongoing transaction."""
    return Change(record.ended(COMPLETE_ABORT), ops=group_marker_deletes(conn, transactional_id, record))


def new_producer_id(conn: Connection) -> int:
    """A Kafka producer id no broker ever gave (spec §3's ``producer-ids`` revision)."""
    return conn.etcd.put(conn.keys.kafka_producer_ids(), b"")


def next_producer(record: TxnRecord, new_id: Callable[[], int]) -> tuple[int, int]:
    """The producer id and epoch that fence ``record``'s producer: the next epoch, or at
    the last one a new producer id (``new_id()``) at epoch 0."""
    return (record.producer_id, record.epoch + 1) if record.epoch + 1 < MAX_EPOCH else (new_id(), 0)


def fenced(conn: Connection, record: TxnRecord) -> TxnRecord:
    """``record`` with its producer fenced (:func:`next_producer`) and its window gone."""
    pid, epoch = next_producer(record, lambda: new_producer_id(conn))
    return replace(record, producer_id=pid, epoch=epoch, sequences=())


def decode(key: str, raw: bytes) -> TxnRecord:
    try:
        return TxnRecord.decode(raw)
    except MetaFormatError as exc:
        raise CorruptMetadata(key, str(exc)) from exc


def check_producer(transactional_id: str, record: TxnRecord | None, producer_id: int, epoch: int) -> TxnRecord:
    """The record, if ``(producer_id, epoch)`` is its current producer; else the
    refusal: no record or another id (:class:`InvalidProducerIdMapping`), an older or
    unknown epoch (:class:`TransactionFenced`)."""
    if record is None or record.producer_id != producer_id:
        raise InvalidProducerIdMapping(
            transactional_id, f"producer id {producer_id} is not the id's "
            f"({'none' if record is None else record.producer_id}): call InitProducerId")
    if record.epoch != epoch:
        raise TransactionFenced(transactional_id, f"producer epoch {epoch} is not the current epoch {record.epoch}: "
                                "a newer instance of the producer took the id, or the transaction timed out")
    return record
