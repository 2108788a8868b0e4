"""Each client's use against its quota, in one broker process: :meth:`QuotaMeter.record`
adds what a request used and says how long its client must now wait.

Clients are measured by the entity whose quota applies to them (Kafka's sensors), a
default standing for the client's own name: with a quota on user ``alice``, all of
alice's client ids share one rate; with one on the default client id, each client id
has its own. A broker holds a client to a share of its quota: on the Kafka listener the
share of the request's partitions it leads (a client spreading its records over a
topic's partitions gets its whole quota across the brokers, however unevenly they lead
them), never less than one over the live brokers serving the client; over HTTP that one
over the live brokers (docs/security.md, "Quotas"). Rates idle for an hour are
forgotten."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from llog.quotas.entities import ANONYMOUS, DEFAULT, QuotaEntity, QuotaKind
from llog.quotas.rate import SampledRate

#: Seconds a client's rate is kept after its last request (Kafka: an hour).
IDLE_S = 3600.0
#: The longest throttle (Kafka caps it at the rate's full window of samples).
MAX_THROTTLE_S = 11.0

Limit = Callable[[str | None, str, QuotaKind], tuple[QuotaEntity, float] | None]


@dataclass
class _Meter:
    rate: SampledRate
    last: float


class QuotaMeter:
    """``limit(user, client_id, kind)``: the quota that applies and its entity
    (:meth:`llog.quotas.cache.Quotas.limit`); ``brokers(zone)``: how many live brokers
    serve a client of ``zone`` (``None``: no zone), at least 1."""

    def __init__(self, limit: Limit, brokers: Callable[[str | None], int]) -> None:
        self._limit, self._brokers = limit, brokers
        self._meters: dict[tuple[QuotaEntity, QuotaKind], _Meter] = {}
        self._swept = 0.0

    def wait_s(self, user: str | None, client_id: str, kind: QuotaKind, now: float, zone: str | None = None,
               share: float | None = None) -> float:
        """How long the client must still wait at ``now`` (:meth:`record` with nothing)."""
        return self.record(user, client_id, kind, 0.0, now, zone, share)

    def record(self, user: str | None, client_id: str, kind: QuotaKind, value: float, now: float,
               zone: str | None = None, share: float | None = None) -> float:
        """Add ``value`` (bytes; for ``request_percentage``, seconds of handling times 100)
        used at ``now``; the seconds the client must wait before its next request (0:
        within its quota, or none applies). ``share``: the part of the quota this broker
        holds the client to (the Kafka listener's, from the partitions it leads:
        :func:`llog.kafka.zones.leader_share`); by default one over the live brokers
        serving the client."""
        found = self._limit(user, client_id, kind)
        if found is None:
            return 0.0
        entity, quota = found
        key = (QuotaEntity(user or ANONYMOUS if entity.user is DEFAULT else entity.user,
                           client_id if entity.client_id is DEFAULT else entity.client_id), kind)
        meter = self._meters.get(key)
        if meter is None:
            meter = self._meters[key] = _Meter(SampledRate(), now)
        meter.rate.record(value, now)
        meter.last = now
        if now - self._swept > 60.0:
            self._sweep(now)
        bound = quota * share if share is not None else quota / max(1, self._brokers(zone))
        return min(MAX_THROTTLE_S, meter.rate.throttle_s(bound, now))

    def _sweep(self, now: float) -> None:
        self._swept = now
        for key in [k for k, m in self._meters.items() if now - m.last > IDLE_S]:
            del self._meters[key]
