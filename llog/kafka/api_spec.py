"""What serving one Kafka API takes: its request type, the versions served and the
handler (:data:`llog.kafka.apis.API_BY_KEY` lists them; the ApiVersions answer is built
from them)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from kafka.protocol.api_message import ApiMessage

from llog.kafka.context import Context


@dataclass(frozen=True)
class Api:
    request: type[ApiMessage]
    min_version: int
    max_version: int
    #: ``handler(context, request)``: the response (``None``: none is sent, acks=0);
    #: ``None``: the listener answers it (SASL: the connection's own state).
    handler: Callable[[Context, Any], Any] | None
    #: How the listener runs the handler: ``async`` (a coroutine, on the event loop),
    #: ``blocking`` (a plain function that reaches etcd or S3, on a worker thread), or
    #: ``ordered`` (a coroutine whose own await runs before the connection's next
    #: request is read and returns an awaitable of the response: produce, so appends
    #: keep arrival order).
    runs: Literal["async", "blocking", "ordered"] = "async"
