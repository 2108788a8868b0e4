"""Partition ownership belongs to a member *session* (member id and lease), not to a
member id: a member paused past its session cannot commit, even once a new session of
the same member id owns its partitions again."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import llog
from llog.errors import NotAssigned
from llog.groups import Consumer, GroupOffsets
from tests.conftest import config_env, wait_until

# Processes paused past session timeouts: the timing is the test, so it runs alone.
pytestmark = pytest.mark.alone

WORKERS = Path(__file__).parent / "workers"


def _fill(conn: llog.Connection, partitions: int, per_partition: int) -> None:
    llog.Topics(conn).create("t", partitions)
    with llog.Writer(conn) as w:
        w.append_shared([llog.AppendGroup("t", p, [b"%d-%d" % (p, i) for i in range(per_partition)])
                         for p in range(partitions)])


def _committed(conn: llog.Connection) -> dict[int, int]:
    return {c.partition: c.offset for c in GroupOffsets(conn, "g").all()}


def test_a_member_paused_past_its_session_cannot_commit_after_its_id_rejoined(
    conn: llog.Connection,
) -> None:
    _fill(conn, 2, 5)
    zombie = subprocess.Popen(
        [sys.executable, str(WORKERS / "zombie_member.py"), "g", "t", "m1", "10"],
        env=config_env(conn.config), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )
    assert zombie.stdin is not None and zombie.stdout is not None
    try:
        assert zombie.stdout.readline().strip() == "joined"
        assert zombie.stdout.readline().strip() == "polled 10"
        zombie.send_signal(signal.SIGSTOP)
        member_key = conn.keys.group_member("g", "m1")
        wait_until(lambda: conn.etcd.get(member_key) is None, 30, "the paused member's session to expire")
        # A new session of the same member id takes both partitions back.
        with Consumer(conn, "g", ["t"], member_id="m1", session_ttl_s=2) as fresh:
            assert fresh.assignment() == {("t", 0), ("t", 1)}
            zombie.send_signal(signal.SIGCONT)
            zombie.stdin.write("commit\n")
            zombie.stdin.flush()
            outcome = json.loads(zombie.stdout.readline())
            assert outcome.get("error_type") == "NotAssigned", outcome
            assert _committed(conn) == {}
            # The live session commits; the zombie's old session token still cannot.
            assert len(fresh.poll(max_records=3, timeout_s=0)) == 3
            fresh.commit()
            committed = _committed(conn)
            assert sum(committed.values()) == 3
        assert zombie.wait(timeout=30) == 0
    finally:
        if zombie.poll() is None:
            zombie.send_signal(signal.SIGCONT)
            zombie.kill()
            zombie.wait()
    assert _committed(conn) == committed


def test_ownership_of_a_rejoined_session_is_not_the_old_sessions(conn: llog.Connection) -> None:
    """In one process: a session that lost its lease (revoked here, as an expiry would)
    cannot commit once the member rejoined; the new session can."""
    _fill(conn, 1, 4)
    with Consumer(conn, "g", ["t"], member_id="m1", rebalance_interval_s=0) as c:
        assert len(c.poll(max_records=4, timeout_s=0)) == 4
        old = c.fence
        assert c.membership is not None
        conn.etcd.revoke_lease(c.membership.lease)
        wait_until(lambda: c.membership is not None and c.membership.lost, 30, "the lost session to be noticed")
        # The poll rejoins (a new session owns the partition again) and, nothing being
        # committed, reads the records again.
        assert len(c.poll(max_records=4, timeout_s=0)) == 4
        assert c.assignment() == {("t", 0)}
        with pytest.raises(NotAssigned):
            GroupOffsets(conn, "g").commit("t", 0, 4, fence=old, member="m1")
        assert _committed(conn) == {}
        c.commit()
    assert _committed(conn) == {0: 4}
