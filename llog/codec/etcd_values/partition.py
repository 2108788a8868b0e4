"""A partition's commit point and its index: ``meta/control`` (:class:`Control`) with
the committed append whose index key is not written yet (:class:`Pending`), and the
``index/{end_offset}`` entries (:class:`IndexEntry`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Final, Literal, cast

from llog.codec import parquet_body
from llog.codec.etcd_values.maps import MetaFormatError, field_of, pack, unpack

OPEN: Final = "OPEN"
FENCED: Final = "FENCED"
WAL: Final = "WAL"
COMPACTED: Final = "COMPACTED"

#: The ``encoding`` a COMPACTED index entry and a compaction record name for a Parquet
#: file (absent: ``bytes-batch-v1``), so a table or a Parquet reader can find the files
#: from the index alone.
PARQUET_ENCODING: Final = parquet_body.ENCODING


def encoding_of(m: dict[str, Any]) -> str | None:
    """The ``encoding`` field of map ``m`` (``None``: absent), which names Parquet if any."""
    enc = m.get("encoding")
    if enc is not None and enc != PARQUET_ENCODING:
        raise MetaFormatError(f"encoding {enc!r} is not {PARQUET_ENCODING!r}")
    return cast("str | None", enc)


@dataclass(frozen=True)
class Pending:
    """A committed append whose index key is not written yet."""

    append_id: str
    start_offset: int
    end_offset: int
    msg_count: int
    data_key: str
    byte_offset: int
    byte_length: int
    created_at_ms: int
    max_timestamp: int

    def to_map(self) -> dict[str, Any]:
        return {
            "append_id": self.append_id,
            "start_offset": self.start_offset,
            "end_offset": self.end_offset,
            "msg_count": self.msg_count,
            "data_key": self.data_key,
            "byte_offset": self.byte_offset,
            "byte_length": self.byte_length,
            "created_at_ms": self.created_at_ms,
            "max_timestamp": self.max_timestamp,
        }

    @classmethod
    def from_map(cls, m: dict[str, Any]) -> Pending:
        p = cls(
            append_id=field_of(m, "append_id", str),
            start_offset=field_of(m, "start_offset", int),
            end_offset=field_of(m, "end_offset", int),
            msg_count=field_of(m, "msg_count", int),
            data_key=field_of(m, "data_key", str),
            byte_offset=field_of(m, "byte_offset", int),
            byte_length=field_of(m, "byte_length", int),
            created_at_ms=field_of(m, "created_at_ms", int),
            max_timestamp=field_of(m, "max_timestamp", int),
        )
        if p.end_offset - p.start_offset + 1 != p.msg_count or p.msg_count <= 0:
            raise MetaFormatError("pending offsets do not match msg_count")
        return p

    def index_entry(self) -> IndexEntry:
        """The index entry that materializes this pending append."""
        return IndexEntry(
            kind=WAL,
            msg_count=self.msg_count,
            data_key=self.data_key,
            byte_offset=self.byte_offset,
            byte_length=self.byte_length,
            created_at_ms=self.created_at_ms,
            max_timestamp=self.max_timestamp,
            append_id=self.append_id,
        )


@dataclass(frozen=True)
class Control:
    """``meta/control``: the partition's commit point."""

    log_state: Literal["OPEN", "FENCED"] = OPEN
    next_offset: int = 0
    log_start_offset: int = 0
    pending: Pending | None = None

    def encode(self) -> bytes:
        return pack(
            {
                "log_state": self.log_state,
                "next_offset": self.next_offset,
                "log_start_offset": self.log_start_offset,
                "pending": None if self.pending is None else self.pending.to_map(),
            }
        )

    @classmethod
    def decode(cls, raw: bytes) -> Control:
        m = unpack(raw)
        state = field_of(m, "log_state", str)
        if state not in (OPEN, FENCED):
            raise MetaFormatError(f"unknown log_state {state!r}")
        pm = m.get("pending")
        if pm is not None and not isinstance(pm, dict):
            raise MetaFormatError("pending is neither null nor a map")
        c = cls(
            log_state=state,
            next_offset=field_of(m, "next_offset", int),
            log_start_offset=field_of(m, "log_start_offset", int),
            pending=None if pm is None else Pending.from_map(pm),
        )
        if c.pending is not None and c.pending.end_offset != c.next_offset - 1:
            raise MetaFormatError("pending does not end at next_offset - 1")
        return c

    def with_changes(self, **changes: Any) -> Control:
        return replace(self, **changes)


@dataclass(frozen=True)
class IndexEntry:
    """``index/{end_offset:020d}``: records ``[end - msg_count + 1, end]`` live in the slice."""

    kind: Literal["WAL", "COMPACTED"]
    msg_count: int
    data_key: str
    byte_offset: int
    byte_length: int
    created_at_ms: int
    max_timestamp: int
    append_id: str | None = None
    #: ``"parquet-v1"`` for a COMPACTED Parquet file; absent for every other body.
    encoding: str | None = None

    def encode(self) -> bytes:
        m: dict[str, Any] = {
            "kind": self.kind,
            "msg_count": self.msg_count,
            "data_key": self.data_key,
            "byte_offset": self.byte_offset,
            "byte_length": self.byte_length,
            "created_at_ms": self.created_at_ms,
            "max_timestamp": self.max_timestamp,
        }
        if self.append_id is not None:
            m["append_id"] = self.append_id
        if self.encoding is not None:  # omitted when absent, like append_id
            m["encoding"] = self.encoding
        return pack(m)

    @classmethod
    def decode(cls, raw: bytes) -> IndexEntry:
        m = unpack(raw)
        kind = field_of(m, "kind", str)
        if kind not in (WAL, COMPACTED):
            raise MetaFormatError(f"unknown index entry kind {kind!r}")
        aid = m.get("append_id")
        if aid is not None and not isinstance(aid, str):
            raise MetaFormatError("append_id is not a string")
        e = cls(
            kind=kind,
            msg_count=field_of(m, "msg_count", int),
            data_key=field_of(m, "data_key", str),
            byte_offset=field_of(m, "byte_offset", int),
            byte_length=field_of(m, "byte_length", int),
            created_at_ms=field_of(m, "created_at_ms", int),
            max_timestamp=field_of(m, "max_timestamp", int),
            append_id=aid,
            encoding=encoding_of(m),
        )
        if e.msg_count <= 0 or e.byte_length <= 0 or e.byte_offset < 0:
            raise MetaFormatError("index entry has a non-positive count or length")
        return e
