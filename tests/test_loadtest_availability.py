"""The load test's availability figures (pure functions over a run's files), the
generator's adaptive request timeout, and a watched broker's way out of and back into
rotation; tests/test_nemesis.py has the same figures from a real run."""

from __future__ import annotations

import http.server
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from llog.loadtest.availability import availability, fault_kind, fault_windows
from llog.loadtest.broker_watch import AdaptiveTimeout, BrokerWatch, Hedger
from llog.loadtest.routing import NoLiveOwner, Router
from llog.local_ports import free_port
from tests.conftest import wait_until


def _samples(per_second: list[int]) -> list[dict[str, Any]]:
    out, total = [], 0
    for i, n in enumerate(per_second, start=1):
        total += n
        out.append({"t": float(i), "acked_records": total})
    return out


def _step(action: str, target: str, at: float, **kw: Any) -> dict[str, Any]:
    return {"action": action, "target": target, "done_s": at, "ok": True, **kw}


def test_fault_kinds_name_what_was_hit() -> None:
    assert fault_kind("pause", "broker-1") == "pause:broker"
    assert fault_kind("kill", "etcd-leader") == "kill:etcd-leader"
    assert fault_kind("kill", "etcd") == "kill:etcd-all"
    assert fault_kind("pause", "etcd-2") == "pause:etcd-member"
    assert fault_kind("faults", "s3", "drop") == "faults:s3-drop"
    assert fault_kind("kill", "compactor") == "kill:compactor"


def test_windows_pair_each_fault_with_its_end_and_a_kill_never_restarted_lasts_the_run() -> None:
    events = [_step("pause", "broker-1", 4.0), _step("faults", "s3", 5.0, fault="drop"),
              _step("resume", "broker-1", 9.5), _step("faults-off", "s3", 7.0, fault="drop"),
              _step("kill", "broker-0", 12.0), _step("kill", "compactor", 13.0, ok=False)]
    got = [(w.kind, w.start_s, w.end_s) for w in fault_windows(events, 20.0)]
    assert got == [("pause:broker", 4.0, 9.5), ("faults:s3-drop", 5.0, 7.0), ("kill:broker", 12.0, 20.0)]


def test_zero_ack_intervals_are_found_attributed_and_excused_only_for_an_etcd_outage() -> None:
    rates = [100] * 10 + [0, 0, 50, 100, 100] + [0, 0, 0] + [100] * 4
    events = [_step("pause", "broker-1", 10.2), _step("resume", "broker-1", 12.5),
              _step("kill", "etcd", 15.1), _step("restart", "etcd", 17.8)]
    a = availability(_samples(rates), events, interval_s=1.0, duration_s=float(len(rates)))
    assert a["steady_rate_rec_s"] == 100
    assert a["zero_ack_intervals"] == [11.0, 12.0, 16.0, 17.0, 18.0]
    assert a["zero_ack_intervals_unexcused"] == [11.0, 12.0]  # the etcd outage may stop writes
    assert a["longest_gap_s"] == 3.0 and a["longest_unexcused_gap_s"] == 2.0
    pause = a["by_kind"]["pause:broker"]
    assert pause["zero_ack_intervals"] == 2 and pause["longest_gap_s"] == 2.0
    assert pause["worst_vs_steady"] == pytest.approx(0.375)  # intervals 11..14: 0, 0, 50, 100
    assert a["by_kind"]["kill:etcd-all"]["zero_ack_intervals"] == 3


def test_each_zones_clients_have_their_own_gaps() -> None:
    """Zone a cut off from 3 s to 6 s: its clients stop until they have moved, b's do
    not; a zone cut is its own kind of fault."""
    by_zone = [{"a": 10, "b": 10}, {"a": 10, "b": 10}, {"a": 0, "b": 10}, {"a": 0, "b": 10}, {"a": 10, "b": 10},
               {"a": 10, "b": 10}]
    samples, totals = [], {"a": 0, "b": 0}
    for i, per_zone in enumerate(by_zone, start=1):
        totals = {z: totals[z] + n for z, n in per_zone.items()}
        samples.append({"t": float(i), "acked_records": sum(totals.values()), "acked_by_zone": dict(totals)})
    events = [_step("partition", "zone-a", 2.5, peer="rest"), _step("heal", "zone-a", 5.5)]
    a = availability(samples, events, interval_s=1.0, duration_s=6.0)
    assert a["by_zone"] == {"a": {"zero_ack_intervals": [3.0, 4.0], "longest_gap_s": 2.0},
                            "b": {"zero_ack_intervals": [], "longest_gap_s": 0.0}}
    assert a["zero_ack_intervals"] == [] and set(a["by_kind"]) == {"partition:zone|rest"}
    assert "by_zone" not in availability(_samples([10, 10]), [], interval_s=1.0, duration_s=2.0)


