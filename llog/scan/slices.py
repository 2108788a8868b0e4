"""Index slices and the range GETs that fetch them (protocol/README.md §9 step 9)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class SliceRef:
    """Records ``[first_offset, first_offset + count)`` in bytes of one object."""

    first_offset: int
    count: int
    data_key: str
    byte_offset: int
    byte_length: int

    @property
    def end_offset(self) -> int:
        return self.first_offset + self.count - 1


@dataclass(frozen=True)
class Fetch:
    """One range GET: ``byte_length`` bytes of ``data_key`` from ``byte_offset``,
    holding ``slices`` in order."""

    data_key: str
    byte_offset: int
    byte_length: int
    slices: tuple[SliceRef, ...]


def coalesce(slices: Iterable[SliceRef], gap: int, cap: int) -> Iterator[Fetch]:
    """Group consecutive slices of one object, each starting at or within ``gap`` bytes
    after the previous one's end, into one GET spanning at most ``cap`` bytes."""
    group: list[SliceRef] = []
    for s in slices:
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
