"""A group coordinator paused or starved of CPU for a few seconds (past its 3 s stall
threshold, well inside the members' session timeouts) keeps every group etcd still
backs, including a member half-way through joining, and lets go of one another
coordinator moved on meanwhile. Raw JoinGroup/SyncGroup/Heartbeat requests, so each
step is taken exactly in the window it tests; the broker's stall counter says when the
coordinator has looked at its groups again."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from kafka.protocol.consumer import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)

from llog.config import LlogConfig
from llog.connection import Connection
from llog.groups.epoch import bump_epoch
from llog.kafka.coordinator import PAUSED_S
from llog.kafka.errors import ErrorCode
from tests.conftest import wait_until
from tests.test_kafka import KafkaBroker, _exchange, kafka_broker

GROUP = "stalled"


def _join(kb: KafkaBroker, member_id: str) -> Any:
    R = JoinGroupRequest[5]
    return _exchange(kb.bootstrap, R(group_id=GROUP, session_timeout_ms=30_000, rebalance_timeout_ms=30_000,
                                     member_id=member_id, group_instance_id=None, protocol_type="consumer",
                                     protocols=[R.JoinGroupRequestProtocol(name="range", metadata=b"m")]),
                     JoinGroupResponse)


def _sync(kb: KafkaBroker, generation: int, member_id: str) -> Any:
    R = SyncGroupRequest[3]
    return _exchange(kb.bootstrap, R(group_id=GROUP, generation_id=generation, member_id=member_id,
                                     group_instance_id=None, assignments=[
                                         R.SyncGroupRequestAssignment(member_id=member_id, assignment=b"a")]),
                     SyncGroupResponse)


def _heartbeat(kb: KafkaBroker, generation: int, member_id: str) -> int:
    got = _exchange(kb.bootstrap, HeartbeatRequest[3](group_id=GROUP, generation_id=generation, member_id=member_id,
                                                      group_instance_id=None), HeartbeatResponse)
    return int(got.error_code)


@contextmanager
def _stalled(kb: KafkaBroker, conn: Connection | None = None) -> Iterator[None]:
    """Stop the broker past the stall threshold (the body runs while it is stopped),
    then wait until its coordinator has checked its groups."""
    before = kb.http.prometheus("llog_kafka_coordinator_stalls_total") or 0
    os.kill(kb.http.proc.pid, signal.SIGSTOP)
    try:
        yield
        time.sleep(PAUSED_S + 1)  # the fault itself: the stall the coordinator must notice
    finally:
        os.kill(kb.http.proc.pid, signal.SIGCONT)
    wait_until(lambda: (kb.http.prometheus("llog_kafka_coordinator_stalls_total") or 0) > before, 30,
               "the coordinator to check its groups after the stall")


@pytest.fixture(name="kb")
def kb_fixture(config: LlogConfig) -> Iterator[KafkaBroker]:
    with kafka_broker(config) as b:
        yield b


def test_a_member_joining_and_syncing_across_two_stalls_is_kept(kb: KafkaBroker) -> None:
    first = _join(kb, "")
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    member = first.member_id
    with _stalled(kb):  # between MEMBER_ID_REQUIRED and the join with that id
        pass
    joined = _join(kb, member)
    assert (joined.error_code, joined.member_id, joined.leader) == (0, member, member)
    with _stalled(kb):  # between the join and the leader's sync: nothing is in etcd yet
        pass
    synced = _sync(kb, joined.generation_id, member)
    assert (synced.error_code, synced.assignment) == (0, b"a")
    assert _heartbeat(kb, joined.generation_id, member) == 0
    assert kb.http.prometheus("llog_kafka_coordinator_stall_groups_total", outcome="kept") == 2
    assert not kb.http.prometheus("llog_kafka_coordinator_stall_groups_total", outcome="let_go")


def test_a_group_moved_on_during_a_stall_is_let_go(kb: KafkaBroker, conn: Connection) -> None:
    member = _join(kb, "").member_id
    joined = _join(kb, member)
    assert _sync(kb, joined.generation_id, member).error_code == 0
    with _stalled(kb):  # another coordinator rebalances the group meanwhile
        bump_epoch(conn, GROUP, "another-coordinator")
    assert _heartbeat(kb, joined.generation_id, member) == ErrorCode.UNKNOWN_MEMBER_ID
    assert kb.http.prometheus("llog_kafka_coordinator_stall_groups_total", outcome="let_go") == 1
