"""``summary.json``: client intent and acknowledgements, availability through the
faults (:mod:`llog.loadtest.availability`), what the brokers say they accepted, etcd
and S3 request counts with a billing estimate, process usage, chaos, and the
reconciliation verdict with every mismatch."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from llog.config import LlogConfig
from llog.loadtest.availability import availability
from llog.loadtest.collector import Collector
from llog.loadtest.reconcile import Reconciliation
from llog.loadtest.scenario import Scenario
from llog.store.billing import request_classes, request_usd

_LABEL = re.compile(r"\{(?:.*,)?(\w+)=([^,}]*)")


def _by_label(series: Mapping[str, float]) -> dict[str, float]:
    """``{label value: sum}`` of one-label series such as ``llog_s3_ops_total{op=put}``."""
    out: dict[str, float] = {}
    for key, v in series.items():
        m = _LABEL.search(key)
        label = m.group(2) if m else ""
        out[label] = out.get(label, 0.0) + v
    return out


def build_summary(
    scenario: Scenario, client: dict[str, Any], rec: Reconciliation, collector: Collector,
    chaos: list[dict[str, Any]], config: LlogConfig, *, timings: dict[str, float],
    exits: Mapping[str, int | None], samples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    s3_ops = _by_label(collector.series("llog_s3_ops_total"))
    etcd_ops = _by_label(collector.series("llog_etcd_ops_total"))
    s3_bytes = _by_label(collector.series("llog_s3_bytes_total"))
    class_a, class_b = request_classes(s3_ops)
    put_usd, get_usd = request_usd(config, class_a, class_b)
    # The compactor's vacuum listing when it ran, else every byte uploaded (an upper bound:
    # compaction writes records a second time before the WAL blobs are vacuumed).
    listed = collector.total("llog_vacuum_stored_bytes", "compactor")
    stored = listed or s3_bytes.get("in", 0.0)
    acked = int(client["acked_records"])
    return {
        "scenario": scenario.name,
        "verdict": {
            "lost": rec.lost + rec.misplaced, "duplicated": rec.duplicated,
            "acked": rec.acked_records, "verified": rec.verified,
            "all_acked_verified": rec.ok, "mismatch_count": len(rec.mismatches),
            "unreadable_offsets": len(rec.unreadable),
        },
        "client": client,
        "availability": availability(samples, chaos, interval_s=scenario.interval_s, duration_s=scenario.duration_s),
        "brokers": {
            # Counters of a broker killed with -9 end at its last scrape; a retry answered with
            # the original offsets counts again at the broker that answered it.
            "accepted_records": collector.total("llog_produce_records_total", "broker-"),
            "committed_records": collector.total("llog_append_records_total", "broker-"),
            "backpressure": collector.total("llog_producer_backpressure_total", "broker-"),
            "acked_by_clients": acked,
        },
        "etcd": {"ops": etcd_ops, "ops_total": sum(etcd_ops.values()),
                 "ops_per_acked_record": round(sum(etcd_ops.values()) / acked, 4) if acked else None},
        "s3": {"ops": s3_ops, "bytes": s3_bytes, "class_a_requests": class_a, "class_b_requests": class_b},
        "billing_estimate_usd": {
            "put_list_requests": round(put_usd, 6), "get_head_requests": round(get_usd, 6),
            "requests_total": round(put_usd + get_usd, 6),
            "per_million_acked_records": round((put_usd + get_usd) / acked * 1e6, 4) if acked else None,
            "storage_per_month": round(stored / 1024**3 * config.s3_price_gib_month, 6),
            "storage_basis": "vacuum listing" if listed else "bytes uploaded",
            "prices": {"put_per_1000": config.s3_price_put_per_1000, "get_per_1000": config.s3_price_get_per_1000,
                       "gib_month": config.s3_price_gib_month},
        },
        "compactor": {
            "runs": _by_label(collector.series("llog_compactor_runs_total")),
            "records_compacted": collector.total("llog_compactor_records_total", "compactor"),
            "lag_records": collector.total("llog_compactor_lag_records", "compactor"),
        },
        "processes": {
            "peak_rss_mib": {n: round(v / 2**20, 1) for n, v in sorted(collector.peak_rss.items())},
            "cpu_seconds": {f"{n}[{pid}]": round(v, 2) for (n, pid), v in sorted(collector.cpu_seconds.items())},
            "exit_codes": dict(exits),
        },
        "chaos": chaos,
        "timings_s": {k: round(v, 2) for k, v in timings.items()},
        "reconciliation": rec.to_json(),
    }
