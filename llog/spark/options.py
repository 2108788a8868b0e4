"""Parsing the options of ``spark.read/readStream/write.format("llog")``.

Source options follow Spark's Kafka source (``subscribe``/``topic``/``topics``,
``subscribePattern``/``topicPattern``, ``startingOffsets``/``endingOffsets`` as
``earliest``/``latest`` or ``{"topic": {"0": 23, "1": -2}}``, ``startingTimestamp``,
``startingOffsetsByTimestamp``, ``minPartitions``, ``maxRecordsPerPartition``,
``maxOffsetsPerTrigger``, ``failOnDataLoss``), plus llog's ``minRecordsPerPartition``.
Any :class:`~llog.config.LlogConfig` field is also an option, by its name in snake_case
or camelCase (``etcd_endpoints`` or ``etcdEndpoints``, ``object_store``,
``s3_endpoint_url``, ``root_prefix``, ...); fields not given come from the ``LLOG_*``
environment of the driver, then the defaults.

Spark hands options over with lower-cased names, so every name here is matched
case-insensitively. An unknown option is a :class:`ConfigError`: a typo must not
silently read the wrong thing.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from llog.config import LlogConfig
from llog.errors import ConfigError, LlogError
from llog.names import TopicPartition, check_partition, check_topic

#: Offset placeholders in the Kafka-source JSON: -2 the earliest offset, -1 the latest.
EARLIEST = -2
LATEST = -1

#: Options Spark itself may pass along with the user's (``save(path)``, the sink's
#: checkpoint); they carry no meaning for llog and are ignored.
_SPARK_OPTIONS = frozenset({"path", "checkpointlocation"})

_SOURCE_OPTIONS = frozenset(
    {
        "topic", "topics", "subscribe", "topicpattern", "subscribepattern",
        "startingoffsets", "endingoffsets", "startingtimestamp", "startingoffsetsbytimestamp",
        "minpartitions", "maxrecordsperpartition", "minrecordsperpartition", "maxoffsetspertrigger",
        "failondataloss",
    }
)
#: Default of ``minRecordsPerPartition``: ranges smaller than this share input
#: partitions of up to this many records (a Python task costs tens of milliseconds
#: however little it reads).
PACK_RECORDS = 65_536
_SINK_OPTIONS = frozenset({"topic", "transactionalid", "transactiontimeoutms"})


def _norm(name: str) -> str:
    return name.lower().replace("_", "").replace("-", "")


_CONFIG_FIELDS = {_norm(f.name): f.name for f in fields(LlogConfig)}


@dataclass(frozen=True)
class Subscription:
    """Which topics to read: a fixed list, or every topic whose name matches a regex."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None

    def matches(self, topic: str) -> bool:
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None
        return topic in self.topics


@dataclass(frozen=True)
class OffsetSpec:
    """Where a read starts or ends, per topic-partition.

    A partition resolves, in order of precedence, to: the global ``timestamp``; its
    entry in ``timestamps``; its entry in ``offsets`` (an offset, :data:`EARLIEST` or
    :data:`LATEST`); else ``default`` (:data:`EARLIEST` or :data:`LATEST`).
    """

    default: int
    offsets: tuple[tuple[str, int, int], ...] = ()
    timestamps: tuple[tuple[str, int, int], ...] = ()
    timestamp: int | None = None

    def topics(self) -> set[str]:
        return {t for t, _, _ in self.offsets} | {t for t, _, _ in self.timestamps}

    def resolve(self, topic: str, partition: int) -> TopicPartition:
        """``("timestamp", ms)`` or ``("offset", offset | EARLIEST | LATEST)``."""
        if self.timestamp is not None:
            return "timestamp", self.timestamp
        for t, p, ts in self.timestamps:
            if (t, p) == (topic, partition):
                return "timestamp", ts
        for t, p, off in self.offsets:
            if (t, p) == (topic, partition):
                return "offset", off
        return "offset", self.default


@dataclass(frozen=True)
class SourceOptions:
    """Everything a batch or stream read needs, parsed and checked."""

    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    min_partitions: int | None
    max_records_per_partition: int | None
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    config: LlogConfig
    min_records_per_partition: int = PACK_RECORDS


