"""The bodies of the broker's HTTP API, declared once as msgspec structs: requests are
decoded into them (:mod:`llog.broker.schemas` adds the rules that span fields),
answers are encoded from them, and the OpenAPI document is generated from them
(:mod:`llog.broker.openapi`).

msgspec rather than pydantic or the hand-written parser it replaced: it decodes the
produce body straight from bytes into these types in C (bench figures in
bench/README, "Broker request types"), and rejects bools as integers, unknown
fields and out-of-range numbers on its own, naming the field's path.
"""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import UNSET, Meta, Struct, UnsetType

from llog.name_rules import ZONE_PATTERN
from llog.names import NAME_PATTERN, RESERVED_TOPICS, TOPIC_NAME_PATTERN

MAX_TOPIC_PARTITIONS = 10_000  # items of one request's array, and records per partition
MAX_WAIT_MS = 60_000
DEFAULT_MAX_WAIT_MS = 500
DEFAULT_PARTITION_MAX_BYTES = 1024 * 1024
DEFAULT_MAX_BYTES = 16 * 1024 * 1024
MAX_MEMBER_CHARS = 256
MAX_INT64 = 2**63 - 1

_NAME = f"^{NAME_PATTERN}$"  # groups and producer ids: Kafka's rule
Topic = Annotated[str, Meta(pattern=f"^{TOPIC_NAME_PATTERN}$",
                            extra_json_schema={"not": {"enum": sorted(RESERVED_TOPICS)}})]
Group = Annotated[str, Meta(pattern=_NAME, extra_json_schema={"not": {"enum": [".", ".."]}})]
ProducerId = Annotated[str, Meta(pattern=_NAME)]
Partition = Annotated[int, Meta(ge=0, le=MAX_INT64)]
Offset = Annotated[int, Meta(ge=0, le=MAX_INT64)]
Positive = Annotated[int, Meta(ge=1, le=MAX_INT64)]
Count = Annotated[int, Meta(ge=0, le=MAX_INT64)]
#: Standard base64 with its padding: whole groups of four, "=" only as the last one or
#: two. In the schema only: :func:`llog.broker.schemas._b64` checks the same faster than
#: a regular expression can.
BASE64_PATTERN = "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
Base64Text = Annotated[str, Meta(extra_json_schema={"contentEncoding": "base64", "pattern": BASE64_PATTERN})]


class Base64(Struct, frozen=True, forbid_unknown_fields=True):
    """Bytes that are not UTF-8 text."""

    base64: Base64Text


#: Bytes on the wire: a string (its UTF-8 bytes) or ``{"base64": …}``.
Bytes = str | Base64
Header = tuple[str, Bytes]


class RecordIn(Struct, frozen=True, forbid_unknown_fields=True):
    """A produced record as an object: ``{"value", "key", "headers"}``, or
    ``{"base64": …}`` for a value alone (the two shapes are one struct because a JSON
    object decodes into one struct type; :mod:`llog.broker.schemas` keeps them apart)."""

    value: Bytes | UnsetType | None = UNSET  # null: a tombstone
    key: Bytes | UnsetType | None = UNSET
    headers: list[Header] | UnsetType = UNSET
    base64: Base64Text | UnsetType = UNSET


#: A produced record: a value alone (string or ``{"base64": …}``) or a :class:`RecordIn`.
RecordBody = str | RecordIn


class ProduceTopicPartition(Struct, frozen=True, forbid_unknown_fields=True):
    topic: Topic
    partition: Partition
    records: Annotated[list[RecordBody], Meta(min_length=1, max_length=MAX_TOPIC_PARTITIONS)]
    producer_id: ProducerId | None = None
    sequence: Annotated[Offset, Meta(description=(
        "with producer_id: this group's sequence number (idempotent produce: a resend of one of the producer's "
        "last 5 groups with the same records is answered with their offsets, not appended; other records under "
        "a used sequence are refused, 409 SequenceReused)"
    ))] | None = None
    producer_epoch: Annotated[int, Meta(ge=0, le=2**31 - 1, description=(
        "with producer_id: the producer instance's epoch (default 0); once a newer epoch has committed to the "
        "partition, an older one's groups are refused (409 ProducerFenced). A new epoch starts at sequence 0"
    ))] | None = None


