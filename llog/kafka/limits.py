"""What the Kafka listener lets one client hold: connections (in all and per client
address) and the bytes of request frames read and not yet answered, over all
connections (Kafka's ``max.connections``, ``max.connections.per.ip`` and
``queued.max.request.bytes``). Everything here runs on the event loop."""

from __future__ import annotations

import asyncio
from collections import Counter

from llog.metrics import Metrics


class ConnectionSlots:
    """Open connections, counted in all and per client address."""

    def __init__(self, total: int, per_address: int) -> None:
        self.total, self.per_address = total, per_address
        self._by_address: Counter[str] = Counter()
        self._open = 0

    def take(self, address: str) -> str | None:
        """Take a slot for a connection from ``address``; the limit's name if none is left."""
        if self._open >= self.total:
            return "max_connections"
        if self._by_address[address] >= self.per_address:
            return "max_connections_per_ip"
        self._open += 1
        self._by_address[address] += 1
        return None

    def give_back(self, address: str) -> None:
        self._open -= 1
        self._by_address[address] -= 1
        if self._by_address[address] <= 0:
            del self._by_address[address]


class RequestMemory:
    """A budget of request-frame bytes shared by every connection: a frame is read only
    once its size fits (a connection waits, its bytes left in the socket, until answers
    free room), so what clients send at once never holds more than ``capacity``."""

    def __init__(self, capacity: int, metrics: Metrics) -> None:
        self.capacity = capacity
        self.used = 0
        self._metrics = metrics
        self._waiting: list[asyncio.Future[None]] = []

    async def reserve(self, size: int) -> None:
        """Wait until ``size`` bytes fit, then hold them (``size`` ≤ ``capacity``)."""
        while self.used + size > self.capacity:
            room: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiting.append(room)
            try:
                await room
            finally:
                self._waiting.remove(room)
        self.used += size
        self._metrics.kafka_queued_bytes.set(self.used)

    def release(self, size: int) -> None:
        if not size:
            return
        self.used -= size
        self._metrics.kafka_queued_bytes.set(self.used)
        for room in self._waiting:  # each checks again whether its frame fits
            if not room.done():
                room.set_result(None)
