"""One configuration object for every llog component.

Built from keyword arguments, environment variables (``LLOG_*``) or both: explicit
arguments win over the environment, which wins over the defaults.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from llog.errors import ConfigError
from llog.name_rules import ZONE_PATTERN, ZONE_RE


def _parse_bool(text: str) -> bool:
    low = text.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off", ""):
        return False
    raise ConfigError(f"not a boolean: {text!r}")


@dataclass(frozen=True)
class LlogConfig:
    """Connection and tuning settings shared by writers, readers, broker and compactor.

    Every field has an environment variable ``LLOG_<FIELD NAME IN UPPER CASE>``
    (``etcd_endpoints`` → ``LLOG_ETCD_ENDPOINTS``), listed in the README.
    """

    #: etcd endpoints, ``host:port`` each.
    etcd_endpoints: tuple[str, ...] = ("127.0.0.1:2379",)
    #: Seconds one etcd call may take in all, over every member it tries.
    etcd_timeout_s: float = 10.0
    #: Seconds one attempt of an etcd call waits for a member before trying the next one.
    etcd_attempt_timeout_s: float = 1.0
    #: Seconds between gRPC keepalive pings on an idle etcd connection (a watch's);
    #: etcd refuses pings more often than its ``--grpc-keepalive-min-time`` (5 s).
    etcd_keepalive_s: float = 6.0
    #: etcd over TLS: the CA that signed the members' certificates (unset: plain gRPC).
    etcd_ca_file: str | None = None
    #: ... and a client certificate and its key (PEM), for members that require one.
    etcd_cert_file: str | None = None
    etcd_key_file: str | None = None
    #: etcd's own authentication (``etcdctl user add``): a user and its password.
    etcd_user: str | None = None
    etcd_password: str | None = None
    #: ``s3://bucket[/prefix]`` or ``file:///path`` (or a plain path).
    object_store: str = "file://./llog-data"
    s3_endpoint_url: str | None = None
    s3_region: str | None = None
    #: S3 server-side encryption of every object llog writes: ``AES256`` (SSE-S3) or
    #: ``aws:kms`` (SSE-KMS, with ``s3_sse_kms_key_id`` or the bucket's default key).
    s3_sse: str | None = None
    s3_sse_kms_key_id: str | None = None
    #: Retries the S3 client makes on throttling and 5xx before raising.
    s3_max_attempts: int = 5
    #: Seconds an S3 request may wait to connect, and between bytes of its answer,
    #: before it is retried: a request the store never answers fails over this soon.
    s3_timeout_s: float = 60.0
    #: Root of every etcd key and object key llog writes.
    root_prefix: str = "llog"
    #: Largest single record (value + key + headers) accepted, in bytes.
    max_record_bytes: int = 8 * 1024 * 1024
    #: Largest shared WAL blob one ``append_shared`` call may build, in bytes.
    max_blob_bytes: int = 256 * 1024 * 1024
    #: Attempts at a contended commit CAS before :class:`CasConflict` is raised.
    commit_max_attempts: int = 64
    #: A reader settles (materializes) a pending append older than this.
    settle_after_ms: int = 2000
    #: Largest span of one coalesced range GET when scanning, in bytes.
    read_max_fetch_bytes: int = 16 * 1024 * 1024
    #: Holes up to this size between slices of one blob are read through to save a GET.
    read_coalesce_gap_bytes: int = 256 * 1024
    #: Range GETs a scan starts with in flight ahead of the consumer; the read-ahead
    #: then adapts to latency, up to ``read_max_inflight`` (llog/scan/read_ahead.py).
    read_prefetch: int = 2
    #: Most range GETs one reader has in flight (its I/O threads); caps the read-ahead.
    read_max_inflight: int = 32
    #: Most bytes of range GETs one scan has in flight; bounds the read-ahead's memory.
    read_inflight_bytes: int = 64 * 1024 * 1024
    #: Bytes of shared WAL blobs a process keeps to serve other partitions' slices of
    #: the same blob without another GET; 0 turns the cache off (llog/store/blob_cache.py).
    read_cache_bytes: int = 64 * 1024 * 1024
    #: The cache's unit: a small read of a WAL blob fetches the aligned chunk around it.
    read_cache_chunk_bytes: int = 1024 * 1024
    #: Brokers serve the WAL blobs they wrote to other brokers' readers, and ask the
    #: writer of a blob for it before S3 (llog/store/peers.py; needs ``peer_url``,
    #: which a broker sets itself).
    read_peers: bool = True
    #: How long a peer read may take before the reader goes to S3 instead.
    read_peer_timeout_s: float = 0.25
    #: The URL other brokers reach this process at for peer reads; a broker sets it to
    #: its listen address unless given (behind NAT or a proxy, give the reachable one).
    peer_url: str | None = None
    #: The zone (availability zone, rack) this process runs in (docs/zones.md); unset: none.
    zone: str | None = None
    #: Topics are created on first produce when this is on (broker).
    auto_create_topics: bool = False
    #: Partition count for auto-created topics.
    default_partitions: int = 1
    batch_max_bytes: int = 1024 * 1024
    batch_max_delay_ms: int = 5
    batch_max_buffered_bytes: int = 64 * 1024 * 1024
    #: Batches a BatchingProducer has encoding, PUT or committing at once.
    batch_max_inflight: int = 2
    #: ... of which at most this many are being PUT at once (capped at batch_max_inflight).
    batch_max_inflight_puts: int = 2
    #: A WAL blob PUT still unanswered after this quantile of the recent PUTs'
    #: latencies is sent again, the first answer winning (llog/store/hedging.py); 0: never.
    put_hedge_quantile: float = 0.9
    #: ... but never before this many milliseconds (a faster store's PUT is not worth a second).
    put_hedge_min_ms: float = 20.0
    #: The broker process's first garbage-collector threshold (llog/gc_tuning.py;
    #: Python's is 700); 0 leaves the collector as Python sets it.
    gc_threshold: int = 20_000
    broker_host: str = "127.0.0.1"
    broker_port: int = 8080
    #: The URL ``GET /brokers`` gives HTTP clients for this broker (docs/zones.md; default:
    #: where it listens, a wildcard address standing for the host's name).
    http_advertised_url: str | None = None
    broker_token: str | None = None
    #: TLS on the HTTP API: a PEM certificate chain and its key (the broker then serves
    #: ``https://`` only, on its workers' private ports too).
    broker_tls_cert_file: str | None = None
    broker_tls_key_file: str | None = None
    #: The CA brokers check each other's HTTPS certificates against (peer reads); unset:
    #: their own certificate (one certificate for every broker of a deployment).
    broker_tls_ca_file: str | None = None
    #: Clients authenticate as users (``llog users``; Kafka: SASL SCRAM-SHA-256/512, PLAIN).
    auth_users: bool = False
    #: The authorizer: every Kafka request and HTTP route is checked against the ACLs
    #: (``llog acls``, ``kafka-acls.sh``); deny by default (docs/security.md).
    auth_acls: bool = False
    #: Principals the authorizer lets do everything, ``;``-separated (``User:admin;User:ops``).
    auth_super_users: str = ""
    #: Largest request body the broker accepts, in bytes (413 beyond).
    broker_max_request_bytes: int = 16 * 1024 * 1024
    #: Seconds a request body may take to arrive whole (408 beyond: no trickling client holds on).
    broker_body_timeout_s: float = 30.0
    #: Seconds a broker produce waits for room in the batch buffer before a 503.
    broker_send_timeout_s: float = 5.0
    #: The broker's WAL PUT budget, PUTs/s (llog/producer/put_budget.py; docs/broker.md,
    #: "What a broker costs"): a lightly loaded broker makes about this many (4/s: ~$52 a
    #: month at S3 Standard); full batches never wait; 0: none, a PUT per flush.
    broker_put_rate: float = 4.0
    #: PUTs the budget saves up (a minute of the default rate), then spent at full speed.
    broker_put_burst: int = 240
    #: Processes serving the broker's ports (``llog broker --workers``, llog/broker/workers.py).
    broker_workers: int = 1
    #: Port of the broker's Kafka listener (docs/kafka.md); unset: no Kafka listener.
    kafka_port: int | None = None
    #: Address the Kafka listener binds (default: ``broker_host``).
    kafka_host: str | None = None
    #: A Kafka listener per client zone, ``zone=port`` each (docs/zones.md): a client
    #: connected to one is in its zone. Worker ``i`` listens on ``port + i``.
    kafka_zone_listeners: tuple[str, ...] = ()
    #: Host name the brokers' Metadata answers give clients for this broker (default:
    #: the listen address, or 127.0.0.1 for a wildcard one).
    kafka_advertised_host: str | None = None
    #: PEM certificate chain and key: the Kafka listener then speaks TLS only
    #: (``SSL``, or ``SASL_SSL`` with ``broker_token``).
    kafka_tls_cert_file: str | None = None
    kafka_tls_key_file: str | None = None
    #: Mutual TLS: every Kafka client presents a certificate this CA signed (Kafka's
    #: ``ssl.client.auth=required``); its subject is the principal unless SASL names one.
    kafka_tls_client_ca_file: str | None = None
    #: Largest request frame the Kafka listener reads from an authenticated client
    #: (Kafka's ``socket.request.max.bytes``); a larger one closes the connection.
    kafka_max_frame_bytes: int = 100 * 1024 * 1024
    #: Largest frame read before a client has authenticated (with ``broker_token``
    #: set; Kafka's ``sasl.server.max.receive.size``).
    kafka_max_preauth_frame_bytes: int = 512 * 1024
    #: Bytes of request frames the listener holds at once, read and not yet answered,
    #: over all connections (Kafka's ``queued.max.request.bytes``): past it, the
    #: listener stops reading until answers free room. At least ``kafka_max_frame_bytes``.
    kafka_max_queued_bytes: int = 256 * 1024 * 1024
    #: Kafka connections kept, in all and per client address (more are closed at once).
    kafka_max_connections: int = 10_000
    kafka_max_connections_per_ip: int = 1_000
    #: Connections one address may open a second, on the Kafka listener (a burst of twice
    #: that); 0: no limit (Kafka's ``max.connection.creation.rate`` per IP).
    connection_rate_per_address: float = 100.0
    #: Connections all clients together may open a second (Kafka's
    #: ``max.connection.creation.rate``); 0: no limit.
    connection_rate: float = 1_000.0
    #: Failed logins from an address, or as a user, in a window, before its next ones are
    #: suspect: answered after ``auth_failure_delay_ms``, on a thread of their own.
    auth_failure_burst: int = 5
    auth_failure_window_s: float = 10.0
    auth_failure_delay_ms: int = 100
    #: Requests one connection may have read and not yet answered (then it is not read).
    kafka_max_inflight_requests: int = 64
    #: A connection idle this long is closed (Kafka's ``connections.max.idle.ms``).
    kafka_idle_timeout_s: float = 600.0
    #: A request frame must arrive whole within this many seconds of its size, and a
    #: client must authenticate within it (with ``broker_token``): a client trickling
    #: bytes is cut off.
    kafka_frame_timeout_s: float = 30.0
    #: A produced record batch's records may inflate to at most this many bytes
    #: (decompression stops there and the batch is refused); unset: 4 x ``max_record_bytes``.
    kafka_max_batch_inflated_bytes: int | None = None
    #: Records one produced record batch may hold.
    kafka_max_batch_records: int = 1_000_000
    #: Threads checking produced record batches (decompression, every record), off the
    #: event loop; each holds at most one batch's inflated records.
    kafka_check_threads: int = 2
    #: A broker asks every other registered broker's Kafka listener whether it answers,
    #: every half of this; one silent this long is left out of Metadata and
    #: FindCoordinator until it answers again (docs/operations.md, "Availability").
    kafka_peer_timeout_s: float = 1.0
    tail_cache_dir: str | None = None
    #: Bytes of recently committed records a broker keeps for tail consumers (in
    #: memory, and in ``tail_cache_dir`` when set); 0 turns the cache off.
    tail_cache_bytes: int = 64 * 1024 * 1024
    compactor_host: str = "127.0.0.1"
    compactor_port: int = 8081
    #: Age rule for objects without a session segment in their key (the layout before
    #: sessions); objects of the session layout are judged by their session (spec §11).
    vacuum_grace_s: float = 3600.0
    #: TTL in seconds of the lease behind a writer's or compactor's session key
    #: (``_sessions/{id}``): a process paused longer than this loses its session, and
    #: its staged blobs can no longer be committed.
    session_ttl_s: int = 10
    #: A writer or compactor opens a new session for new blobs once its current one is
    #: this old, and ends the old one when its last blob has committed: vacuum can take
    #: a live process's garbage only after its session ended.
    session_rotate_s: float = 600.0
    #: Compaction cuts a run of WAL entries at about this many slice bytes (a reader
    #: fetches a compacted slice whole, so keep it near ``read_max_fetch_bytes``).
    compact_target_bytes: int = 16 * 1024 * 1024
    #: ... and at this many records.
    compact_max_records: int = 1_000_000
    #: Range GETs a compaction keeps in flight while reading its run's slices.
    compact_read_prefetch: int = 16
    #: WAL entries whose index key was written less than this long ago are left
    #: alone, judged by etcd revision on the compactor's clock (compactor/revision_clock.py).
    compact_min_age_ms: int = 120_000
    #: Key compaction of a compacted topic (spec §10.2) remembers at most this many
    #: distinct keys per pass (about 120 bytes each); a pass cleans up to where its map
    #: filled, the next one goes on from there (Kafka's dedupe buffer).
    compact_key_map_entries: int = 250_000
    #: A compacted topic's partition is key-compacted once the records not cleaned yet
    #: are at least this share of its compacted bytes (Kafka's min.cleanable.dirty.ratio).
    compact_min_dirty_ratio: float = 0.5
    #: Compaction tasks the service runs at once.
    compactor_workers: int = 4
    #: TTL of the lease behind the service's ``meta/compactor-claim`` keys.
    compactor_claim_ttl_s: int = 15
    #: Seconds between passes over the known partitions.
    compactor_pass_interval_s: float = 5.0
    #: Seconds between scans for new (and deleted) topics and partitions.
    compactor_discovery_interval_s: float = 30.0
    #: Seed targets, comma separated: ``topic`` (every partition) or ``topic:partition``.
    compactor_targets: str | None = None
    #: compact_once runs one task may chain on a partition before yielding it.
    compactor_max_runs_per_task: int = 8
    #: On shutdown, seconds to let in-flight compactions finish before abandoning them.
    compactor_shutdown_timeout_s: float = 30.0
    #: Seconds between the service's vacuum passes; 0 turns them off.
    vacuum_interval_s: float = 3600.0
    #: The Iceberg catalog of table topics (llog/table/): a SQLAlchemy URL
    #: (``sqlite:////var/lib/llog/iceberg.db``, ``postgresql+psycopg2://...``) or an
    #: ``http(s)://`` REST catalog. Unset: SQLite in ``iceberg.db`` beside a ``file://``
    #: store's data; an S3 store has no default (every process of a deployment must
    #: reach the same catalog, so no path on one host will do).
    iceberg_catalog_uri: str | None = None
    #: The catalog namespace holding one table per table topic (named like the topic);
    #: unset, the root prefix, so two deployments sharing a catalog keep separate tables.
    iceberg_namespace: str | None = None
    #: Seconds between the compactor service's syncs of each table with the index;
    #: 0 turns them off (vacuum still syncs before it deletes a table's file).
    iceberg_sync_interval_s: float = 10.0
    #: Snapshots a table keeps for time travel (the newest along its history); a sync
    #: expires older ones, and vacuum deletes no file a kept snapshot names.
    iceberg_snapshots_kept: int = 100
    #: Seconds from a table topic's commit to its records being in the table, aimed at:
    #: the compactor compacts a table topic's WAL entries once half this old (instead
    #: of ``compact_min_age_ms``, if that is longer); add the service's pass and sync
    #: intervals for the bound (bench/table_freshness.py measures it).
    iceberg_freshness_s: float = 30.0
    #: Seconds between the compactor service's compactions of etcd's history, each at
    #: the revision it saw one interval earlier; 0 turns them off.
    etcd_compact_interval_s: float = 300.0
    #: A writer refuses appends (:class:`~llog.errors.BackPressure`) to a partition with
    #: more uncompacted index keys than this; 0 turns the check off.
    max_uncompacted_keys: int = 100_000
    #: Seconds between a writer's recounts of a partition's uncompacted index keys.
    backpressure_check_s: float = 1.0
    #: The compactor service deletes producer-id state not updated for this long
    #: (seconds); 0 keeps it forever.
    producer_state_ttl_s: float = 86400.0
    #: A Kafka producer's retry of a batch older than its producer window is looked up
    #: in at most this many of the partition's newest index entries (spec §8.7, "Older
    #: batches"); 0 refuses such a retry as out of order without looking.
    producer_lookback_entries: int = 4096
    #: The longest ``transaction.timeout.ms`` a transactional producer may ask for (ms;
    #: Kafka's ``transaction.max.timeout.ms``).
    txn_max_timeout_ms: int = 900_000
    #: How often each broker looks for transactions past their timeout (seconds).
    txn_sweep_s: float = 5.0
    #: A transactional id with no transaction open, unchanged for this long (seconds),
    #: is forgotten (Kafka's ``transactional.id.expiration.ms``, 7 days).
    txn_id_ttl_s: float = 604_800.0
    #: Success ops a transaction's commit may take in its one etcd transaction (etcd's
    #: ``--max-txn-ops``, 128 by default, less room for the record); spec §15.2.
    txn_max_ops: int = 120
    #: Prices behind the S3 billing estimate (USD): PUT/LIST per 1000, GET/HEAD per 1000,
    #: storage per GiB-month.
    s3_price_put_per_1000: float = 0.005
    s3_price_get_per_1000: float = 0.0004
    s3_price_gib_month: float = 0.023

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> LlogConfig:
        """Build a config from ``LLOG_*`` variables, then apply ``overrides`` (non-None)."""
        return _from_env(os.environ if env is None else env, overrides)

    def __post_init__(self) -> None:
        _validate(self)


#: Settings renamed, old ``LLOG_*`` name -> new: the old one is still read, for one release
#: after the rename, when the new one is not set (``llog.environment`` warns of it).
RENAMED: dict[str, str] = {}


def _from_env(source: Mapping[str, str], overrides: Mapping[str, Any]) -> LlogConfig:
    values: dict[str, Any] = {}
    old_names = {new: old for old, new in RENAMED.items()}
    for f in fields(LlogConfig):
        name = f"LLOG_{f.name.upper()}"
        raw = source.get(name)
        if raw is None and name in old_names:
            raw = source.get(old_names[name])
        if raw is not None:
            values[f.name] = _coerce(f.name, f.type, raw)
    cfg = LlogConfig(**values)
    clean = {k: v for k, v in overrides.items() if v is not None}
    if "etcd_endpoints" in clean and isinstance(clean["etcd_endpoints"], str):
        clean["etcd_endpoints"] = _split_endpoints(clean["etcd_endpoints"])
    return replace(cfg, **clean) if clean else cfg


def _validate(cfg: LlogConfig) -> None:
    """Refuse a config no component could run with (:class:`ConfigError` naming the setting)."""
    if not cfg.etcd_endpoints:
        raise ConfigError("etcd_endpoints is empty")
    for ep in cfg.etcd_endpoints:
        host, sep, port = ep.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ConfigError(f"etcd endpoint {ep!r} is not host:port")
    if not cfg.root_prefix or "/" in cfg.root_prefix.strip("/"):
        raise ConfigError(f"root_prefix {cfg.root_prefix!r} must be one non-empty path segment")
    for name in ("max_record_bytes", "max_blob_bytes", "commit_max_attempts", "s3_timeout_s",
                 "etcd_timeout_s", "etcd_attempt_timeout_s", "etcd_keepalive_s",
                 "read_max_fetch_bytes", "read_prefetch", "read_max_inflight", "read_inflight_bytes",
                 "read_cache_chunk_bytes", "batch_max_bytes",
                 "batch_max_buffered_bytes", "batch_max_inflight", "batch_max_inflight_puts",
                 "default_partitions", "compact_target_bytes", "compact_key_map_entries",
                 "compact_max_records", "compact_read_prefetch", "compactor_workers",
                 "compactor_claim_ttl_s", "compactor_pass_interval_s", "compactor_discovery_interval_s",
                 "compactor_max_runs_per_task", "session_ttl_s", "session_rotate_s",
                 "broker_max_request_bytes", "broker_send_timeout_s", "read_peer_timeout_s",
                 "broker_body_timeout_s", "broker_put_burst", "broker_workers",
                 "iceberg_snapshots_kept", "kafka_max_frame_bytes", "kafka_max_preauth_frame_bytes",
                 "kafka_max_queued_bytes", "kafka_max_connections", "kafka_max_connections_per_ip",
                 "auth_failure_burst", "auth_failure_window_s",
                 "kafka_max_inflight_requests", "kafka_idle_timeout_s", "kafka_frame_timeout_s",
                 "kafka_max_batch_records", "kafka_check_threads",
                 "kafka_peer_timeout_s", "txn_max_timeout_ms", "txn_sweep_s", "txn_max_ops",
                 "txn_id_ttl_s"):
        if getattr(cfg, name) <= 0:
            raise ConfigError(f"{name} must be > 0, got {getattr(cfg, name)!r}")
    for name in ("compact_min_age_ms", "iceberg_freshness_s", "vacuum_grace_s", "vacuum_interval_s",
                 "compactor_shutdown_timeout_s", "etcd_compact_interval_s", "max_uncompacted_keys",
                 "backpressure_check_s", "producer_state_ttl_s", "producer_lookback_entries", "tail_cache_bytes",
                 "read_cache_bytes", "iceberg_sync_interval_s", "put_hedge_min_ms", "gc_threshold", "broker_put_rate",
                 "connection_rate_per_address", "connection_rate", "auth_failure_delay_ms"):
        if getattr(cfg, name) < 0:
            raise ConfigError(f"{name} must be >= 0, got {getattr(cfg, name)!r}")
    _validate_security(cfg)
    if cfg.zone is not None and ZONE_RE.fullmatch(cfg.zone) is None:
        raise ConfigError(f"zone {cfg.zone!r} is not a zone name ({ZONE_PATTERN})")
    for name in ("http_advertised_url", "peer_url"):
        url = getattr(cfg, name)
        if url is not None and not re.fullmatch(r"https?://[^/\s]+(?::\d+)?/?", url):
            raise ConfigError(f"{name} {url!r} is not an http:// or https:// URL of a host (and port)")
    _validate_kafka_ports(cfg)
    if cfg.kafka_max_queued_bytes < cfg.kafka_max_frame_bytes:
        raise ConfigError(f"kafka_max_queued_bytes ({cfg.kafka_max_queued_bytes}) must be at least "
                          f"kafka_max_frame_bytes ({cfg.kafka_max_frame_bytes})")
    if cfg.kafka_max_batch_inflated_bytes is not None and (
        cfg.kafka_max_batch_inflated_bytes < cfg.max_record_bytes
    ):
        raise ConfigError(f"kafka_max_batch_inflated_bytes ({cfg.kafka_max_batch_inflated_bytes}) must be at "
                          f"least max_record_bytes ({cfg.max_record_bytes})")
    if not 0 <= cfg.put_hedge_quantile < 1:
        raise ConfigError(f"put_hedge_quantile must be in [0, 1), got {cfg.put_hedge_quantile!r}")
    if not 0.0 <= cfg.compact_min_dirty_ratio <= 1.0:
        raise ConfigError(f"compact_min_dirty_ratio must be in [0, 1], got {cfg.compact_min_dirty_ratio}")
    if cfg.compact_target_bytes > 1024**3:
        raise ConfigError("compact_target_bytes must be <= 1 GiB (one compacted body)")



def _validate_kafka_ports(cfg: LlogConfig) -> None:
    """The Kafka listener's port and the zone listeners' (worker ``i``: each port + ``i``)."""
    if cfg.kafka_port is not None and not 0 <= cfg.kafka_port <= 65535:
        raise ConfigError(f"kafka_port must be in [0, 65535], got {cfg.kafka_port!r}")
    if cfg.kafka_port and cfg.kafka_port + cfg.broker_workers > 65536:
        raise ConfigError(f"kafka_port {cfg.kafka_port} + {cfg.broker_workers} broker workers exceeds 65535")
    for listener in cfg.kafka_zone_listeners:
        zone_listener(listener, cfg.broker_workers)
    if cfg.kafka_zone_listeners and cfg.kafka_port is None:
        raise ConfigError("kafka_zone_listeners need a Kafka listener (kafka_port)")


def zone_listener(listener: str, workers: int = 1) -> tuple[str, int]:
    """A ``kafka_zone_listeners`` entry, ``zone=port``, as (zone, port); its port + each
    of ``workers`` must be a port too."""
    zone, _, port = listener.partition("=")
    if not ZONE_RE.fullmatch(zone) or not port.isdigit() or int(port) + workers > 65536:
        raise ConfigError(f"kafka_zone_listeners: {listener!r} is not zone=port (a zone name, a port in "
                          "[0, 65535], 0 for any free one)")
    return zone, int(port)


def _validate_security(cfg: LlogConfig) -> None:
    """The TLS, credential and encryption settings: pairs given together, known values."""
    for principal in filter(None, (p.strip() for p in cfg.auth_super_users.split(";"))):
        if not principal.partition(":")[2] or principal.startswith(":"):
            raise ConfigError(f"auth_super_users: {principal!r} is not Type:name (User:admin)")
    if (cfg.broker_tls_cert_file is None) != (cfg.broker_tls_key_file is None):
        raise ConfigError("broker_tls_cert_file and broker_tls_key_file go together")
    if (cfg.etcd_cert_file is None) != (cfg.etcd_key_file is None):
        raise ConfigError("etcd_cert_file and etcd_key_file go together")
    if cfg.etcd_cert_file is not None and cfg.etcd_ca_file is None:
        raise ConfigError("etcd_cert_file needs etcd_ca_file (a client certificate is a TLS thing)")
    if (cfg.etcd_user is None) != (cfg.etcd_password is None):
        raise ConfigError("etcd_user and etcd_password go together")
    if cfg.s3_sse not in (None, "AES256", "aws:kms"):
        raise ConfigError(f"s3_sse must be AES256 or aws:kms, got {cfg.s3_sse!r}")
    if cfg.s3_sse_kms_key_id is not None and cfg.s3_sse != "aws:kms":
        raise ConfigError("s3_sse_kms_key_id needs s3_sse=aws:kms")
    if (cfg.kafka_tls_cert_file is None) != (cfg.kafka_tls_key_file is None):
        raise ConfigError("kafka_tls_cert_file and kafka_tls_key_file go together")
    if cfg.kafka_tls_client_ca_file is not None and cfg.kafka_tls_cert_file is None:
        raise ConfigError("kafka_tls_client_ca_file needs kafka_tls_cert_file (client certificates are TLS)")


def _split_endpoints(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _coerce(name: str, type_: Any, raw: str) -> Any:
    t = str(type_)
    try:
        if t.startswith("tuple[str"):  # etcd_endpoints, kafka_zone_listeners: comma-separated
            return _split_endpoints(raw)
        if t == "bool":
            return _parse_bool(raw)
        if t == "int":
            return int(raw)
        if t == "float":
            return float(raw)
        if t == "int | None":
            return int(raw) if raw else None
        if "None" in t:
            return raw or None
        return raw
    except ValueError as exc:
        raise ConfigError(f"LLOG_{name.upper()}={raw!r}: {exc}") from exc
