"""Client quotas on the Kafka listener (docs/security.md, "Quotas"), as Kafka enforces
them (KIP-219): each request is counted against its client's quotas (a produce's bytes
when it is read, a fetch's answer's bytes and the time spent handling any request when
it is answered), and a client over one gets its answer at once with ``throttle_time_ms``
set, after which the listener reads nothing more from its connection for that long (and
handles no produce of that client, on any connection), so a client that honours
the field (every current one) waits on its own side and none times out. Clients of older
versions (produce before v6, fetch before v8) wait for the answer itself instead."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from llog.broker.directory import serving
from llog.kafka.zones import leader_share, zone_in_client_id
from llog.quotas.entities import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE

if TYPE_CHECKING:
    from llog.broker.state import Broker
    from llog.kafka.registry import BrokerRegistry
    from llog.metrics import Metrics

#: The first version of each API whose clients back off on ``throttle_time_ms`` (KIP-219).
_HONOURED_FROM = {"Produce": 6, "Fetch": 8}


def share(broker: Broker, registry: BrokerRegistry | None, listener_zone: str | None, request: Any,
          client_id: str | None) -> float | None:
    """The part of its byte-rate quotas the client of a produce or fetch is held to on
    this broker: the share of the request's topics' partitions it leads for the client's
    zone (:func:`llog.kafka.zones.leader_share`); ``None`` when no quota is set. Without
    I/O: the live brokers and the topics as last read."""
    if not broker.quotas.any or registry is None:
        return None
    zone = listener_zone or zone_in_client_id(client_id)
    produced = getattr(request, "topic_data", None)  # a produce's; a fetch names its topics in ``topics``
    names = [t.name for t in produced] if produced is not None else [t.topic for t in request.topics]
    counts = [(n, meta.partitions) for n in dict.fromkeys(names) if (meta := broker.conn.cached_topic(n)) is not None]
    return leader_share(serving(registry.known_live(), zone), registry.node_id, counts)


async def admit_produce(broker: Broker, principal: str, client_id: str | None, zone: str | None,
                        request_bytes: int, share: float | None) -> float:
    """A produce request just read: wait out what its client still owes its
    ``producer_byte_rate`` (another of its connections may have crossed the quota), then
    count its bytes, before it is handled; how long the client must now wait. The
    listener then reads nothing more from the connection for that long. So a client's
    pipelined requests, and its other connections, past the quota wait on its sockets
    instead of entering the shared batches ahead of other tenants' records (counted at
    the answer, after the commit, every request in flight got in first: a burst of
    several MiB per connection)."""
    if not broker.quotas.any:
        return 0.0
    user, client = principal.removeprefix("User:"), client_id or ""
    zone = zone or zone_in_client_id(client_id)
    held = broker.meter.wait_s(user, client, PRODUCER_BYTE_RATE, time.monotonic(), zone, share)
    if held > 0:
        await asyncio.sleep(held)
    return broker.meter.record(user, client, PRODUCER_BYTE_RATE, request_bytes, time.monotonic(), zone, share)


def throttle_s(broker: Broker, principal: str, client_id: str | None, zone: str | None, api: str,
               response_bytes: int, handling_s: float, share: float | None) -> float:
    """Count one answered request against its client's quotas (a produce's bytes were
    counted when it was read: :func:`admit_produce`); how long the client must now wait (0:
    within them, or none is set). ``share``: the part of the byte-rate quotas this broker
    holds the client to (:func:`llog.kafka.zones.leader_share`)."""
    if not broker.quotas.any:
        return 0.0
    user = principal.removeprefix("User:")
    client = client_id or ""
    zone = zone or zone_in_client_id(client_id)
    now = time.monotonic()
    meter = broker.meter
    wait = meter.record(user, client, REQUEST_PERCENTAGE, handling_s * 100, now, zone)
    if api == "Produce":
        wait = max(wait, meter.wait_s(user, client, PRODUCER_BYTE_RATE, now, zone, share))
    elif api == "Fetch":
        wait = max(wait, meter.record(user, client, CONSUMER_BYTE_RATE, response_bytes, now, zone, share))
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
