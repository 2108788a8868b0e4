"""One partition's part of a scan as it goes (protocol/README.md §9 steps 8 and 11)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from llog.errors import LlogError
from llog.scan.slices import Fetch


@dataclass(eq=False)
class PartitionScan:
    """A partition's scan of ``[start, hi)``: where its fetches come from, how far it
    has yielded, and what went wrong. Compared by identity: a scan list may hold two
    scans of one partition."""

    topic: str
    partition: int
    start: int
    hi: int
    #: The scan's fetches, iterated anew each time the scan (re)starts: from ``start``,
    #: or from ``done`` once its blob was found vacuumed and it re-resolved.
    source: Iterable[Fetch]
    fetches: Iterator[Fetch] = field(init=False)
    #: Next offset to yield.
    done: int = field(init=False)
    #: Objects found gone (vacuumed) during the scan: each is re-resolved once.
    gone: set[str] = field(default_factory=set)
    #: What the fetches raised; the consumer gets it when it reaches this point.
    failed: LlogError | None = None

    def __post_init__(self) -> None:
        self.done = self.start
        self.restart()

    def restart(self) -> None:
        """Fetch again from the start of :attr:`source`; forget what the old fetches
        raised."""
        self.fetches = iter(self.source)
        self.failed = None
