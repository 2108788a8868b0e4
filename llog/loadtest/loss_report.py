"""What etcd and the object store say of the acknowledged batches a reconciliation found
lost. A nemesis failure is rare and its cluster is gone by the time anyone reads its
log, so the run itself answers the first question: did the batch's commit ever exist?

For each lost batch: the partition's control key, version by version from now back to
the version before the batch's offsets (a commit puts the control with its append as
``pending``, so a commit that ever happened is among them, with its blob), the producer
key likewise back to before the batch's sequence, and whether the blob the broker named
is in the store. A commit found there was undone later; none found means the broker
answered for a commit etcd never applied.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from llog.codec.etcd_values.partition import Control
from llog.codec.etcd_values.producers import ProducerState
from llog.connection import Connection
from llog.errors import HistoryCompacted, LlogError
from llog.etcd.operations import KV
from llog.loadtest.reconcile import Ack, Mismatch
from llog.state.keys import prefix_range_end

#: Versions of one key a report walks back through at most.
MAX_VERSIONS = 200
#: Lost batches reported at most (the rest are counted).
MAX_BATCHES = 12


def lost_batches(acks: Iterable[Ack], mismatches: Iterable[Mismatch]) -> list[Ack]:
    """The acknowledged batches with at least one record reported lost."""
    lost = {(m.topic, m.partition, m.acked_offset) for m in mismatches if m.kind == "lost"}
    return [a for a in acks if any((a.topic, a.partition, off) in lost for off, _ in a.ids())]


def loss_report(conn: Connection, batches: list[Ack]) -> dict[str, Any]:
    """The report of :mod:`this module <llog.loadtest.loss_report>` for ``batches``."""
    out = [_batch(conn, a) for a in sorted(batches, key=lambda a: (a.topic, a.partition, a.start))[:MAX_BATCHES]]
    return {"batches": out, "not_reported": max(0, len(batches) - MAX_BATCHES)}


def _batch(conn: Connection, a: Ack) -> dict[str, Any]:
    keys = conn.keys
    report: dict[str, Any] = {
        "topic": a.topic, "partition": a.partition, "offsets": [a.start, a.end], "sequence": a.sequence,
        "broker": a.broker, "wal_uri": a.wal_uri, "duplicate": a.duplicate,
    }
    try:
        controls = _versions(conn, keys.control(a.topic, a.partition),
                             lambda kv: Control.decode(kv.value).next_offset <= a.start)
        report["control_versions"] = [_control(kv) for kv in controls]
        report["commit_in_etcd_history"] = any(
            (p := Control.decode(kv.value).pending) is not None and (p.start_offset, p.end_offset) == (a.start, a.end)
            and (a.wal_uri == "-" or a.wal_uri.endswith("/" + p.data_key))
            for kv in controls if kv is not None
        )
        pkey = _producer_key(conn, a)
        if pkey is not None:
            before = _versions(conn, pkey, lambda kv: ProducerState.decode(kv.value).sequence < a.sequence)
            report["producer_versions"] = [_producer(kv) for kv in before]
        if a.wal_uri != "-":
            data_key = a.wal_uri.split("/wal-shared/", 1)
            if len(data_key) == 2:
                key = f"{conn.config.root_prefix}/wal-shared/{data_key[1]}"
                report["blob_in_store"] = conn.store.head(key) is not None
    except LlogError as exc:  # a report must not hide the verdict it explains
        report["error"] = f"{type(exc).__name__}: {exc}"
    return report


def _versions(conn: Connection, key: str, last: Callable[[KV], bool]) -> list[KV | None]:
    """``key``'s versions, newest first, down to the first for which ``last`` holds (or
    :data:`MAX_VERSIONS`); a trailing ``None`` where etcd had compacted the history."""
    out: list[KV | None] = []
    kv = conn.etcd.get(key)
    while kv is not None and len(out) < MAX_VERSIONS:
        out.append(kv)
        if last(kv):
            break
        try:
            kv = conn.etcd.get_at(key, kv.mod_revision - 1)
        except HistoryCompacted:
            out.append(None)
            break
    return out


def _control(kv: KV | None) -> dict[str, Any] | None:
    if kv is None:
        return None
    c = Control.decode(kv.value)
    p = c.pending
    return {"revision": kv.mod_revision, "next_offset": c.next_offset,
            "pending": None if p is None else [p.append_id, p.start_offset, p.end_offset, p.data_key]}


def _producer(kv: KV | None) -> dict[str, Any] | None:
    if kv is None:
        return None
    s = ProducerState.decode(kv.value)
    return {"revision": kv.mod_revision, "sequence": s.sequence, "offsets": [s.start_offset, s.end_offset],
            "data_key": s.data_key, "window": [b.sequence for b in s.window()]}


def _producer_key(conn: Connection, a: Ack) -> str | None:
    """The producer key of the HTTP generator's thread that sent ``a``: its producer id
    ends with the thread's record prefix (:mod:`llog.loadtest.generator`); ``None`` for
    Kafka's batches, or when the partition has no such key."""
    if a.sequence < 0:
        return None
    prefix = conn.keys.producer(a.topic, a.partition, "")
    kvs = conn.etcd.range(prefix, prefix_range_end(prefix))
    return next((kv.key for kv in kvs if kv.key.endswith(f"-{a.prefix}")), None)
