"""A stopping Kafka listener's drain: how long it keeps its connections open after it has
told its clients to go elsewhere (NOT_LEADER_OR_FOLLOWER, NOT_COORDINATOR; docs/kafka.md),
so that they are connected to another broker before it closes."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from kafka.protocol.metadata import ApiVersionsRequest, FindCoordinatorRequest, MetadataRequest

log = logging.getLogger(__name__)

#: The most a stopping listener waits for its clients to move on.
DRAIN_S = 10.0
#: A stopping listener closes once no client has asked it for anything but where to go
#: for this long: told to move, a client connects to the broker named instead within a
#: few hundred ms. Closed sooner, a librdkafka client left with no connection up
#: re-bootstraps, retires every broker it knew, and a transactional producer can then
#: wait forever on its coordinator (librdkafka #5511).
QUIET_S = 0.5
#: Requests that ask where to go rather than use this broker.
_DISCOVERY = frozenset({ApiVersionsRequest.API_KEY, MetadataRequest.API_KEY, FindCoordinatorRequest.API_KEY})


class Drain:
    """When the listener's clients last used it (event-loop time), and the wait for them
    to stop before it closes."""

    def __init__(self) -> None:
        self._last_used = 0.0

    def note(self, api_key: int) -> None:
        """A request came in (on the event loop)."""
        if api_key not in _DISCOVERY:
            self._last_used = asyncio.get_running_loop().time()

    async def settle(self, answering: Callable[[], bool], connected: Callable[[], bool], elsewhere: bool,
                     timeout_s: float = DRAIN_S) -> None:
        """Wait (up to ``timeout_s``) until no answer is still to go out (``answering``)
        and, when there is another broker for the clients to go to (``elsewhere``),
        until none is ``connected`` or none has used this listener for :data:`QUIET_S`.
        Alone, a broker's clients have nowhere to go: it waits for its answers only."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s

        def settled() -> bool:
            if answering():
                return False
            return not elsewhere or not connected() or loop.time() - self._last_used >= QUIET_S

        while not settled():
            if loop.time() >= deadline:
                log.warning("Kafka clients still using this broker after %.0f s of draining; closing", timeout_s)
                return
            await asyncio.sleep(0.05)
