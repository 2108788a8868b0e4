"""Hedged WAL blob PUTs (llog/store/hedging.py): the race, the latency window, and
hedging against the real S3 server (a PUT held back on its way there is overtaken by
its hedge; the object is the one both write)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import pytest

from llog.config import LlogConfig
from llog.connection import Connection
from llog.errors import ConfigError, StoreError
from llog.metrics import Metrics
from llog.reader import Reader
from llog.store import open_store
from llog.store.hedging import MIN_SAMPLES, UNTIMED_DELAY_S, HedgedPuts, LatencyWindow, race
from llog.topic.admin import Topics
from llog.writer import Writer

# -- race ------------------------------------------------------------------------------


@pytest.fixture
def pool() -> Any:
    with ThreadPoolExecutor(4) as p:
        yield p


def test_an_answer_before_the_delay_runs_nothing_else(pool: ThreadPoolExecutor) -> None:
    ran: list[int] = []
    assert race(pool, ran.append, delay=60.0, sends=4) == 0
    assert ran == [0]


def test_a_first_slower_than_the_delay_is_overtaken_by_the_second(pool: ThreadPoolExecutor) -> None:
    release = threading.Event()
    ran: list[int] = []

    def attempt(n: int) -> None:
        ran.append(n)
        if n == 0:
            release.wait()

    assert race(pool, attempt, delay=0.01, sends=2) == 1
    assert ran == [0, 1]
    release.set()


def test_attempts_keep_coming_while_every_one_is_late(pool: ThreadPoolExecutor) -> None:
    # 30 % of a store's answers held: one hedge is not enough when it is held too.
    release = threading.Event()

    def attempt(n: int) -> None:
        if n < 2:
            release.wait()

    assert race(pool, attempt, delay=0.01, sends=4) == 2
    release.set()


def test_a_first_that_fails_starts_the_second_at_once(pool: ThreadPoolExecutor) -> None:
    def attempt(n: int) -> None:
        if n == 0:
            raise StoreError("PUT refused")

    # A delay no test waits out: the second runs because the first failed, not late.
    assert race(pool, attempt, delay=3600.0, sends=2) == 1


def test_when_all_fail_the_last_error_is_raised(pool: ThreadPoolExecutor) -> None:
    ran: list[int] = []

    def attempt(n: int) -> None:
        ran.append(n)
        raise StoreError(f"attempt {n}")

    with pytest.raises(StoreError, match="attempt 2"):
        race(pool, attempt, delay=3600.0, sends=3)
    assert ran == [0, 1, 2]  # no more than ``sends``


def test_a_slow_first_still_wins_when_the_second_fails(pool: ThreadPoolExecutor) -> None:
    release = threading.Event()

    def attempt(n: int) -> None:
        if n == 0:
            release.wait()
            return
        release.set()  # the first answers once the second has failed
        raise StoreError("second refused")

    assert race(pool, attempt, delay=0.01, sends=2) == 0


# -- the window ------------------------------------------------------------------------


def test_window_gives_a_fixed_delay_until_it_has_enough_samples() -> None:
    w = LatencyWindow(0.9, 0.02)
    for _ in range(MIN_SAMPLES - 1):
        w.record(0.1)
    assert w.delay() == UNTIMED_DELAY_S
    w.record(0.1)
    assert w.delay() == 0.1


def test_window_delay_is_the_quantile_of_recent_latencies() -> None:
    w = LatencyWindow(0.9, 0.0)
    for ms in range(1, 101):
        w.record(ms / 1000)
    assert w.delay() == pytest.approx(0.091)


def test_window_delay_stays_near_the_median_when_many_requests_are_slow() -> None:
    # 30 % of the answers held 2 s (the nemesis's S3 "slow" fault): the p90 is 2 s, a
    # hedge after it would never win; the delay is 4x the 10 ms median instead.
    w = LatencyWindow(0.9, 0.02)
    for i in range(100):
        w.record(2.0 if i % 10 < 3 else 0.01)
    assert w.delay() == pytest.approx(0.04)


def test_window_delay_is_never_under_the_minimum() -> None:
    w = LatencyWindow(0.9, 0.02)
    for i in range(100):
        w.record(0.5 if i % 10 < 2 else 0.001)
    assert w.delay() == pytest.approx(0.02)


def test_window_hedges_fast_requests_after_the_minimum() -> None:
    w = LatencyWindow(0.9, 0.02)
    for _ in range(MIN_SAMPLES):
        w.record(0.005)
    # p90 of 5 ms: hedged only after 20 ms, so the first of a fast store's answers held
    # for seconds is hedged, with no window of slow answers needed first.
    assert w.delay() == 0.02


# -- against the real S3 server -----------------------------------------------------------


class _FirstPutHeld:
    """The suite's S3 store, whose first PUT waits for ``release`` before it is sent."""

    def __init__(self, config: LlogConfig) -> None:
        self.store = open_store(config)
        self.release = threading.Event()
        self.puts = 0
        self._lock = threading.Lock()

    def put(self, key: str, data: bytes, *, crc32: int | None = None) -> None:
        with self._lock:
            self.puts += 1
            first = self.puts == 1
        if first:
            self.release.wait()
        self.store.put(key, data, crc32=crc32)


