"""Keeping etcd's MVCC history compacted (protocol/README.md, "etcd history").

etcd keeps every old version of every key until its history is compacted, and every
append writes several keys: without compaction the database grows until it reaches
``--quota-backend-bytes``, raises the NOSPACE alarm and refuses every write. The
compactor service therefore compacts it itself, like etcd's periodic auto-compaction:
every ``LLOG_ETCD_COMPACT_INTERVAL_S`` it compacts at the revision it saw one interval
earlier, so at least one interval of history always remains (nothing in llog reads or
watches from further back). Each compaction is recorded in
``{root}/_maintenance/etcd-compaction`` for ``llog doctor``. Compaction frees space
inside etcd's file; giving it back to the file system (and below the quota once the
alarm is raised) takes a defragment, an operator's step (``llog etcd defrag``) because
it stalls the member while it runs.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from compactor.metrics import CompactorMetrics
from compactor.revision_clock import RevisionClock
from llog.connection import Connection
from llog.errors import CoordinationError, CorruptMetadata, EtcdSpaceExhausted
from llog.etcd.maintenance import EtcdMaintenance
from llog.state.control import now_ms

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EtcdCompaction:
    """The value of ``{root}/_maintenance/etcd-compaction``: the revision compacted at
    and when (the compacting service's wall clock, for operators only)."""

    revision: int
    at_ms: int

    def encode(self) -> bytes:
        return json.dumps({"revision": self.revision, "at_ms": self.at_ms}).encode()


def read_record(conn: Connection) -> EtcdCompaction | None:
    """The last recorded compaction of etcd's history, if any."""
    key = conn.keys.etcd_compaction_record()
    kv = conn.etcd.get(key)
    if kv is None:
        return None
    try:
        doc = json.loads(kv.value)
        return EtcdCompaction(int(doc["revision"]), int(doc["at_ms"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptMetadata(key, str(exc)) from exc


def compact_history(conn: Connection, revision: int) -> bool:
    """Compact etcd's history at ``revision`` and record it; ``False`` if it already
    was compacted at or past it. The record is best effort: under the NOSPACE alarm
    etcd compacts but refuses the write."""
    done = EtcdMaintenance(conn.etcd).compact(revision)
    try:
        conn.etcd.put(conn.keys.etcd_compaction_record(), EtcdCompaction(revision, now_ms()).encode())
    except CoordinationError as exc:
        log.warning("compacted etcd at revision %d but could not record it: %s", revision, exc)
    return done


class EtcdHistoryCompactor:
    """The service's periodic job: :meth:`run` every ``interval_s``."""

    def __init__(
        self, conn: Connection, revisions: RevisionClock, interval_s: float, metrics: CompactorMetrics
    ) -> None:
        self.conn = conn
        self.revisions = revisions
        self.interval_s = interval_s
        self.metrics = metrics
        self._compacted = 0

    def run(self) -> int | None:
        """Sample etcd's revision and DB size; compact at the revision sampled at least
        one interval ago if that is newer than the last compaction. Returns the
        revision compacted at, or ``None``."""
        status = self.conn.etcd.status()
        self.metrics.etcd_db_size.set(status["db_size"])
        self.revisions.observe()
        self._warn_alarms()
        safe = self.revisions.aged_revision(round(self.interval_s * 1000))
        if safe == 0 or safe <= self._compacted:
            return None
        if compact_history(self.conn, safe):
            log.info("compacted etcd history at revision %d (now at %d)", safe, status["revision"])
        self._compacted = safe
        self.metrics.etcd_compacted_revision.set(safe)
        return safe

    def _warn_alarms(self) -> None:
        for member, alarm in EtcdMaintenance(self.conn.etcd).alarms():
            fix = f"; fix: {EtcdSpaceExhausted.FIX}" if alarm == "NOSPACE" else ""
            log.error("etcd member %x has raised the %s alarm%s", member, alarm, fix)
