"""Finishing a compaction some process started and did not complete.

Whatever ``meta/compaction`` holds is finished by the next compactor that gets the
partition, from the stage the record names: the record alone (range, compacted blob,
the last WAL entry's start offset) is enough, nothing of the dead process is needed.
"""

from __future__ import annotations

from dataclasses import dataclass

from compactor.claims import Claim
from compactor.metrics import CompactorMetrics
from compactor.stages import Finished, StageHook, StageRunner, decode_record
from llog.codec.etcd_values.compaction import CompactionRecord
from llog.connection import Connection


@dataclass(frozen=True)
class Recovered:
    """An interrupted compaction found at ``stage`` and how it ended."""

    stage: str
    record: CompactionRecord
    finished: Finished


def read_record(conn: Connection, topic: str, partition: int) -> tuple[CompactionRecord, int] | None:
    """The partition's in-flight compaction record and its ``mod_revision``, if any."""
    kv = conn.etcd.get(conn.keys.compaction(topic, partition))
    if kv is None:
        return None
    return decode_record(kv), kv.mod_revision


def finish_interrupted(
    conn: Connection,
    topic: str,
    partition: int,
    *,
    claim: Claim | None,
    metrics: CompactorMetrics,
    hook: StageHook | None = None,
) -> Recovered | None:
    """Finish the partition's in-flight compaction, if there is one."""
    found = read_record(conn, topic, partition)
    if found is None:
        return None
    rec, rev = found
    metrics.recoveries.labels(rec.stage).inc()
    runner = StageRunner(conn, topic, partition, claim=claim, metrics=metrics, hook=hook)
    return Recovered(rec.stage, rec, runner.finish(rec, rev))