class ProduceRequest(Struct, frozen=True, forbid_unknown_fields=True):
    """``POST /produce``."""

    topic_partitions: Annotated[list[ProduceTopicPartition], Meta(min_length=1, max_length=MAX_TOPIC_PARTITIONS)]


class FetchPartition(Struct, frozen=True, forbid_unknown_fields=True):
    topic: Topic
    partition: Partition
    fetch_offset: Annotated[Offset, Meta(
        description="required without group; with group, omitted means the committed offset")] | None = None
    partition_max_bytes: Positive = DEFAULT_PARTITION_MAX_BYTES


class ConsumeRequest(Struct, frozen=True, forbid_unknown_fields=True):
    """``POST /consume``: long-polls until ``min_bytes`` or ``max_wait_ms``."""

    topic_partitions: Annotated[list[FetchPartition], Meta(min_length=1, max_length=MAX_TOPIC_PARTITIONS)]
    max_wait_ms: Annotated[int, Meta(ge=0, le=MAX_WAIT_MS)] = DEFAULT_MAX_WAIT_MS
    min_bytes: Count = 1
    max_bytes: Positive = DEFAULT_MAX_BYTES
    group: Group | None = None
    auto_offset_reset: Annotated[Literal["earliest", "latest"], Meta(
        description="with group: where a partition the group never committed starts (default earliest)")
    ] | UnsetType = UNSET

    @property
    def reset_to(self) -> str:
        return "earliest" if self.auto_offset_reset is UNSET else self.auto_offset_reset


class CommitOffset(Struct, frozen=True, forbid_unknown_fields=True):
    topic: Topic
    partition: Partition
    offset: Annotated[Offset, Meta(description="the next offset to consume")]


class CommitRequest(Struct, frozen=True, forbid_unknown_fields=True):
    """``POST /commit``: monotonic unless ``reset``; optionally fenced by an epoch or
    a member (and that member's session lease)."""

    group: Group
    offsets: Annotated[list[CommitOffset], Meta(min_length=1, max_length=MAX_TOPIC_PARTITIONS,
                                                description=(
        "each topic-partition at most once: one named twice is refused (409, InvalidRequest) and left unchanged"))]
    reset: Annotated[bool, Meta(description="allow moving backwards")] = False
    epoch: Annotated[Positive, Meta(description="fence: the group's current exclusive epoch")] | None = None
    member: Annotated[str, Meta(min_length=1, max_length=MAX_MEMBER_CHARS, description=(
        "fence: the member that must own every partition (with member_lease: that session)"))] | None = None
    member_lease: Annotated[Positive, Meta(
        description="fence: the etcd lease of that member's session (requires member)")] | None = None


class OffsetsQuery(Struct, frozen=True, forbid_unknown_fields=True):
    """``GET /offsets`` query parameters; ``topic`` lists that topic's partitions with
    no commit too."""

    group: Group
    topic: Annotated[Topic, Meta(description="only this topic; lists its partitions with no commit too")] | None = None


class BlobQuery(Struct, frozen=True, forbid_unknown_fields=True):
    """``GET /blobs`` query parameters: a byte range of a blob this broker wrote."""

    key: str
    offset: Offset
    length: Positive


Zone = Annotated[str, Meta(pattern=f"^{ZONE_PATTERN}$", description="a zone's name (LLOG_ZONE)")]


class BrokersQuery(Struct, frozen=True, forbid_unknown_fields=True):
    """``GET /brokers`` query parameters: the caller's zone, unless the ``Llog-Zone``
    header names it."""

    zone: Zone | None = None


# Answers. ``omit_defaults``: a field left UNSET is not in the JSON.


