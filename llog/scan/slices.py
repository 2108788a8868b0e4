"""Index slices and the range GETs that fetch them (protocol/README.md §9 step 9)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from llog.codec.etcd_values.partition import PARQUET_ENCODING


@dataclass(frozen=True)
class SliceRef:
    """Records ``[first_offset, first_offset + count)`` in bytes of one object."""

    first_offset: int
    count: int
    data_key: str
    byte_offset: int
    byte_length: int
    #: The index entry's ``encoding`` (``"parquet-v1"`` for a Parquet file).
    encoding: str | None = None

    @property
    def end_offset(self) -> int:
        return self.first_offset + self.count - 1


@dataclass(frozen=True)
class Fetch:
    """One range GET: ``byte_length`` bytes of ``data_key`` from ``byte_offset``,
    holding ``slices`` in order. ``skip_rows`` > 0: the one slice is a Parquet file of
    which the scan needs only the rows from that one on, so the GET may fetch just the
    footer and the row groups that hold them (``llog.scan.parquet_ranges``)."""

    data_key: str
    byte_offset: int
    byte_length: int
    slices: tuple[SliceRef, ...]
    skip_rows: int = 0


def coalesce(slices: Iterable[SliceRef], gap: int, cap: int, start: int = 0) -> Iterator[Fetch]:
    """Group consecutive slices of one object, each starting at or within ``gap`` bytes
    after the previous one's end, into one GET spanning at most ``cap`` bytes. A
    Parquet slice is a whole object, so always alone; the scan's ``start`` inside one
    sets its fetch's ``skip_rows``."""
    group: list[SliceRef] = []
    for s in slices:
        if s.encoding == PARQUET_ENCODING:
            if group:
                yield _fetch_of(group)
                group = []
            yield Fetch(s.data_key, s.byte_offset, s.byte_length, (s,), max(0, start - s.first_offset))
            continue
        if group:
            first, last = group[0], group[-1]
            last_end = last.byte_offset + last.byte_length
            if (
                s.data_key == last.data_key
                and last_end <= s.byte_offset <= last_end + gap
                and s.byte_offset + s.byte_length - first.byte_offset <= cap
            ):
                group.append(s)
                continue
            yield _fetch_of(group)
        group = [s]
    if group:
        yield _fetch_of(group)


def _fetch_of(slices: list[SliceRef]) -> Fetch:
    first, last = slices[0], slices[-1]
    return Fetch(
        first.data_key,
        first.byte_offset,
        last.byte_offset + last.byte_length - first.byte_offset,
        tuple(slices),
    )
