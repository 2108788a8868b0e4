"""A transactional id's record (spec §15.1): read it, and change it by compare-and-swap
on its ``mod_revision``, reading it again after each lost race."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from llog.codec.etcd_values.maps import MetaFormatError
from llog.codec.etcd_values.transaction import COMPLETE_ABORT, TxnRecord
from llog.connection import Connection
from llog.errors import CasConflict, CorruptMetadata, InvalidProducerIdMapping, TransactionFenced
from llog.etcd.operations import KV, Compare, Delete, Get, Op, Put, conflict_pause, mod_revision_is
from llog.state.keys import prefix_range_end

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


class TxnRecords:
    """The records under ``{root}/_transactions/``."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def key(self, transactional_id: str) -> str:
        return self.conn.keys.transaction(transactional_id)

    def read(self, transactional_id: str) -> Read:
        key = self.key(transactional_id)
        kv = self.conn.etcd.get(key)
        return Read(None, 0) if kv is None else Read(decode(key, kv.value), kv.mod_revision)

    def change(self, transactional_id: str, decide: Callable[[Read], Change]) -> object:
        """Apply ``decide``'s change with a CAS, deciding again on a fresh read after
        each lost race (spec §8.3's backoff); ``decide`` raises to refuse. Returns the
        change's result. An unknown outcome raises :class:`CoordinationError`: each
        caller's step is one its client may repeat."""
        key = self.key(transactional_id)
        attempts = self.conn.config.commit_max_attempts
        for attempt in range(attempts):
            got = self.read(transactional_id)
            ch = decide(got)
            ops = list(ch.ops) + ([] if ch.record is None else [Put(key, ch.record.encode())])
            if not ops:
                return ch.result
            r = self.conn.etcd.txn([mod_revision_is(key, got.revision), *ch.compares], ops, ch.failure)
            if r.succeeded:
                return ch.result
            if ch.refused is not None:
                ch.refused(r.responses)
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
