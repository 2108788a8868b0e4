"""The compactor's values in a partition: its cursors (``meta/compaction-cursor``,
``meta/clean-cursor``), the in-flight compaction (``meta/compaction``) and the damaged
WAL entries it passed (``damaged/{end_offset}``)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from llog.codec.etcd_values.maps import MetaFormatError, field_of, optional_str, pack, unpack
from llog.codec.etcd_values.partition import encoding_of


@dataclass(frozen=True)
class CleanCursor:
    """``meta/clean-cursor`` of a compacted topic's partition (spec §10.2): every offset
    below ``offset`` was key-compacted against the keys up to it; ``tombstones`` is how
    many tombstones the last pass kept below it (a pass that may drop them runs once
    they are old enough, even without new records)."""

    offset: int
    tombstones: int = 0

    def encode(self) -> bytes:
        return pack({"offset": self.offset, "tombstones": self.tombstones})

    @classmethod
    def decode(cls, raw: bytes) -> CleanCursor:
        m = unpack(raw)
        return cls(offset=field_of(m, "offset", int), tombstones=field_of(m, "tombstones", int))


@dataclass(frozen=True)
class CompactionCursor:
    """``meta/compaction-cursor``: every offset below ``offset`` is compacted."""

    offset: int

    def encode(self) -> bytes:
        return pack({"offset": self.offset})

    @classmethod
    def decode(cls, raw: bytes) -> CompactionCursor:
        return cls(offset=field_of(unpack(raw), "offset", int))


@dataclass(frozen=True)
class DamagedRange:
    """``damaged/{end_offset:020d}``: a WAL entry whose body does not decode, which the
    compactor passed (its index entry stays; readers of it get ``CorruptBlob``). The
    end offset is the key's."""

    start_offset: int
    data_key: str
    byte_offset: int
    byte_length: int
    reason: str
    found_at_ms: int
    owner: str

    def encode(self) -> bytes:
        return pack(
            {
                "start_offset": self.start_offset,
                "data_key": self.data_key,
                "byte_offset": self.byte_offset,
                "byte_length": self.byte_length,
                "reason": self.reason,
                "found_at_ms": self.found_at_ms,
                "owner": self.owner,
            }
        )

    @classmethod
    def decode(cls, raw: bytes) -> DamagedRange:
        m = unpack(raw)
        d = cls(
            start_offset=field_of(m, "start_offset", int),
            data_key=field_of(m, "data_key", str),
            byte_offset=field_of(m, "byte_offset", int),
            byte_length=field_of(m, "byte_length", int),
            reason=field_of(m, "reason", str),
            found_at_ms=field_of(m, "found_at_ms", int),
            owner=field_of(m, "owner", str),
        )
        if d.start_offset < 0 or d.byte_offset < 0 or d.byte_length < 1:
            raise MetaFormatError("damaged range has a negative offset or an empty slice")
        return d


COMPACTION_STAGES = ("WRITING_COMPACTED_INDEX", "DELETING_OLD", "UPDATING_CURSOR")


@dataclass(frozen=True)
class CompactionRecord:
    """``meta/compaction``: an in-flight compaction, enough for any process to finish it.

    Records ``[start_offset, end_offset]`` were rewritten into ``data_key``;
    ``last_wal_start_offset`` is the first offset of the last WAL entry replaced, so
    recovery can tell whether ``index/{end_offset}`` still holds that WAL entry or
    already the compacted one.
    """

    stage: str
    start_offset: int
    end_offset: int
    last_wal_start_offset: int
    msg_count: int
    data_key: str
    byte_length: int
    max_timestamp: int
    created_at_ms: int
    owner: str
    #: ``"parquet-v1"`` when ``data_key`` is a Parquet file; absent for ``bytes-batch-v1``.
    encoding: str | None = None
    #: A key compaction (spec §10.2): the ``data_key`` of the COMPACTED entry at
    #: ``index/{end_offset}`` this replaces (``last_wal_start_offset`` is then that
    #: entry's first offset), and the cursor does not move; absent for a compaction.
    replaces: str | None = None

    def encode(self) -> bytes:
        m: dict[str, Any] = {
            "stage": self.stage,
            "start_offset": self.start_offset,
            "end_offset": self.end_offset,
            "last_wal_start_offset": self.last_wal_start_offset,
            "msg_count": self.msg_count,
            "data_key": self.data_key,
            "byte_length": self.byte_length,
            "max_timestamp": self.max_timestamp,
            "created_at_ms": self.created_at_ms,
            "owner": self.owner,
        }
        if self.encoding is not None:
            m["encoding"] = self.encoding
        if self.replaces is not None:
            m["replaces"] = self.replaces
        return pack(m)

    @classmethod
    def decode(cls, raw: bytes) -> CompactionRecord:
        m = unpack(raw)
        stage = field_of(m, "stage", str)
        if stage not in COMPACTION_STAGES:
            raise MetaFormatError(f"unknown compaction stage {stage!r}")
        return cls(
            stage=stage,
            start_offset=field_of(m, "start_offset", int),
            end_offset=field_of(m, "end_offset", int),
            last_wal_start_offset=field_of(m, "last_wal_start_offset", int),
            msg_count=field_of(m, "msg_count", int),
            data_key=field_of(m, "data_key", str),
            byte_length=field_of(m, "byte_length", int),
            max_timestamp=field_of(m, "max_timestamp", int),
            created_at_ms=field_of(m, "created_at_ms", int),
            owner=field_of(m, "owner", str),
            encoding=encoding_of(m),
            replaces=optional_str(m, "replaces"),
        )

    def at_stage(self, stage: str) -> CompactionRecord:
        return replace(self, stage=stage)
