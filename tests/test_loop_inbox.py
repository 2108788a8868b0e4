"""LoopInbox (llog/broker/loop_inbox.py): calls from threads run on the loop, in order,
a burst of them in one wake-up; wrapped futures resolve like the originals."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future

import pytest

from llog.broker.loop_inbox import LoopInbox
from llog.errors import BackPressure


def test_calls_from_threads_run_on_the_loop_in_order() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        inbox = LoopInbox(loop)
        got: list[tuple[int, bool]] = []
        done = asyncio.Event()

        def note(i: int) -> None:
            got.append((i, threading.current_thread() is threading.main_thread()))
            if i == 99:
                done.set()

        def produce() -> None:
            for i in range(100):
                inbox.call(note, i)

        t = threading.Thread(target=produce)
        t.start()
        await done.wait()
        t.join()
        assert got == [(i, True) for i in range(100)]

    asyncio.run(main())


def test_a_burst_queued_before_the_loop_runs_costs_one_wake_up() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        wakeups = 0
        original = loop.call_soon_threadsafe

        def counting(*args: object) -> object:
            nonlocal wakeups
            wakeups += 1
            return original(*args)  # type: ignore[arg-type]

        loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
        inbox = LoopInbox(loop)
        got: list[int] = []
        t = threading.Thread(target=lambda: [inbox.call(got.append, i) for i in range(50)])
        t.start()
        t.join()  # all 50 queued while the loop was not running callbacks
        await asyncio.sleep(0)
        assert got == list(range(50))
        assert wakeups == 1

    asyncio.run(main())


def test_wrapped_futures_resolve_with_the_result_or_the_error() -> None:
    async def main() -> None:
        inbox = LoopInbox(asyncio.get_running_loop())
        ok: Future[int] = Future()
        bad: Future[int] = Future()
        w_ok, w_bad = inbox.wrap(ok), inbox.wrap(bad)
        threading.Thread(target=lambda: (ok.set_result(7), bad.set_exception(BackPressure("full")))).start()
        assert await w_ok == 7
        with pytest.raises(BackPressure, match="full"):
            await w_bad
        done: Future[int] = Future()
        done.set_result(3)  # already resolved when wrapped
        assert await inbox.wrap(done) == 3

    asyncio.run(main())


def test_a_cancelled_waiter_is_left_alone_and_later_calls_still_run() -> None:
    async def main() -> None:
        inbox = LoopInbox(asyncio.get_running_loop())
        fut: Future[int] = Future()
        waiter = inbox.wrap(fut)
        waiter.cancel()  # the HTTP client went away
        after = asyncio.Event()
        fut.set_result(1)
        inbox.call(after.set)
        await after.wait()
        assert waiter.cancelled()

    asyncio.run(main())


def test_a_failing_call_does_not_strand_the_others(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        inbox = LoopInbox(asyncio.get_running_loop())
        after = asyncio.Event()

        def boom() -> None:
            raise RuntimeError("boom")

        inbox.call(boom)
        inbox.call(after.set)
        await after.wait()

    asyncio.run(main())
    assert "loop inbox call" in caplog.text


def test_calls_after_the_loop_closed_are_dropped() -> None:
    loop = asyncio.new_event_loop()
    inbox = LoopInbox(loop)
    loop.close()
    inbox.call(print, "never")  # no error: nobody is waiting any more


def test_calls_from_a_signal_handler_interrupting_a_call_do_not_deadlock() -> None:
    """A broker's SIGTERM handler ends long-polls through the inbox while the loop's
    thread may be inside a call of its own: nothing in a call may wait for it."""
    import signal

    async def main() -> tuple[int, int]:
        inbox = LoopInbox(asyncio.get_running_loop())
        counts = {"loop": 0, "signal": 0}

        def count(who: str) -> None:
            counts[who] += 1

        signals = 0

        def handler(_sig: int, _frame: object) -> None:
            nonlocal signals
            signals += 1
            inbox.call(count, "signal")

        previous = signal.signal(signal.SIGALRM, handler)
        signal.setitimer(signal.ITIMER_REAL, 0.0002, 0.0002)
        try:
            for _ in range(50_000):
                inbox.call(count, "loop")
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert counts["loop"] == 50_000
        return counts["signal"], signals

    ran, sent = asyncio.run(main())
    assert ran == sent > 0
