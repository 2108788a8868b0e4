"""What a failed login costs, and who pays: budgets that keep a flood of wrong passwords
from slowing anyone else (docs/security.md, "Failed logins").

- :class:`FailedLogins` counts failures per address and per user over a sliding window.
  An address (or a user) over its budget is *suspect*: its next attempts are answered
  only after a delay (Kafka's ``connection.failed.authentication.delay.ms``), and their
  key derivations run on the suspects' own small pool, never on the threads honest
  logins, produce and consume use.
- :class:`TokenBucket` bounds a rate (connections opened per address and in all,
  Kafka's ``max.connection.creation.rate``).
- :class:`FailureLog` logs the first failure from an address, then one counted line per
  period ("N more from ADDRESS in the last 10 s") instead of a line per failure.
"""

from __future__ import annotations

import collections
import hashlib
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from llog.config import LlogConfig
from llog.metrics import Metrics

log = logging.getLogger(__name__)


@dataclass
class TokenBucket:
    """``rate`` tokens a second, at most ``burst`` saved up."""

    rate: float
    burst: float
    _tokens: float = field(default=-1.0)
    _at: float = 0.0

    def take(self, now: float, n: float = 1.0) -> bool:
        """Take ``n`` tokens at ``now`` (seconds, monotonic) if there are that many."""
        if self._tokens < 0:
            self._tokens, self._at = self.burst, now
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        if self._tokens >= n:
            self._tokens -= n
            return True
        return False


@dataclass(frozen=True)
class Verdict:
    """How to treat a login attempt before its credentials are checked."""

    #: The address or user is over its failure budget: check on the suspects' pool.
    suspect: bool
    #: Seconds to hold a failed answer back (and then close the connection).
    delay_s: float


class FailedLogins:
    """Failed logins per address and per user over the last ``window_s`` seconds; more
    than ``burst`` of either makes the next attempts suspect. Bounded: the least recently
    failing keys are forgotten beyond ``max_keys`` each."""

    def __init__(self, *, burst: int = 5, window_s: float = 10.0, delay_s: float = 0.1,
                 max_keys: int = 100_000) -> None:
        self.burst, self.window_s, self.delay_s, self.max_keys = burst, window_s, delay_s, max_keys
        self._by_address: collections.OrderedDict[str, collections.deque[float]] = collections.OrderedDict()
        self._by_user: collections.OrderedDict[str, collections.deque[float]] = collections.OrderedDict()

    def verdict(self, address: str, user: str | None, now: float) -> Verdict:
        suspect = (self._count(self._by_address, address, now) >= self.burst
                   or (user is not None and self._count(self._by_user, user, now) >= self.burst))
        return Verdict(suspect, self.delay_s if suspect else 0.0)

    def failed(self, address: str, user: str | None, now: float) -> None:
        self._add(self._by_address, address, now)
        if user is not None:
            self._add(self._by_user, user, now)

    def _count(self, table: collections.OrderedDict[str, collections.deque[float]], key: str, now: float) -> int:
        times = table.get(key)
        if times is None:
            return 0
        while times and times[0] <= now - self.window_s:
            times.popleft()
        if not times:
            del table[key]
            return 0
        return len(times)

    def _add(self, table: collections.OrderedDict[str, collections.deque[float]], key: str, now: float) -> None:
        times = table.pop(key, None) or collections.deque(maxlen=max(self.burst, 1) * 4)
        times.append(now)
        table[key] = times  # most recent last
        while len(table) > self.max_keys:
            table.popitem(last=False)


class FailureLog:
    """One log line for the first failure from an address, then at most one counted
    line per ``period_s`` for the rest from it."""

    def __init__(self, log: Callable[[str], None], period_s: float = 10.0) -> None:
        self._log, self.period_s = log, period_s
        #: address -> (when its current period started, failures since then not logged)
        self._periods: dict[str, list[float]] = {}

    def failed(self, address: str, detail: str, now: float) -> None:
        period = self._periods.get(address)
        if period is None or now - period[0] >= self.period_s:
            if period is not None and period[1]:
                self._log(f"{period[1]:.0f} more failed logins from {address} in the last {self.period_s:.0f} s")
            self._periods[address] = [now, 0.0]
            self._log(f"failed login from {address}: {detail}")
            return
        period[1] += 1

    def flush(self, now: float) -> None:
        """Log the counts of the periods that have ended (called every period)."""
        for address, (start, pending) in list(self._periods.items()):
            if now - start >= self.period_s:
                if pending:
                    self._log(f"{pending:.0f} more failed logins from {address} in the last {self.period_s:.0f} s")
                del self._periods[address]




