"""Hand work from the producer's and the watches' threads to the broker's event loop,
one loop wake-up per burst.

A committed batch resolves every produce request in it at once (hundreds at 2,000
requests/s), and :func:`asyncio.wrap_future` wakes the loop once per request: a
self-pipe write and a callback each, ahead of everything else the loop has to do (a
peer's blob read, the next requests). The inbox queues calls from any thread and
schedules one loop callback that runs all queued so far.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")

log = logging.getLogger(__name__)


class LoopInbox:
    """Calls queued from any thread, run in order on ``loop`` in as few wake-ups as
    the bursts allow.

    No lock: :meth:`call` also runs in signal handlers (a broker's SIGTERM ends its
    long-polls through it), which interrupt the loop's thread wherever it is, so a
    lock it might hold there would deadlock. ``deque`` appends and pops are atomic,
    and the flag is cleared before the queue is drained, so a call that sees it set
    is drained by the run that is coming (at worst a call schedules one run too many).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._queued: deque[tuple[Callable[..., None], tuple[Any, ...]]] = deque()
        self._scheduled = False

    def call(self, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` on the loop soon; dropped once the loop is closed (nobody
        is waiting any more)."""
        self._queued.append((fn, args))
        if self._scheduled:
            return
        self._scheduled = True
        try:
            self._loop.call_soon_threadsafe(self._run)
        except RuntimeError:  # the loop is closed
            self._queued.clear()

    def wrap(self, fut: Future[T]) -> asyncio.Future[T]:
        """An asyncio future resolved like ``fut`` (which is never cancelled through it:
        the producer's futures are running, so an accepted record is sent regardless)."""
        waiter: asyncio.Future[T] = self._loop.create_future()
        fut.add_done_callback(lambda f: self.call(_settle, waiter, f))
        return waiter

    def _run(self) -> None:
        self._scheduled = False
        # What was queued by now; later calls saw the flag cleared and scheduled a run.
        for _ in range(len(self._queued)):
            fn, args = self._queued.popleft()
            try:
                fn(*args)
            except Exception:  # one bad call must not strand the others queued with it
                log.exception("loop inbox call %r failed", fn)


def _settle(waiter: asyncio.Future[Any], fut: Future[Any]) -> None:
    if waiter.cancelled():  # the request went away
        return
    exc = fut.exception()
    if exc is not None:
        waiter.set_exception(exc)
    else:
        waiter.set_result(fut.result())
