"""The three-zone region of bench/zones.py and the zone scenarios (llog/nemesis/region.py)
against real sockets in real network namespaces: bytes between two zones are counted
on their link, by cause, in both directions; the region's own traffic and the
operator's never count as inter-zone; nothing is left behind. Needs root, iproute2 and
tc, as CI has."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from llog.nemesis.network import NetworkError, available
from llog.nemesis.region import OTHER, REGION, Region, delta, inter_zone

SINK = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(8); print("up", flush=True)
for _ in range(int(sys.argv[3])):
    c, _ = s.accept(); n = 0
    while (d := c.recv(65536)): n += len(d)
    c.sendall(b"r" * 1000); c.close()
"""
SEND = """
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2]))); s.sendall(b"x" * int(sys.argv[3]))
s.shutdown(socket.SHUT_WR); print(len(s.recv(65536)))
"""


def _sink(region: Region, place: str, port: int, conns: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen(region.wrap(place, [sys.executable, "-c", SINK, region.address(place), str(port),
                                                str(conns)]), stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
    return proc


def _send(region: Region, frm: str, to: str, port: int, n: int) -> None:
    out = subprocess.run(region.wrap(frm, [sys.executable, "-c", SEND, region.address(to), str(port), str(n)]),
                         capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "1000"


def test_inter_zone_bytes_are_counted_by_link_and_cause_and_the_region_is_not_a_zone() -> None:
    why = available()
    if why is not None:
        pytest.fail(f"{why}: CI runs as root with iproute2 (make test installs it)")
    region = Region(("a", "b", "c"), {"etcd-m0": "a", "s3": REGION})
    with region:
        assert region.address("etcd-m0") == region.address("a") != region.address("b")
        region.count("data", [7100])
        before = region.counters()
        b_sink = _sink(region, "b", 7100, 2)
        s3_sink = _sink(region, "s3", 7200, 1)
        _send(region, "etcd-m0", "b", 7100, 3_000_000)  # a -> b, a cause of its own
        _send(region, "a", "s3", 7200, 2_000_000)  # a -> the region: not between zones
        # The operator (this process, in the host's namespace) reaches a zone through
        # the region, crossing no zone<->zone link.
        with socket.create_connection((region.address("b"), 7100), timeout=10) as s:
            s.sendall(b"y" * 1_000_000)
            s.shutdown(socket.SHUT_WR)
            assert len(s.recv(65536)) == 1000
        assert b_sink.wait(30) == 0 and s3_sink.wait(30) == 0
        d = delta(region.counters(), before)
        # Both directions, headers included: a little over what was sent, all on a-b.
        assert 3_000_000 < d["a-b"]["data"] < 3_300_000 and d["a-b"]["total"] >= d["a-b"]["data"]
        assert d["a-c"]["data"] == d["b-c"]["data"] == 0 and d["a-c"]["total"] < 10_000
        assert d["region-a"]["total"] > 2_000_000 and d["region-b"]["total"] > 1_000_000
        crossing = inter_zone(d, region.links)
        assert crossing["data"] == d["a-b"]["data"] and crossing[OTHER] < 20_000
        tag = region.tag
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert tag not in left
    links = subprocess.run(["ip", "link", "show"], capture_output=True, text=True, check=True).stdout
    assert f"llz{tag}op" not in links


def test_a_zone_named_twice_or_named_region_is_refused_before_anything_is_made() -> None:
    for zones in (("a", "a"), ("a", REGION), ()):
        with pytest.raises(NetworkError):
            Region(zones)
    with pytest.raises(NetworkError, match="placed nowhere"):
        Region(("a", "b"), {"broker-0": "z"}).address("broker-0")