@dataclass(frozen=True)
class SinkOptions:
    """What ``df.write.format("llog")`` needs: the default topic and the connection;
    with ``transactional_id``, each write (a job, or a stream's micro-batch) is one
    transaction (exactly once, :mod:`llog.spark.sink_transactions`)."""

    topic: str | None
    config: LlogConfig
    transactional_id: str | None = None
    transaction_timeout_ms: int = 900_000


def config_to_dict(config: LlogConfig) -> dict[str, Any]:
    """A plain dict of ``config`` (what input partitions and tasks carry)."""
    return asdict(config)


def config_from_dict(values: Mapping[str, Any]) -> LlogConfig:
    """The inverse of :func:`config_to_dict`."""
    clean = dict(values)
    clean["etcd_endpoints"] = tuple(clean["etcd_endpoints"])
    return LlogConfig(**clean)


def connection_config(options: Mapping[str, str], *, known: frozenset[str] = frozenset()) -> LlogConfig:
    """The :class:`LlogConfig` the options describe, over the driver's ``LLOG_*``
    environment. Options in ``known`` (already normalized) belong to the caller; any
    other option that is not a config field raises :class:`ConfigError`."""
    env = {k: v for k, v in os.environ.items() if k.startswith("LLOG_")}
    for name, value in options.items():
        n = _norm(name)
        if n in known or n in _SPARK_OPTIONS:
            continue
        field = _CONFIG_FIELDS.get(n)
        if field is None:
            raise ConfigError(f"unknown llog option {name!r}")
        env[f"LLOG_{field.upper()}"] = str(value)
    return LlogConfig.from_env(env)


def parse_source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Parse read options; ``streaming`` selects Kafka's defaults (a stream starts at
    ``latest`` and has no end; a batch read spans ``earliest`` to ``latest``)."""
    opts = {_norm(k): str(v) for k, v in options.items()}
    config = connection_config(options, known=_SOURCE_OPTIONS)
    subscription = _subscription(opts)
    starting = _offset_spec(
        opts.get("startingoffsets"), "startingOffsets", LATEST if streaming else EARLIEST
    )
    by_ts = opts.get("startingoffsetsbytimestamp")
    if by_ts is not None:
        timestamps = _partition_map(by_ts, "startingOffsetsByTimestamp", 0)
        starting = OffsetSpec(starting.default, starting.offsets, timestamps)
    if "startingtimestamp" in opts:
        starting = OffsetSpec(
            starting.default, starting.offsets, starting.timestamps,
            _int(opts["startingtimestamp"], "startingTimestamp", 0),
        )
    if streaming:
        if "endingoffsets" in opts:
            raise ConfigError("endingOffsets applies to batch reads only, not to a stream")
        ending = OffsetSpec(LATEST)
    else:
        ending = _offset_spec(opts.get("endingoffsets"), "endingOffsets", LATEST)
        if ending.default == EARLIEST or any(off == EARLIEST for _, _, off in ending.offsets):
            raise ConfigError("endingOffsets cannot be 'earliest' (-2)")
    if subscription.pattern is None:
        stray = (starting.topics() | ending.topics()) - set(subscription.topics)
        if stray:
            raise ConfigError(f"offsets given for topics not subscribed: {sorted(stray)}")
    max_per_trigger = _opt_int(opts, "maxoffsetspertrigger", "maxOffsetsPerTrigger", 1)
    if max_per_trigger is not None and not streaming:
        raise ConfigError("maxOffsetsPerTrigger applies to streams only")
    return SourceOptions(
        subscription=subscription,
        starting=starting,
        ending=ending,
        min_partitions=_opt_int(opts, "minpartitions", "minPartitions", 1),
        max_records_per_partition=_opt_int(opts, "maxrecordsperpartition", "maxRecordsPerPartition", 1),
        max_offsets_per_trigger=max_per_trigger,
        fail_on_data_loss=_bool(opts.get("failondataloss", "true"), "failOnDataLoss"),
        config=config,
        min_records_per_partition=_int(
            opts.get("minrecordsperpartition", str(PACK_RECORDS)), "minRecordsPerPartition", 1
        ),
    )


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Parse write options: an optional default ``topic`` plus connection options."""
    config = connection_config(options, known=_SINK_OPTIONS)
    opts = {_norm(k): str(v) for k, v in options.items()}
    topic = _topic(opts["topic"]) if "topic" in opts else None
    tid = opts.get("transactionalid")
    if tid is not None and not 0 < len(tid) <= 200:
        raise ConfigError(f"transactionalId must be 1..200 characters, got {tid!r}")
    given = _opt_int(opts, "transactiontimeoutms", "transactionTimeoutMs", 1)
    timeout = min(900_000, config.txn_max_timeout_ms) if given is None else given
    if timeout > config.txn_max_timeout_ms:
        raise ConfigError(f"transactionTimeoutMs must be in 1..{config.txn_max_timeout_ms} "
                          f"(LLOG_TXN_MAX_TIMEOUT_MS), got {timeout}")
    return SinkOptions(topic, config, tid, timeout)


