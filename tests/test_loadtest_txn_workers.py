"""The transactional workload's stop (llog/loadtest/transactional.py join_workers): a
worker stuck in a client call is reported and its transaction counted unknown, not
waited for forever. Real threads; no client is involved."""

from __future__ import annotations

import threading

from llog.loadtest.transactional import TxnLog, Worker, Workload, join_workers

W = Workload("127.0.0.1:1", "in", 1, "g")


class _Stuck(Worker):
    """A worker inside one call that does not return until ``release`` is set."""

    def __init__(self, index: int, txns: TxnLog, stop: threading.Event, release: threading.Event) -> None:
        super().__init__(W, index, txns, stop)
        self.release, self.entered = release, threading.Event()

    def run(self) -> None:
        self.current = (f"{self.index}.1", 7)
        self._in("send_offsets_to_transaction")
        self.entered.set()
        self.release.wait()
        self.txns.note(f"{self.index}.1", "committed", 7)  # after the check: dropped


class _Done(Worker):
    def run(self) -> None:
        self.stop_event.wait()
        self.txns.note(f"{self.index}.1", "committed", 3)


def test_a_worker_stuck_in_a_call_is_reported_and_its_transaction_counted_unknown() -> None:
    txns, stop, release = TxnLog(), threading.Event(), threading.Event()
    stuck, done = _Stuck(0, txns, stop, release), _Done(W, 1, txns, stop)
    for t in (stuck, done):
        t.start()
    stuck.entered.wait()
    stop.set()
    try:
        got = join_workers([stuck, done], txns, stop_s=0.5)
        assert [(g["worker"], g["transaction"], g["call"]) for g in got] == [(0, "0.1", "send_offsets_to_transaction")]
        assert got[0]["for_s"] >= 0
        assert txns.outcomes == {"0.1": ("unknown", 7), "1.1": ("committed", 3)}
    finally:
        release.set()
        stuck.join()
    # The stuck worker's late note comes after the check: it changes nothing.
    assert txns.outcomes["0.1"] == ("unknown", 7)


def test_workers_that_stop_are_not_reported() -> None:
    txns, stop = TxnLog(), threading.Event()
    loops = [_Done(W, i, txns, stop) for i in range(3)]
    for t in loops:
        t.start()
    stop.set()
    assert join_workers(loops, txns, stop_s=30) == []
    assert txns.counts() == {"committed": 3}