class ErrorBody(Struct, omit_defaults=True):
    """A whole request refused."""

    error: str
    error_type: str
    field: str | UnsetType = UNSET


class PartitionResult(Struct, kw_only=True, omit_defaults=True):
    """One partition's part of an answer: ``ok``, or the error that failed it."""

    topic: str
    partition: int
    ok: bool
    error_type: str | UnsetType = UNSET
    error: str | UnsetType = UNSET


class ProduceResult(PartitionResult, kw_only=True, omit_defaults=True):
    start_offset: int | UnsetType = UNSET
    end_offset: int | UnsetType = UNSET
    count: int | UnsetType = UNSET
    index_key: str | UnsetType = UNSET
    wal_uri: str | UnsetType = UNSET
    #: True for an idempotent resend of a group that had committed: its first offsets, nothing appended.
    duplicate: bool = False


class ProduceResponse(Struct, kw_only=True):
    results: list[ProduceResult]
    success_count: int = 0
    error_count: int = 0


class RecordOut(Struct):
    offset: int
    timestamp: int
    key: Bytes | None
    value: Bytes | None  # None: a tombstone
    headers: list[Header]


class ConsumeResult(PartitionResult, kw_only=True, omit_defaults=True):
    high_watermark: int | UnsetType = UNSET
    log_start_offset: int | UnsetType = UNSET
    next_offset: int | UnsetType = UNSET
    records: list[RecordOut] | UnsetType = UNSET


class ConsumeResponse(Struct, kw_only=True):
    topic_partitions: list[ConsumeResult]
    success_count: int = 0
    error_count: int = 0


class CommitResult(PartitionResult, kw_only=True, omit_defaults=True):
    offset: int | UnsetType = UNSET
    epoch: int | UnsetType = UNSET
    member: str | UnsetType = UNSET
    updated_at_ms: int | UnsetType = UNSET


class CommitResponse(Struct, kw_only=True):
    group: str
    results: list[CommitResult]
    success_count: int = 0
    error_count: int = 0


#: An answer over several partitions, with how many succeeded and failed.
ResultsBody = ProduceResponse | ConsumeResponse | CommitResponse


class PartitionLag(Struct):
    topic: str
    partition: int
    committed: int | None
    log_start_offset: int
    next_offset: int
    lag: int
    owner: str | None


class OffsetsResponse(Struct):
    group: str
    members: list[str]
    epoch: int | None
    epoch_owner: str | None
    partitions: list[PartitionLag]
    total_lag: int


class Health(Struct, omit_defaults=True):
    status: Literal["ok"]
    broker_id: Annotated[str, Meta(description="new each time the broker starts")]
    host: str
    port: int
    started_at_ms: int
    version: Annotated[str, Meta(description="the llog release this process runs (llog --version)")]
    worker: Annotated[int | UnsetType,
                      Meta(description="the worker process that answered (only with llog broker --workers)")] = UNSET
    workers: Annotated[int | UnsetType, Meta(description="the broker's worker processes (only with --workers)")] = UNSET


class BrokerEntry(Struct, omit_defaults=True):
    url: Annotated[str, Meta(description="the broker's HTTP API (LLOG_HTTP_ADVERTISED_URL, or where it listens)")]
    zone: Annotated[str | UnsetType, Meta(description="the zone it runs in (absent: it names none)")] = UNSET
    version: Annotated[str | UnsetType, Meta(description="the llog release it runs (absent: one that does not "
                                                         "register it)")] = UNSET


class Brokers(Struct):
    zone: Annotated[str | None, Meta(description="the caller's zone, as the request named it (null: none)")]
    brokers: Annotated[list[BrokerEntry], Meta(
        description="the live brokers that serve the caller: those of its zone, or every one when its zone has "
                    "none alive or it names none; by URL")]


class Check(Struct, omit_defaults=True):
    ok: bool
    latency_ms: float | UnsetType = UNSET
    error: str | UnsetType = UNSET


class Readiness(Struct):
    status: Literal["ready", "unavailable"]
    broker_id: str
    checks: dict[str, Check]