def test_samples_after_the_load_ends_do_not_count() -> None:
    a = availability(_samples([10, 10, 0, 0]), [], interval_s=1.0, duration_s=2.0)
    assert a["zero_ack_intervals"] == [] and a["steady_rate_rec_s"] == 10


def test_the_adaptive_timeout_follows_the_p99_within_its_bounds() -> None:
    t = AdaptiveTimeout(1.0, 10.0, factor=4.0, window=400)
    assert t.seconds() == 10.0  # nothing seen yet: the ceiling
    for _ in range(400):
        t.observe(0.05)
    assert t.seconds() == 1.0  # 4 x 50 ms, raised to the floor
    for _ in range(400):
        t.observe(0.6)
    assert t.seconds() == pytest.approx(2.4)
    for _ in range(400):
        t.observe(5.0)
    assert t.seconds() == 10.0


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *_args: Any) -> None:
        pass


def _server() -> Iterator[http.server.ThreadingHTTPServer]:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()


@pytest.fixture(name="healthy")
def healthy_fixture() -> Iterator[http.server.ThreadingHTTPServer]:
    yield from _server()


def test_a_silent_broker_leaves_rotation_its_requests_are_cut_and_it_comes_back(
    healthy: http.server.ThreadingHTTPServer,
) -> None:
    # "b" accepts connections and never answers, as a paused process does.
    silent = socket.socket()
    silent.bind(("127.0.0.1", free_port()))  # rebound below: not from the ephemeral range
    silent.listen(16)
    urls = {"a": f"http://127.0.0.1:{healthy.server_address[1]}",
            "b": f"http://127.0.0.1:{silent.getsockname()[1]}"}
    router = Router(list(urls), 2, 1, "round_robin", revive_after_s=60)
    waiting = socket.create_connection(silent.getsockname())  # a request in flight to "b"
    watch = BrokerWatch(urls, router, [("t", 0)], interval_s=0.05, timeout_s=0.2).start()
    try:
        with watch.sending("b", waiting):
            wait_until(lambda: not router.alive("b"), 10, "b out of rotation")
            assert waiting.recv(1) == b""  # cut: the waiting sender wakes at once
        assert router.alive("a")
        assert {router.pick("t", 0) for _ in range(4)} == {"a"}
        # "b" answers again (a real server on its port): back at once, not after revive_after_s.
        port = silent.getsockname()[1]
        silent.close()
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), _Health)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        try:
            wait_until(lambda: router.alive("b"), 10, "b back in rotation")
        finally:
            srv.shutdown()
            srv.server_close()
    finally:
        watch.close()
        waiting.close()


def test_a_silent_broker_is_never_picked_until_it_answers() -> None:
    r = Router(["x", "y"], 2, 1, "round_robin", revive_after_s=0)
    r.set_silent("x", True, [("t", 0)])
    assert {r.pick("t", 0) for _ in range(4)} == {"y"}  # revive_after_s does not bring it back
    r.set_silent("y", True)
    with pytest.raises(NoLiveOwner):
        r.pick("t", 0)
    r.set_silent("x", False)
    assert r.pick("t", 0) == "x"


def _hedger(median_s: float) -> Hedger:
    timeouts = AdaptiveTimeout(0.5, 10.0)
    for _ in range(AdaptiveTimeout.MIN_SEEN):
        timeouts.observe(median_s)
    return Hedger(4, timeouts, factor=4.0, min_delay_s=0.05)


def test_a_request_not_answered_in_time_is_hedged_and_the_first_answer_taken() -> None:
    hedger = _hedger(0.02)  # hedge after max(0.05, 4 x 0.02) = 0.08 s
    release = threading.Event()
    abandoned: list[str] = []

    def attempt(broker: str) -> str:
        if broker == "stuck":
            release.wait(10)
        return f"from {broker}"

    try:
        assert hedger.send("stuck", "spare", attempt, abandoned.append) == ("spare", "from spare")
        assert abandoned == ["stuck"] and (hedger.sent, hedger.won) == (1, 1)
        release.set()
        # Answered in time: no hedge; no second broker: none either.
        assert hedger.send("fast", "spare", attempt, abandoned.append) == ("fast", "from fast")
        release.clear()
        threading.Timer(0.3, release.set).start()
        assert hedger.send("stuck", None, attempt, abandoned.append) == ("stuck", "from stuck")
        assert hedger.sent == 1
    finally:
        release.set()
        hedger.close()


def test_when_both_attempts_fail_the_first_brokers_error_is_raised() -> None:
    hedger = _hedger(0.01)

    def attempt(broker: str) -> str:
        if broker == "first":
            time.sleep(0.2)
        raise ConnectionRefusedError(broker)

    try:
        with pytest.raises(ConnectionRefusedError, match="first"):
            hedger.send("first", "second", attempt, lambda _b: None)
    finally:
        hedger.close()
