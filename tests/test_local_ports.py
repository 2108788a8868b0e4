"""Free ports for local servers (llog/local_ports.py): outside the ephemeral range,
bindable, and never handed to two callers on one host while reserved."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from llog.local_ports import FLOOR, ephemeral_range, free_port, quiet_range, reserve

pytestmark = pytest.mark.fast


def test_ports_are_picked_outside_the_range_client_connections_draw_from() -> None:
    low, high = ephemeral_range()
    for _ in range(50):
        port = free_port()
        assert not low <= port <= high


def test_the_quiet_range_is_below_the_ephemeral_one_or_above_it_or_none() -> None:
    assert quiet_range((32_768, 60_999)) == range(FLOOR, 32_768)
    assert quiet_range((1_024, 50_000)) == range(50_001, 65_536)
    assert quiet_range((1_024, 65_000)) is None


def test_a_port_in_use_is_never_handed_out(tmp_path: Path) -> None:
    with socket.socket() as listening, socket.socket() as bound:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        bound.bind(("127.0.0.1", 0))
        taken = [listening.getsockname()[1], bound.getsockname()[1]]
        spare = free_port(directory=tmp_path / "probe")
        picks = {free_port(directory=tmp_path / str(i), ports=[*taken, spare]) for i in range(20)}
    assert picks == {spare}


def test_every_candidate_reserved_falls_back_to_the_kernels_choice(tmp_path: Path) -> None:
    port = free_port(directory=tmp_path)
    low, high = ephemeral_range()
    assert low <= free_port(directory=tmp_path, ports=[port]) <= high


def test_a_reserved_port_is_not_handed_out_again_until_its_reservation_is_stale(tmp_path: Path) -> None:
    assert reserve(20_500, tmp_path, now=1_000.0)
    assert not reserve(20_500, tmp_path, now=1_001.0)
    # Stale: removed, yet this claim still fails (the caller tries another port) ...
    os.utime(tmp_path / "20500", (0.0, 0.0))
    assert not reserve(20_500, tmp_path, now=10_000.0, ttl_s=60.0)
    # ... and the next one succeeds.
    assert reserve(20_500, tmp_path, now=10_000.0, ttl_s=60.0)


def test_concurrent_processes_are_never_given_the_same_port(tmp_path: Path) -> None:
    code = (
        "import sys; from pathlib import Path; from llog.local_ports import free_port\n"
        "print(' '.join(str(free_port(directory=Path(sys.argv[1]))) for _ in range(300)))\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
             for _ in range(4)]
    picked = []
    for p in procs:
        out, _ = p.communicate(timeout=60)
        assert p.returncode == 0
        picked += [int(x) for x in out.split()]
    assert len(picked) == 1_200
    assert len(set(picked)) == 1_200
    assert sorted(int(f.name) for f in tmp_path.iterdir()) == sorted(picked)


def test_a_span_of_ports_is_free_and_reserved_together(tmp_path: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        taken = held.getsockname()[1]
        # Candidates whose next port is the held one are never returned.
        port = free_port(span=3, directory=tmp_path, ports=[taken - 1, taken - 2, 20_700])
    assert port == 20_700
    assert {int(f.name) for f in tmp_path.iterdir()} >= {20_700, 20_701, 20_702}
