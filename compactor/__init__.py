"""The llog compactor: rewrites many small WAL slices of a partition into few large
compacted blobs (:func:`compact_once`), applies retention, vacuums unreferenced
objects, and runs all of it as a long-lived service (``python -m compactor``).
"""

from compactor.claims import Claim, LeaseKeeper, claimed
from compactor.compact import CompactionResult, Compactor, compact_once
from compactor.stages import StageEvent
from llog.errors import ClaimConflict, ClaimLost

__all__ = [
    "Claim",
    "ClaimConflict",
    "ClaimLost",
    "CompactionResult",
    "Compactor",
    "LeaseKeeper",
    "StageEvent",
    "claimed",
    "compact_once",
]
