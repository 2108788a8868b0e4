"""The login budgets' pure parts (llog/auth/login_budget.py)."""

from __future__ import annotations

import pytest

from llog.auth.login_budget import FailedLogins, FailureLog, TokenBucket

pytestmark = pytest.mark.fast


def test_a_token_bucket_saves_up_to_its_burst_and_refills_at_its_rate() -> None:
    b = TokenBucket(rate=10, burst=3)
    assert [b.take(0.0) for _ in range(4)] == [True, True, True, False]
    assert b.take(0.05) is False and b.take(0.11) is True  # one token per 0.1 s
    assert [b.take(100.0) for _ in range(4)] == [True, True, True, False]  # never more than the burst


def test_an_address_or_user_over_its_failures_is_suspect_until_the_window_passes() -> None:
    f = FailedLogins(burst=3, window_s=10.0, delay_s=0.1)
    for i in range(3):
        assert not f.verdict("10.0.0.9", "alice", float(i)).suspect
        f.failed("10.0.0.9", "alice", float(i))
    assert f.verdict("10.0.0.9", None, 3.0).suspect and f.verdict("10.0.0.9", None, 3.0).delay_s == 0.1
    assert f.verdict("10.0.0.7", "alice", 3.0).suspect  # the user, from anywhere
    assert not f.verdict("10.0.0.7", "bob", 3.0).suspect  # nobody else
    assert not f.verdict("10.0.0.9", "alice", 10.5).suspect  # the first failures aged out


def test_the_tables_stay_bounded() -> None:
    f = FailedLogins(burst=1, max_keys=100)
    for i in range(1000):
        f.failed(f"10.0.{i // 256}.{i % 256}", f"user-{i}", 0.0)
    assert not f.verdict("10.0.0.0", "user-0", 0.0).suspect  # forgotten: among the oldest
    assert f.verdict("10.0.3.231", None, 0.0).suspect


def test_failures_are_logged_first_then_counted_per_period() -> None:
    lines: list[str] = []
    log = FailureLog(lines.append, period_s=10.0)
    for i in range(50):
        log.failed("10.0.0.9", "wrong password for alice", 0.1 * i)
    assert lines == ["failed login from 10.0.0.9: wrong password for alice"]
    log.flush(10.0)
    assert lines[1:] == ["49 more failed logins from 10.0.0.9 in the last 10 s"]
    log.failed("10.0.0.9", "wrong password for alice", 11.0)
    assert len(lines) == 3
