"""Choosing what to compact: one contiguous run of WAL index entries from the one
holding the compaction cursor (which starts exactly there unless DeleteRecords moved
the log start inside it), with each entry's slice (so a damaged one can be told apart
and the run cut before it)."""

from __future__ import annotations

from dataclasses import dataclass

from llog.codec.etcd_values.compaction import CompactionCursor
from llog.codec.etcd_values.maps import MetaFormatError
from llog.codec.etcd_values.partition import WAL
from llog.connection import Connection
from llog.errors import CorruptMetadata
from llog.state.control import decode_index

_PAGE = 256


@dataclass(frozen=True)
class WalSlice:
    """One WAL index entry of a run: its records, slice and key's ``mod_revision``."""

    start_offset: int
    end_offset: int
    data_key: str
    byte_offset: int
    byte_length: int
    max_timestamp: int
    mod_revision: int

    def holds(self, data_key: str, byte_offset: int, byte_length: int) -> bool:
        """Whether this is the slice a :class:`~llog.errors.CorruptBlob` names."""
        return (self.data_key, self.byte_offset, self.byte_length) == (data_key, byte_offset, byte_length)


@dataclass(frozen=True)
class WalRun:
    """WAL entries covering records ``[start_offset, end_offset]``; the last one starts
    at ``last_wal_start_offset`` (its key is ``index/{end_offset}``)."""

    start_offset: int
    end_offset: int
    last_wal_start_offset: int
    entries: int
    byte_length: int
    max_timestamp: int
    slices: tuple[WalSlice, ...] = ()

    @property
    def msg_count(self) -> int:
        return self.end_offset - self.start_offset + 1

    def prefix(self, j: int) -> WalRun:
        """The run of its first ``j`` entries (``0 < j < entries``)."""
        kept = self.slices[:j]
        return WalRun(self.start_offset, kept[-1].end_offset, kept[-1].start_offset, j,
                      sum(s.byte_length for s in kept), max(s.max_timestamp for s in kept), kept)


def read_cursor(conn: Connection, topic: str, partition: int) -> tuple[int | None, int]:
    """``(cursor offset or None if never written, mod_revision or 0)``."""
    kv = conn.etcd.get(conn.keys.compaction_cursor(topic, partition))
    if kv is None:
        return None, 0
    try:
        return CompactionCursor.decode(kv.value).offset, kv.mod_revision
    except MetaFormatError as exc:
        raise CorruptMetadata(kv.key, str(exc)) from exc


def select_run(
    conn: Connection,
    topic: str,
    partition: int,
    cursor: int,
    *,
    target_bytes: int,
    max_records: int,
    aged_revision: int,
) -> WalRun | None:
    """The run to compact next, or ``None`` when there is nothing ready.

    Takes WAL entries in offset order from the one starting at ``cursor`` while they
    are contiguous, old enough (their index key's ``mod_revision`` is at most
    ``aged_revision``, see :mod:`compactor.revision_clock`: no writer's clock counts),
    and the run stays within ``target_bytes`` slice bytes and ``max_records`` records
    (the first entry is taken whatever its size, so the cursor never sticks behind a
    large append).
    """
    keys, etcd = conn.keys, conn.etcd
    end_key = keys.index_range_end(topic, partition)
    start_key = keys.index(topic, partition, cursor)
    nxt = cursor
    entries = size = 0
    last_start = max_ts = -1
    slices: list[WalSlice] = []
    while True:
        kvs = etcd.range(start_key, end_key, limit=_PAGE)
        for kv in kvs:
            e = decode_index(kv.key, kv.value)
            e_end = keys.end_offset_of(kv.key)
            e_start = e_end - e.msg_count + 1
            # The first entry holds the cursor; it starts below it only when DeleteRecords
            # moved the log start inside it (the run then starts at the log start).
            contiguous = e_start <= nxt if not entries else e_start == nxt
            if not contiguous or e.kind != WAL or kv.mod_revision > aged_revision:
                return _run(cursor, nxt, last_start, entries, size, max_ts, slices)
            if entries and (size + e.byte_length > target_bytes or e_end - cursor + 1 > max_records):
                return _run(cursor, nxt, last_start, entries, size, max_ts, slices)
            slices.append(WalSlice(e_start, e_end, e.data_key, e.byte_offset, e.byte_length, e.max_timestamp,
                                   kv.mod_revision))
            entries += 1
            size += e.byte_length
            last_start = e_start
            max_ts = max(max_ts, e.max_timestamp)
            nxt = e_end + 1
        if len(kvs) < _PAGE:
            return _run(cursor, nxt, last_start, entries, size, max_ts, slices)
        start_key = kvs[-1].key + "\0"


def _run(
    cursor: int, nxt: int, last_start: int, entries: int, size: int, max_ts: int, slices: list[WalSlice]
) -> WalRun | None:
    if entries == 0:
        return None
    return WalRun(cursor, nxt - 1, last_start, entries, size, max_ts, tuple(slices))
