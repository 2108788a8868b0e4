"""Which broker gets a partition's produce: rendezvous (highest random weight) hashing
picks each partition's owner set, a policy picks one live owner per request.

The owner set of a partition depends only on ``(topic, partition, broker ids, seed)``,
so every generator process agrees on it without talking. A dead broker's partitions
move to the other members of their owner set, never outside it."""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from llog.errors import LlogError
from llog.names import TopicPartition

log = logging.getLogger(__name__)


class NoLiveOwner(LlogError):
    """Every broker in a partition's owner set is down."""

    def __init__(self, topic: str, partition: int, owners: Sequence[str]) -> None:
        super().__init__(f"{topic}/{partition}: no live broker in owner set {', '.join(owners)}")
        self.topic, self.partition, self.owners = topic, partition, tuple(owners)


def score(topic: str, partition: int, broker_id: str, seed: int) -> int:
    digest = hashlib.blake2b(f"{seed}\0{topic}\0{partition}\0{broker_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def owner_set(topic: str, partition: int, brokers: Iterable[str], size: int, seed: int) -> tuple[str, ...]:
    """The ``size`` brokers with the highest scores for the partition, best first."""
    ranked = sorted(brokers, key=lambda b: (score(topic, partition, b, seed), b), reverse=True)
    return tuple(ranked[:size])


class Router:
    """Picks a live owner for each request; thread-safe. ``round_robin`` rotates over
    the live owners of a partition, ``least_inflight`` takes the owner with the fewest
    requests in flight from this process. A broker marked dead sits out
    ``revive_after_s``; then one request tries it (the others keep away until that one
    is answered), and each failure in a row doubles the time out (up to 16 times): a
    broker that holds requests without answering costs one request per period, not
    every thread at once."""

    def __init__(
        self, brokers: Sequence[str], owners: int, seed: int, policy: str, *,
        revive_after_s: float = 1.0, clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.brokers = tuple(brokers)
        self.size = min(owners, len(self.brokers))
        self.seed = seed
        self.policy = policy
        self.revive_after_s = revive_after_s
        self._clock = clock
        self._lock = threading.Lock()
        self._owners: dict[TopicPartition, tuple[str, ...]] = {}
        self._turn: dict[TopicPartition, int] = {}
        self._inflight = dict.fromkeys(self.brokers, 0)
        self._dead_until: dict[str, float] = {}
        self._silent: set[str] = set()
        self._strikes: dict[str, int] = {}
        #: Brokers out of their time out with one request trying them.
        self._trying: set[str] = set()
        self.remaps = 0

    def owners(self, topic: str, partition: int) -> tuple[str, ...]:
        key = (topic, partition)
        got = self._owners.get(key)
        if got is None:
            got = self._owners[key] = owner_set(topic, partition, self.brokers, self.size, self.seed)
        return got

    def alive(self, broker: str) -> bool:
        with self._lock:
            return self._alive(broker)

    def _alive(self, broker: str) -> bool:
        """In rotation, or out of its time out with no request trying it yet."""
        if broker in self._silent or broker in self._trying:
            return False
        until = self._dead_until.get(broker)
        return until is None or self._clock() >= until

    def pick(self, topic: str, partition: int) -> str:
        owners = self.owners(topic, partition)
        with self._lock:
            live = [b for b in owners if self._alive(b)]
            if not live:
                raise NoLiveOwner(topic, partition, owners)
            if self.policy == "least_inflight":
                chosen = min(live, key=lambda b: (self._inflight[b], owners.index(b)))
            else:
                # Rotate in broker-id order: partitions with the same owner set then agree
                # on the broker each turn, so one request can carry them all.
                live.sort()
                turn = self._turn.get((topic, partition), 0)
                self._turn[(topic, partition)] = turn + 1
                chosen = live[turn % len(live)]
            if chosen in self._dead_until:
                self._trying.add(chosen)  # the one request that tries it
            return chosen

    def begin(self, broker: str) -> None:
        with self._lock:
            self._inflight[broker] += 1

    def end(self, broker: str) -> None:
        with self._lock:
            self._inflight[broker] -= 1

    def mark_dead(self, broker: str, partitions: Iterable[TopicPartition]) -> None:
        """Take ``broker`` out of rotation and log where its ``partitions`` go now."""
        with self._lock:
            self._trying.discard(broker)
            first = broker not in self._dead_until
            strikes = self._strikes[broker] = min(self._strikes.get(broker, 0) + 1, 5)
            self._dead_until[broker] = self._clock() + self.revive_after_s * 2 ** (strikes - 1)
            if not first:
                return
            for topic, p in partitions:
                owners = self.owners(topic, p)
                if broker not in owners:
                    continue
                rest = [b for b in owners if b != broker and self._alive(b)]
                self.remaps += 1
                log.warning("broker %s down: %s/%d remapped to %s (owner set %s)",
                            broker, topic, p, ",".join(rest) or "nobody", ",".join(owners))

    def answered(self, broker: str) -> None:
        """``broker`` answered a request: back in rotation, and its next failure sits
        out ``revive_after_s`` again."""
        if broker not in self._dead_until and not self._strikes.get(broker):
            return
        with self._lock:
            self._strikes[broker] = 0
            self._trying.discard(broker)
            if self._dead_until.pop(broker, None) is not None:
                log.warning("broker %s back in rotation", broker)

    def set_silent(self, broker: str, silent: bool, partitions: Iterable[TopicPartition] = ()) -> None:
        """Out of rotation while its health check fails (:class:`BrokerWatch`), whatever
        ``revive_after_s`` says; back at once when it answers."""
        if silent:
            self.mark_dead(broker, partitions)
            with self._lock:
                self._silent.add(broker)
            return
        with self._lock:
            if broker not in self._silent:
                return
            self._silent.discard(broker)
            self._dead_until.pop(broker, None)
            self._trying.discard(broker)
        log.warning("broker %s answers its health check again: back in rotation", broker)

    def manifest(self, partitions: Iterable[TopicPartition]) -> dict[str, Any]:
        return {
            "brokers": list(self.brokers), "owners_per_partition": self.size, "seed": self.seed,
            "policy": self.policy, "hash": "blake2b-64(seed, topic, partition, broker_id), highest first",
            "owner_sets": {f"{t}/{p}": list(self.owners(t, p)) for t, p in partitions},
        }
