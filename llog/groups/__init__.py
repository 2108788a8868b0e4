"""Consumer groups: committed offsets (:mod:`offsets`), lease-based membership with
exclusive partition ownership (:mod:`membership`), and the :class:`Consumer` that ties
them to a :class:`~llog.reader.Reader` (:mod:`consumer`)."""

from llog.groups.consumer import Consumer
from llog.groups.offsets import GroupOffsets

__all__ = ["Consumer", "GroupOffsets"]