def login_guard(config: LlogConfig, metrics: Metrics) -> LoginGuard:
    """The guard ``config``'s ``auth_failure_*`` and ``connection_rate*`` settings ask for."""
    return LoginGuard(metrics, burst=config.auth_failure_burst, window_s=config.auth_failure_window_s,
                      delay_s=config.auth_failure_delay_ms / 1000,
                      connection_rate_per_address=config.connection_rate_per_address,
                      connection_rate=config.connection_rate)


class LoginGuard:
    """One broker process's defences around logins, shared by its Kafka listener and
    HTTP API: connection-opening rates (per address and in all), failed logins per
    address and user (:class:`FailedLogins`), the pools logins are checked on (honest
    ones on a small pool of their own, suspects' on one thread: neither on the threads
    produce and consume use), a memo of credentials that just failed (a repeated wrong
    password is refused without deriving its key again) and the failures' log."""

    def __init__(self, metrics: Metrics, *, burst: int, window_s: float, delay_s: float,
                 connection_rate_per_address: float, connection_rate: float) -> None:
        self._metrics = metrics
        self._lock = threading.Lock()
        self._failures = FailedLogins(burst=burst, window_s=window_s, delay_s=delay_s)
        self._log = FailureLog(log.warning, period_s=window_s)
        self._per_address_rate = connection_rate_per_address
        self._addresses: collections.OrderedDict[str, TokenBucket] = collections.OrderedDict()
        self._all = TokenBucket(connection_rate, max(1.0, connection_rate)) if connection_rate > 0 else None
        self._bad: collections.OrderedDict[bytes, float] = collections.OrderedDict()
        self._window_s = window_s
        self.honest = ThreadPoolExecutor(max_workers=2, thread_name_prefix="llog-login")
        self.suspects = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llog-login-suspect")
        # The failures' counted lines once their period ends, even when no failure follows.
        self._stop = threading.Event()
        self._flusher = threading.Thread(target=self._flushes, name="llog-login-log", daemon=True)
        self._flusher.start()

    def admit(self, address: str, now: float) -> str | None:
        """Whether a connection from ``address`` may open at ``now``; the limit it
        reached when not."""
        with self._lock:
            if self._per_address_rate > 0:
                bucket = self._addresses.pop(address, None) or TokenBucket(
                    self._per_address_rate, max(1.0, 2 * self._per_address_rate))
                self._addresses[address] = bucket
                while len(self._addresses) > _MAX_ADDRESSES:
                    self._addresses.popitem(last=False)
                if not bucket.take(now):
                    return "connection_rate_per_address"
            if self._all is not None and not self._all.take(now):
                return "connection_rate"
        return None

    def verdict(self, address: str, user: str | None, now: float, listener: str | None = None) -> Verdict:
        """How to check a login from ``address`` as ``user`` (counted as a suspect's
        when ``listener`` is given)."""
        with self._lock:
            verdict = self._failures.verdict(address, user, now)
        if verdict.suspect and listener is not None:
            self._metrics.login_suspects.labels(listener).inc()
        return verdict

    def executor(self, verdict: Verdict) -> ThreadPoolExecutor:
        return self.suspects if verdict.suspect else self.honest

    def known_bad(self, user: str, secret: bytes, now: float) -> bool:
        """Whether ``user`` with ``secret`` failed within the window (refused again
        without deriving its key)."""
        key = self._digest(user, secret)
        with self._lock:
            at = self._bad.get(key)
            return at is not None and now - at < self._window_s

    def failed(self, listener: str, address: str, user: str | None, detail: str, now: float,
               secret: bytes | None = None, *, remembered: bool = False) -> None:
        """Count and log a failed login (``remembered``: refused by :meth:`known_bad`)."""
        self._metrics.login_failures.labels(listener, "remembered" if remembered else "checked").inc()
        with self._lock:
            self._failures.failed(address, user, now)
            self._log.failed(address, f"{listener}: {detail}", now)
            if secret is not None and user is not None:
                self._bad[self._digest(user, secret)] = now
                while len(self._bad) > _MAX_ADDRESSES:
                    self._bad.popitem(last=False)

    def close(self) -> None:
        self._stop.set()
        self._flusher.join()
        self.honest.shutdown(wait=False, cancel_futures=True)
        self.suspects.shutdown(wait=False, cancel_futures=True)

    def _flushes(self) -> None:
        while not self._stop.wait(min(1.0, self._window_s)):
            with self._lock:
                self._log.flush(time.monotonic())

    @staticmethod
    def _digest(user: str, secret: bytes) -> bytes:
        return hashlib.sha256(user.encode() + b"\0" + secret).digest()


#: Addresses (and failed credentials) remembered at most.
_MAX_ADDRESSES = 100_000
