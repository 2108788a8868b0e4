"""``POST /produce``: each topic-partition's records through the shared batching producer."""

from __future__ import annotations

from concurrent.futures import Future

import anyio.to_thread
from msgspec import UNSET
from starlette.requests import Request
from starlette.responses import Response

from llog.auth.acls import Operation, ResourceType
from llog.broker import quota_check
from llog.broker.api_types import ProduceResponse, ProduceResult
from llog.broker.http_auth import Access
from llog.broker.request_body import read_body
from llog.broker.responses import results_response
from llog.broker.schemas import ProducePartition, parse_produce
from llog.broker.screening import Records
from llog.broker.state import Broker, broker_of
from llog.broker.statuses import partition_error
from llog.errors import BackPressure, LlogError, UnknownTopic
from llog.records import payload_size
from llog.writer import AppendResult


async def produce(request: Request) -> Response:
    """Submit every group (on the event loop while nothing blocks), then await each commit."""
    b = broker_of(request)
    body = await read_body(request, b.config.broker_max_request_bytes, b.config.broker_body_timeout_s)
    quota_check.count_produced(b, request, len(body))
    req = parse_produce(body)
    access = Access(request, b) if b.authorizer is not None else None
    submitted = submit(b, req, fast=True, access=access)
    if len(submitted) < len(req):
        done = len(submitted)
        submitted += await anyio.to_thread.run_sync(lambda: submit(b, req, done, access=access))
    results: list[ProduceResult] = []
    errors: list[LlogError] = []
    for tp, item in zip(req, submitted, strict=True):
        try:
            if isinstance(item, LlogError):
                raise item
            res = await b.inbox.wrap(item)
        except LlogError as exc:
            errors.append(exc)
            results.append(partition_error(ProduceResult, tp.topic, tp.partition, exc))
            continue
        b.conn.metrics.produce_records.inc(res.count)
        b.conn.metrics.produce_bytes.inc(sum(map(payload_size, tp.records)))
        results.append(ProduceResult(
            topic=tp.topic, partition=tp.partition, ok=True, start_offset=res.start_offset,
            end_offset=res.end_offset, count=res.count, index_key=res.index_key,
            wal_uri=f"{b.config.object_store.rstrip('/')}/{res.data_key}" if res.data_key else UNSET,
            duplicate=res.duplicate,
        ))
    return results_response(ProduceResponse(results=results), errors, len(results))


def submit(
    broker: Broker, req: tuple[ProducePartition, ...], start: int = 0, *, fast: bool = False,
    access: Access | None = None,
) -> list[Future[AppendResult] | LlogError]:
    """Hand the request's groups from ``start`` on to the producer (those ``access``
    lets the caller write). ``fast`` runs on the event loop: it stops (returning fewer
    items) at the first group that could block, on etcd (a partition not seen yet) or
    on a full buffer, and the caller finishes the rest on a worker thread."""
    out: list[Future[AppendResult] | LlogError] = []
    # A topic found missing once is missing for the request's other groups too: asking
    # etcd again for each of thousands of groups cost seconds (tests/test_fuzz.py).
    unknown: dict[str, UnknownTopic] = {}
    for tp in req[start:]:
        if access is not None and not access.allows(Operation.WRITE, ResourceType.TOPIC, tp.topic):
            out.append(access.refusal(Operation.WRITE, ResourceType.TOPIC, tp.topic))
            continue
        if tp.topic in unknown:
            out.append(unknown[tp.topic])
            continue
        key = (tp.topic, tp.partition)
        # Not on the loop: a partition not seen yet, or a topic this broker forgot (it
        # was deleted: reading it again is etcd I/O).
        if fast and (key not in broker.validated or broker.conn.cached_topic(tp.topic) is None
                     or not broker.screening.fast(tp.topic)):
            break
        try:
            records: Records = tp.records
            if not fast:
                # Created here when auto-creation is on (and the caller may create it).
                broker.topic(tp.topic, create=access is None or access.may_create(tp.topic))
                records = broker.screening.screen(tp.topic, tp.partition, records)
            out.append(broker.producer.send_group(
                tp.topic, tp.partition, records, producer_id=tp.producer_id, sequence=tp.sequence,
                producer_epoch=tp.producer_epoch,
                timeout=0 if fast else None,
            ))
            broker.validated.add(key)
        except BackPressure as exc:
            if fast:
                break
            out.append(exc)
        except UnknownTopic as exc:
            unknown[tp.topic] = exc
            out.append(exc)
        except LlogError as exc:
            out.append(exc)
    return out