def test_a_held_put_is_overtaken_by_its_hedge_and_the_object_is_whole(config: LlogConfig) -> None:
    held = _FirstPutHeld(config)
    metrics = Metrics()
    puts = HedgedPuts(held, metrics, quantile=0.9, min_delay_s=0.0)  # type: ignore[arg-type]
    for _ in range(MIN_SAMPLES):
        puts.window.record(0.001)  # recent PUTs took 1 ms: the held one is late after that
    data = bytes(range(256)) * 64
    try:
        puts.put("hedged/blob", data)  # returns on a hedge: the first is still held
        assert held.puts >= 2  # a hedge slower than twice the delay is hedged too
        assert held.store.get("hedged/blob") == data
        assert metrics.value("llog_put_hedges_total", outcome="won") == 1
    finally:
        held.release.set()
        puts.close()  # waits for the held PUT, which writes the same bytes
    assert held.store.get("hedged/blob") == data
    assert metrics.value("llog_put_hedges_total", outcome="sent") == held.puts - 1
    held.store.close()


def test_without_hedging_a_put_runs_on_the_callers_thread(config: LlogConfig) -> None:
    store = open_store(config)
    puts = HedgedPuts(store, Metrics(), quantile=0.0, min_delay_s=0.0)
    seen: list[str] = []
    original = store.put

    def put(key: str, data: bytes, *, crc32: int | None = None) -> None:
        seen.append(threading.current_thread().name)
        original(key, data, crc32=crc32)

    store.put = put  # type: ignore[method-assign]
    puts.put("inline/blob", b"x")
    assert seen == [threading.current_thread().name]
    puts.close()
    store.close()


def test_writer_appends_read_back_with_hedging_on(config: LlogConfig) -> None:
    cfg = replace(config, put_hedge_quantile=0.5, put_hedge_min_ms=0.0)
    with Connection(cfg) as conn:
        topic = "hedged-writes"
        Topics(conn).create(topic, 1)
        with Writer(conn) as w:
            for i in range(3 * MIN_SAMPLES):  # past MIN_SAMPLES every PUT may be hedged
                w.append(topic, 0, [b"%d" % i])
        with Reader(conn) as r:
            assert [rec.value for rec in r.scan(topic, 0, 0, 3 * MIN_SAMPLES)] == [
                b"%d" % i for i in range(3 * MIN_SAMPLES)
            ]


@pytest.mark.parametrize("quantile", [-0.1, 1.0, 2.0])
def test_hedge_quantile_outside_0_1_is_refused(config: LlogConfig, quantile: float) -> None:
    with pytest.raises(ConfigError, match="put_hedge_quantile"):
        replace(config, put_hedge_quantile=quantile)
