"""What a writer remembers between commits: each partition's control state and each
producer key's state from its own last commit (so the next commit CASes without a
read), and one lock per partition. All bounded (:mod:`llog.bounded`): the least
recently committed are forgotten, and the next commit there reads first."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass

from llog.bounded import BoundedCache, PartitionLocks
from llog.codec.etcd_values.maps import MetaFormatError
from llog.codec.etcd_values.producers import ProducerState
from llog.errors import CorruptMetadata
from llog.etcd.operations import KV
from llog.names import TopicPartition
from llog.state.control import ControlState

#: Partitions (and producer keys) whose state and lock a writer keeps; the least
#: recently committed are forgotten beyond this (the next commit there reads first).
CACHE_PARTITIONS = 65_536


@dataclass(frozen=True)
class ProducerSnapshot:
    """A producer key's value (``None``: absent) and its mod_revision (0: absent)."""

    state: ProducerState | None
    mod_revision: int


def decode_producer(key: str, kv: KV | None) -> ProducerSnapshot:
    """The snapshot of producer key ``key`` as etcd returned it (``None``: absent)."""
    if kv is None:
        return ProducerSnapshot(None, 0)
    try:
        return ProducerSnapshot(ProducerState.decode(kv.value), kv.mod_revision)
    except MetaFormatError as exc:
        raise CorruptMetadata(key, str(exc)) from exc


class WriterCaches:
    """A writer's control cache, producer-state cache and partition locks."""

    def __init__(self, capacity: int = CACHE_PARTITIONS) -> None:
        self.controls: BoundedCache[TopicPartition, ControlState] = BoundedCache(capacity)
        # Producer key -> its last known value, like the control cache.
        self.producers: BoundedCache[str, ProducerSnapshot] = BoundedCache(capacity)
        self._lock = threading.Lock()
        # One commit at a time per partition within this writer: concurrent callers then
        # CAS against each other's cached result instead of conflicting and re-reading.
        self.partition_locks = PartitionLocks(capacity)

    def remember(self, topic: str, partition: int, st: ControlState) -> None:
        """Cache ``st`` as the partition's control state."""
        with self._lock:
            self.controls[(topic, partition)] = st

    def remember_all(self, states: Iterable[tuple[TopicPartition, ControlState]]) -> None:
        """Cache several partitions' control states in one lock round."""
        with self._lock:
            for tp, st in states:
                self.controls[tp] = st

    def forget(self, entries: Iterable[tuple[str, int, str | None]]) -> None:
        """Drop the cached states of these partitions and, where given, producer keys
        (their next commit reads first), in one lock round."""
        with self._lock:
            for topic, partition, pkey in entries:
                self.controls.pop((topic, partition), None)
                if pkey is not None:
                    self.producers.pop(pkey, None)
