"""Client quotas on the Kafka listener (docs/security.md, "Quotas"), as Kafka enforces
them (KIP-219): each answered request is counted against its client's quotas (a
produce's bytes, a fetch's answer's bytes, the time spent handling any request), and a
client over one gets its answer at once with ``throttle_time_ms`` set, after which the
listener reads nothing more from its connection for that long, so a client that honours
the field (every current one) waits on its own side and none times out. Clients of older
versions (produce before v6, fetch before v8) wait for the answer itself instead."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from llog.kafka.zones import zone_in_client_id
from llog.quotas.entities import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE

if TYPE_CHECKING:
    from llog.broker.state import Broker
    from llog.metrics import Metrics

#: The first version of each API whose clients back off on ``throttle_time_ms`` (KIP-219).
_HONOURED_FROM = {"Produce": 6, "Fetch": 8}


def throttle_s(broker: Broker, principal: str, client_id: str | None, zone: str | None, api: str,
               request_bytes: int, response_bytes: int, handling_s: float) -> float:
    """Count one answered request against its client's quotas; how long the client must
    now wait (0: within them, or none is set)."""
    if not broker.quotas.any:
        return 0.0
    user = principal.removeprefix("User:")
    client = client_id or ""
    zone = zone or zone_in_client_id(client_id)
    now = time.monotonic()
    meter = broker.meter
    wait = meter.record(user, client, REQUEST_PERCENTAGE, handling_s * 100, now, zone)
    if api == "Produce":
        wait = max(wait, meter.record(user, client, PRODUCER_BYTE_RATE, request_bytes, now, zone))
    elif api == "Fetch":
        wait = max(wait, meter.record(user, client, CONSUMER_BYTE_RATE, response_bytes, now, zone))
    return wait


def in_answer(response: Any, api: str, version: int, wait_s: float) -> bool:
    """Put ``wait_s`` in the answer's ``throttle_time_ms``; whether the client backs off
    on it (else the listener holds the answer back that long instead)."""
    if hasattr(response, "throttle_time_ms"):
        response.throttle_time_ms = round(wait_s * 1000)
    return version >= _HONOURED_FROM.get(api, 0)


async def throttled_frame(response: Any, api: str, version: int, wait_s: float, metrics: Metrics) -> bytes:
    """The answer's frame again, saying how long to wait; for a client that would not
    wait (:func:`in_answer`), only once that time has passed."""
    metrics.quota_throttles.labels("kafka", api).inc()
    metrics.quota_throttle_seconds.labels("kafka").inc(wait_s)
    if not in_answer(response, api, version, wait_s):
        await asyncio.sleep(wait_s)
    frame: bytes = response.encode(header=True, framed=True)
    return frame
