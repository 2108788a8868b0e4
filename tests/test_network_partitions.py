"""The nemesis's private network (llog/nemesis/network.py) against real sockets in real
network namespaces: a cut drops packets silently one way, both ways is two cuts,
healing restores the path, and nothing is left behind. Needs root and iproute2, as CI
has (the partition scenario in tests/test_nemesis.py uses the same network)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from llog.nemesis.network import CLIENTS, Network, NetworkError, available

LISTEN = """
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 7000)); s.listen(64); print("up", flush=True); time.sleep(600)
"""
CONNECT = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], 7000), timeout=0.5); print("open")
except TimeoutError: print("silent")
except OSError as e: print("refused", e)
"""


@pytest.fixture(name="net")
def net_fixture() -> Iterator[Network]:
    why = available()
    if why is not None:
        pytest.fail(f"{why}: CI runs as root with iproute2 (make test installs it)")
    net = Network(["a", "b"]).up()
    servers = [subprocess.Popen(net.wrap(n, [sys.executable, "-c", LISTEN, net.address(n)]), stdout=subprocess.PIPE,
                                text=True) for n in ("a", "b")]
    try:
        for s in servers:
            assert s.stdout is not None and s.stdout.readline().strip() == "up"
        yield net
    finally:
        for s in servers:
            s.kill()
            s.wait()
        net.down()


def _reach(net: Network, frm: str, to: str) -> str:
    out = subprocess.run(net.wrap(frm, [sys.executable, "-c", CONNECT, net.address(to)]), capture_output=True,
                         text=True, timeout=30)
    return out.stdout.strip()


def test_every_node_reaches_every_other_until_a_cut(net: Network) -> None:
    for frm, to in [(CLIENTS, "a"), (CLIENTS, "b"), ("a", "b"), ("b", "a")]:
        assert _reach(net, frm, to) == "open", (frm, to)


def test_a_cut_drops_silently_one_way_and_heals(net: Network) -> None:
    net.cut(["a"], ["b"])
    assert _reach(net, "a", "b") == "silent"  # no refusal: packets vanish, as in a real partition
    # One way: b's packets reach a, but a's answers to b are dropped, so TCP fails too.
    assert _reach(net, "b", "a") == "silent"
    assert _reach(net, CLIENTS, "b") == "open" and _reach(net, CLIENTS, "a") == "open"
    assert net.cuts() == [("a", "b")]
    net.heal(["a"], ["b"])
    assert _reach(net, "a", "b") == "open" and net.cuts() == []


def test_the_clients_can_be_cut_from_a_node(net: Network) -> None:
    net.cut([CLIENTS], ["a"])
    net.cut(["a"], [CLIENTS])
    assert _reach(net, CLIENTS, "a") == "silent"
    assert _reach(net, CLIENTS, "b") == "open" and _reach(net, "b", "a") == "open"
    net.heal()
    assert _reach(net, CLIENTS, "a") == "open"


def test_down_leaves_no_namespace_or_bridge() -> None:
    if available() is not None:
        pytest.fail(f"{available()}: CI runs as root with iproute2")
    net = Network(["x"]).up()
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert f"llog-{net.tag}-x" in names
    net.down()
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert f"llog-{net.tag}-x" not in names
    links = subprocess.run(["ip", "link"], capture_output=True, text=True, check=True).stdout
    assert net.bridge not in links


def test_a_taken_name_is_a_clear_error() -> None:
    if available() is not None:
        pytest.fail(f"{available()}: CI runs as root with iproute2")
    first = Network(["x"], tag="t0").up()
    try:
        with pytest.raises(NetworkError, match=r"llt0br|llog-t0-x"):
            Network(["x"], tag="t0").up()
    finally:
        first.down()
