"""Prometheus metrics for one llog client (names prefixed ``llog_``).

Each :class:`Metrics` owns its own ``CollectorRegistry`` so two clients in one process
(tests, a broker next to a compactor) never share or clash over counters. A server
exposes its registry at ``/metrics/prometheus``; :meth:`Metrics.snapshot` gives the
same values as plain JSON.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_SIZE_BUCKETS = tuple(float(2**i) for i in range(8, 29, 2))


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        self._declare_stores(r)
        self._declare_write_read(r)
        self._declare_sessions_producer(r)
        self._declare_transactions(r)
        self._declare_broker(r)
        self._declare_kafka_peers(r)
        self._declare_kafka_groups(r)
        self._declare_auth(r)

    def _declare_auth(self, r: CollectorRegistry) -> None:
        self.kafka_authentications = Counter(
            "llog_kafka_authentications", "Kafka SASL authentications by mechanism and result (ok, failed)",
            ["mechanism", "result"], registry=r,
        )
        self.http_authentications = Counter(
            "llog_http_authentications", "HTTP Basic password checks by result (ok, failed; a success is then "
            "remembered for 5 s), and requests answered 401 (result refused)", ["result"], registry=r,
        )
        self.authorization_denials = Counter(
            "llog_authorization_denials", "Requests the authorizer (LLOG_AUTH_ACLS) refused, by operation, "
            "resource type and listener (kafka, http)", ["operation", "resource_type", "listener"], registry=r,
        )
        self.acls = Gauge("llog_acls", "ACLs the broker's authorizer holds (LLOG_AUTH_ACLS)", registry=r)
        self.acl_reloads = Counter("llog_acl_reloads", "Times the authorizer re-read the ACLs after a change, "
                                   "by result (ok; failed: tried again with back-off)", ["result"], registry=r)
        self.quota_entities = Gauge("llog_quota_entities", "Users, client ids and (user, client id) pairs with "
                                    "client quotas set, as this process holds them", registry=r)
        self.login_failures = Counter(
            "llog_login_failures", "Failed logins (Kafka SASL, HTTP Basic) by listener and how they were refused: "
            "checked (a key derived or a SCRAM proof checked), remembered (the same password just failed: refused "
            "without deriving it again)", ["listener", "check"], registry=r)
        self.login_suspects = Counter(
            "llog_login_suspects", "Logins checked as suspects (their address or user over LLOG_AUTH_FAILURE_BURST "
            "failures in LLOG_AUTH_FAILURE_WINDOW_S): on their own thread, a failure answered after "
            "LLOG_AUTH_FAILURE_DELAY_MS", ["listener"], registry=r)
        self.quota_throttles = Counter("llog_quota_throttles", "Requests answered with a wait for a client over its "
                                       "quota, by listener and request", ["listener", "api"], registry=r)
        self.quota_throttle_seconds = Counter("llog_quota_throttle_seconds", "Seconds clients over their quotas were "
                                              "told to wait, by listener", ["listener"], registry=r)
        self.quota_reloads = Counter("llog_quota_reloads", "Times the client quotas were re-read after a change, "
                                     "by result (ok; failed: tried again with back-off)", ["result"], registry=r)
        self.schema_refusals = Counter(
            "llog_schema_refusals", "Produced values a topic's schema refused (value_validation), by what "
            "became of them (refuse: their batch was refused; dlq: dead-lettered)", ["validation"], registry=r,
        )

    def _declare_stores(self, r: CollectorRegistry) -> None:
        self.etcd_ops = Counter("llog_etcd_ops", "etcd RPCs by operation", ["op"], registry=r)
        self.etcd_watch_strays = Counter(
            "llog_etcd_watch_strays", "watch streams that delivered another key's changes (reopened, the key re-read)",
            registry=r,
        )
        self.etcd_failovers = Counter(
            "llog_etcd_failovers", "etcd calls that failed on a member and moved on (or gave up)", registry=r
        )
        self.etcd_latency = Histogram(
            "llog_etcd_op_seconds", "etcd RPC latency", ["op"], buckets=_LATENCY_BUCKETS, registry=r
        )
        self.s3_ops = Counter("llog_s3_ops", "object store requests by operation", ["op"], registry=r)
        self.s3_bytes = Counter(
            "llog_s3_bytes", "object store payload bytes by direction", ["direction"], registry=r
        )
        self.s3_latency = Histogram(
            "llog_s3_op_seconds", "object store request latency", ["op"],
            buckets=_LATENCY_BUCKETS, registry=r,
        )

    def _declare_write_read(self, r: CollectorRegistry) -> None:
        self.appends = Counter(
            "llog_partition_appends", "partition appends by outcome", ["outcome"], registry=r
        )
        self.append_records = Counter("llog_append_records", "records committed", registry=r)
        self.older_batch_lookups = Counter(
            "llog_producer_older_batch_lookups",
            "Kafka producer retries older than the producer window, looked up in the log, by outcome "
            "(retry: found, answered with its offsets; reused: other records under the sequence; "
            "not_found: answered out of order)", ["outcome"], registry=r,
        )
        self.commit_conflicts = Counter(
            "llog_commit_cas_conflicts", "commit CAS attempts that lost and were retried", registry=r
        )
        self.put_hedges = Counter(
            "llog_put_hedges", "WAL blob PUTs sent a second time (sent), and those answered first (won)",
            ["outcome"], registry=r
        )
        self.blob_bytes = Histogram(
            "llog_shared_blob_bytes", "shared WAL blob sizes", buckets=_SIZE_BUCKETS, registry=r
        )
        self.pending_settled = Counter(
            "llog_pending_settled", "idle pending appends materialized by a helper", registry=r
        )
        self.read_records = Counter("llog_read_records", "records returned by readers", registry=r)
        self.read_bytes = Counter("llog_read_bytes", "slice bytes fetched by readers", registry=r)
        # The WAL blob cache (llog/store/blob_cache.py); hit ratio = hit / all lookups.
        self.read_cache_requests = Counter(
            "llog_read_cache_requests",
            "chunk lookups in the WAL blob cache: hit, miss (one GET) or wait (for a GET in flight)",
            ["result"], registry=r,
        )
        self.read_cache_bytes = Gauge("llog_read_cache_bytes", "bytes held by the WAL blob cache", registry=r)
        self.read_cache_evictions = Counter(
            "llog_read_cache_evictions", "chunks evicted from the WAL blob cache", registry=r
        )
        self.read_peer_requests = Counter(
            "llog_read_peer_requests",
            "blob chunks asked of the broker that wrote them: hit, miss (not held) or error; other_zone: not asked, "
            "the writer is in another zone (or names none)", ["outcome"],
            registry=r,
        )
        self.read_ahead_depth = Gauge(
            "llog_read_ahead_depth", "range GETs a reader's scans keep in flight (adapts to latency)", registry=r
        )

    def _declare_sessions_producer(self, r: CollectorRegistry) -> None:
        # Sessions (llog/state/session.py).
        self.sessions_opened = Counter(
            "llog_sessions_opened", "writer and compactor sessions opened", ["kind"], registry=r
        )
        self.sessions_expired = Counter(
            "llog_sessions_expired", "sessions found ended while still in use", ["kind"], registry=r
        )
        # Batching producer.
        self.producer_queue_bytes = Gauge(
            "llog_producer_queue_bytes", "bytes buffered or in flight in batching producers", registry=r
        )
        self.producer_queue_records = Gauge(
            "llog_producer_queue_records", "records buffered in batching producers", registry=r
        )
        self.producer_flushes = Counter(
            "llog_producer_flushes", "producer flushes by reason", ["reason"], registry=r
        )
        self.producer_flush_bytes = Histogram(
            "llog_producer_flush_bytes", "record bytes per producer flush", buckets=_SIZE_BUCKETS, registry=r
        )
        self.producer_backpressure = Counter(
            "llog_producer_backpressure", "sends refused because the buffer stayed full", registry=r
        )
        self.producer_budget_hold = Histogram(
            "llog_producer_put_budget_hold_seconds",
            "how long a due batch waited for the PUT budget (llog/producer/put_budget.py)",
            buckets=_LATENCY_BUCKETS, registry=r,
        )

    def _declare_transactions(self, r: CollectorRegistry) -> None:
        self.transactions = Counter(
            "llog_transactions", "transactions ended, by outcome (commit, abort, expired, fenced: aborted by a "
            "new producer instance), and ends refused as late (late_end: an end of an earlier transaction, spec "
            "§15.2)", ["outcome"], registry=r,
        )
        self.transaction_staged = Counter(
            "llog_transaction_staged_batches", "batches staged in transactions, by outcome (staged, duplicate, "
            "refused)", ["outcome"], registry=r,
        )
        self.transaction_folds = Counter(
            "llog_transaction_folds", "transaction commits that folded their batches first (protocol §15.2)",
            registry=r,
        )

    def _declare_broker(self, r: CollectorRegistry) -> None:
        self.zone = Gauge("llog_zone", "1, labelled with the zone this process runs in (LLOG_ZONE); absent without one",
                          ["zone"], registry=r)
        self.http_requests = Counter(
            "llog_http_requests", "broker HTTP requests by route and status", ["route", "status"], registry=r
        )
        self.http_other_zone = Counter(
            "llog_http_other_zone_requests", "broker HTTP requests whose Llog-Zone header names another zone than "
            "this broker's (their bytes cross zones: the client should ask GET /brokers)", ["route"], registry=r,
        )
        self.http_latency = Histogram(
            "llog_http_request_seconds", "broker HTTP request latency", ["route"],
            buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.produce_records = Counter("llog_produce_records", "records acknowledged by the broker", registry=r)
        self.produce_bytes = Counter("llog_produce_bytes", "value bytes acknowledged by the broker", registry=r)
        self.consume_records = Counter("llog_consume_records", "records returned by broker consumes", registry=r)
        self.consume_bytes = Counter("llog_consume_bytes", "value bytes returned by broker consumes", registry=r)
        self.consume_waiting = Gauge("llog_consume_waiting", "broker consumes long-polling right now", registry=r)
        self.tail_cache_lookups = Counter("llog_tail_cache_lookups", "broker tail cache lookups by result", ["result"],
                                          registry=r)
        self.tail_cache_files_dropped = Counter(
            "llog_tail_cache_files_dropped",
            "commits left out of the shared tail cache files because the writer fell behind",
            registry=r,
        )
        self.tail_wakeups = Counter(
            "llog_tail_wakeups", "partition change signals by source", ["source"], registry=r
        )
        self.tail_remote_appends = Counter(
            "llog_tail_remote_appends",
            "other brokers' appends to watched partitions, by whether they were read into the tail cache",
            ["outcome"], registry=r,
        )
        self.kafka_requests = Counter(
            "llog_kafka_requests", "Kafka listener requests by API (UNSUPPORTED: not served)", ["api"], registry=r
        )
        self.kafka_latency = Histogram(
            "llog_kafka_request_seconds", "Kafka listener request latency, read to answer sent", ["api"],
            buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.kafka_connections = Gauge("llog_kafka_connections", "open Kafka client connections", registry=r)
        self.kafka_connections_refused = Counter(
            "llog_kafka_connections_refused",
            "Kafka connections closed on arrival: max_connections or max_connections_per_ip reached",
            ["reason"], registry=r,
        )
        self.kafka_connections_closed = Counter(
            "llog_kafka_connections_closed",
            "Kafka connections the listener closed for breaking a limit or the protocol, by reason",
            ["reason"], registry=r,
        )
        self.kafka_queued_bytes = Gauge(
            "llog_kafka_queued_request_bytes", "bytes of Kafka request frames read and not yet answered",
            registry=r,
        )
        self.kafka_batches_refused = Counter(
            "llog_kafka_batches_refused", "produced Kafka record batches refused, by error", ["error"], registry=r
        )

    def _declare_kafka_peers(self, r: CollectorRegistry) -> None:
        self.kafka_peers_silent = Gauge(
            "llog_kafka_peers_silent",
            "registered brokers not answering this broker's probes, left out of Metadata", registry=r,
        )
        self.kafka_peer_silent = Gauge(
            "llog_kafka_peer_silent",
            "1 for each registered broker not answering this broker's probes: its node id, Kafka address and "
            "process (pid, instance id)", ["node_id", "address", "pid", "instance"], registry=r,
        )

    def _declare_kafka_groups(self, r: CollectorRegistry) -> None:
        self.kafka_coordinator_stalls = Counter(
            "llog_kafka_coordinator_stalls",
            "times the Kafka group coordinator found itself paused or starved of CPU (a member-expiry tick over "
            "3 s late) and checked its groups against etcd", registry=r,
        )
        self.kafka_coordinator_stall_groups = Counter(
            "llog_kafka_coordinator_stall_groups",
            "groups checked after a coordinator stall, by outcome (kept: etcd still held their epoch; let_go: "
            "another coordinator moved them on, or etcd could not tell)", ["outcome"], registry=r,
        )

    def value(self, name: str, **labels: str) -> float:
        """Current value of a sample (e.g. ``value("llog_etcd_ops_total", op="txn")``)."""
        v = self.registry.get_sample_value(name, labels)
        return 0.0 if v is None else v

    def snapshot(self) -> dict[str, list[dict[str, object]]]:
        """Every sample as JSON-friendly data: ``{metric: [{labels, value}, ...]}``."""
        out: dict[str, list[dict[str, object]]] = {}
        for family in self.registry.collect():
            for s in family.samples:
                out.setdefault(s.name, []).append({"labels": dict(s.labels), "value": s.value})
        return out