# -- helpers -------------------------------------------------------------------------
def _topic(name: str) -> str:
    try:
        return check_topic(name)
    except LlogError as exc:
        raise ConfigError(str(exc)) from None


def _subscription(opts: Mapping[str, str]) -> Subscription:
    given = [k for k in ("topic", "topics", "subscribe", "topicpattern", "subscribepattern") if k in opts]
    if len(given) != 1:
        raise ConfigError(
            "give exactly one of the options topic, topics (or subscribe: a comma list) and "
            f"topicPattern (or subscribePattern); got {given or 'none'}"
        )
    key = given[0]
    raw = opts[key]
    if key.endswith("pattern"):
        try:
            re.compile(raw)
        except re.error as exc:
            raise ConfigError(f"{key}: not a regular expression: {exc}") from None
        return Subscription(pattern=raw)
    names = [t.strip() for t in raw.split(",") if t.strip()]
    if not names:
        raise ConfigError(f"{key}: no topic given")
    return Subscription(topics=tuple(dict.fromkeys(_topic(t) for t in names)))


def _offset_spec(raw: str | None, what: str, default: int) -> OffsetSpec:
    if raw is None:
        return OffsetSpec(default)
    text = raw.strip()
    if text.lower() == "earliest":
        return OffsetSpec(EARLIEST)
    if text.lower() == "latest":
        return OffsetSpec(LATEST)
    return OffsetSpec(default, _partition_map(text, what, EARLIEST))


def _partition_map(text: str, what: str, minimum: int) -> tuple[tuple[str, int, int], ...]:
    """``{"topic": {"0": v, ...}, ...}`` as sorted ``(topic, partition, v)`` triples."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{what}: not 'earliest', 'latest' or JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{what}: expected a JSON object of topics, got {text!r}")
    out: list[tuple[str, int, int]] = []
    for topic, parts in doc.items():
        _topic(topic)
        if not isinstance(parts, dict):
            raise ConfigError(f"{what}: topic {topic!r} must map partitions to values")
        for p_text, value in parts.items():
            try:
                p = check_partition(topic, int(p_text))
            except (ValueError, LlogError):
                raise ConfigError(f"{what}: {topic!r} has an invalid partition {p_text!r}") from None
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ConfigError(f"{what}: {topic}/{p} must be an int >= {minimum}, got {value!r}")
            out.append((topic, p, value))
    return tuple(sorted(out))


def _int(text: str, what: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"{what} must be an int, got {text!r}") from None
    if value < minimum:
        raise ConfigError(f"{what} must be >= {minimum}, got {value}")
    return value


def _opt_int(opts: Mapping[str, str], key: str, what: str, minimum: int) -> int | None:
    return _int(opts[key], what, minimum) if key in opts else None


def _bool(text: str, what: str) -> bool:
    low = text.strip().lower()
    if low in ("true", "1", "yes"):
        return True
    if low in ("false", "0", "no"):
        return False
    raise ConfigError(f"{what} must be true or false, got {text!r}")
