"""Read the log back with the SDK :class:`~llog.reader.Reader` and check every
acknowledged record: present at its acknowledged offset, exactly once in its
partition. Every mismatch is listed, none is averaged away."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from llog.connection import Connection
from llog.errors import LlogError
from llog.names import TopicPartition
from llog.reader import Reader
from llog.records import ConsumedRecord


@dataclass(frozen=True)
class Ack:
    topic: str
    partition: int
    start: int
    end: int
    prefix: str
    first: int
    sequence: int
    broker: str
    #: The blob the broker named (``-``: not known) and whether its answer was a retry's
    #: (the producer state's first commit of the batch).
    wal_uri: str = "-"
    duplicate: bool = False

    def ids(self) -> Iterable[tuple[int, str]]:
        """``(offset, record id)`` of every record of the batch."""
        return ((self.start + i, f"{self.prefix}-{self.first + i}") for i in range(self.end - self.start + 1))


@dataclass(frozen=True)
class Mismatch:
    kind: str  # lost | misplaced | duplicated | conflicting_ack
    topic: str
    partition: int
    record_id: str
    acked_offset: int | None
    found_offsets: tuple[int, ...]


@dataclass
class Reconciliation:
    acked_records: int = 0
    verified: int = 0
    lost: int = 0
    misplaced: int = 0
    duplicated: int = 0
    unacked_present: int = 0  # committed but never acknowledged (a batch given up on)
    records_read: int = 0
    partitions: int = 0
    mismatches: list[Mismatch] = field(default_factory=list)
    #: Offsets the log could not serve (a deleted or corrupt object), with the error;
    #: their acknowledged records count as lost.
    unreadable: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.verified == self.acked_records and not self.mismatches and not self.unreadable

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["all_acked_verified"] = self.ok
        return d


def read_acks(paths: Iterable[Path]) -> list[Ack]:
    out = []
    for path in paths:
        with open(path) as f:
            for line in f:
                t, p, s, e, prefix, first, seq, broker, uri, dup = line.rstrip("\n").split("\t")
                out.append(Ack(t, int(p), int(s), int(e), prefix, int(first), int(seq), broker, uri, dup == "1"))
    return out


def reconcile(conn: Connection, acks: Iterable[Ack], partitions: Iterable[TopicPartition]) -> Reconciliation:
    """Check ``acks`` against the log of ``partitions`` (each read from its start)."""
    by_partition: dict[TopicPartition, list[Ack]] = defaultdict(list)
    for a in acks:
        by_partition[(a.topic, a.partition)].append(a)
    r = Reconciliation()
    with Reader(conn) as reader:
        for topic, p in partitions:
            r.partitions += 1
            _check_partition(reader, topic, p, by_partition.pop((topic, p), []), r)
    for (topic, p), rest in by_partition.items():  # acks for partitions nobody read: all lost
        for a in rest:
            for off, rid in a.ids():
                r.acked_records += 1
                r.lost += 1
                r.mismatches.append(Mismatch("lost", topic, p, rid, off, ()))
    return r


def _check_partition(reader: Reader, topic: str, p: int, acks: list[Ack], r: Reconciliation) -> None:
    acked: list[tuple[int, str]] = []
    claimed: dict[int, str] = {}
    for a in acks:
        for off, rid in a.ids():
            acked.append((off, rid))
            if claimed.setdefault(off, rid) != rid:
                r.mismatches.append(Mismatch("conflicting_ack", topic, p, rid, off, ()))
    r.acked_records += len(acked)
    at: dict[int, str] = {}
    where: dict[str, list[int]] = defaultdict(list)
    for rec in _readable(reader, topic, p, r):
        rid = (rec.value or b"").split(b" ", 1)[0].decode(errors="replace")
        at[rec.offset] = rid
        where[rid].append(rec.offset)
        r.records_read += 1
    acked_at = {rid: off for off, rid in acked}
    for off, rid in sorted(acked):
        found = where.get(rid, [])
        if not found:
            r.lost += 1
            r.mismatches.append(Mismatch("lost", topic, p, rid, off, ()))
        elif at.get(off) != rid:
            r.misplaced += 1
            r.mismatches.append(Mismatch("misplaced", topic, p, rid, off, tuple(found)))
        elif len(found) == 1:
            r.verified += 1
        # else: at its offset but with copies elsewhere, listed as duplicated below
    for rid, offs in where.items():
        if len(offs) > 1:
            r.duplicated += len(offs) - 1
            r.mismatches.append(Mismatch("duplicated", topic, p, rid, acked_at.get(rid), tuple(offs)))
        if rid not in acked_at:
            r.unacked_present += 1


def _readable(reader: Reader, topic: str, p: int, r: Reconciliation) -> Iterator[ConsumedRecord]:
    """Every record of the partition that can be read; an offset that raises is noted in
    ``r.unreadable`` and the scan goes on after it, so one lost object cannot hide the
    state of the rest of the log."""
    start, end = reader.high_watermark(topic, p)
    nxt = start
    while nxt < end:
        try:
            for rec in reader.scan(topic, p, nxt, end):
                yield rec
                nxt = rec.offset + 1
            return
        except LlogError as exc:
            r.unreadable.append(f"{topic}/{p}@{nxt}: {type(exc).__name__}: {exc}")
            nxt += 1
