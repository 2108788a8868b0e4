"""Seed inputs for the fuzz targets: well-formed batches in every codec and request
frames of the APIs the listener serves, so the fuzzers start deep inside the parsers."""

from __future__ import annotations

from pathlib import Path

from tests.kafka_crafted import GZIP, LZ4, SNAPPY, T0, ZSTD


def batches() -> list[bytes]:
    """Record batches as clients build them: every codec, keys, nulls and headers."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    out = []
    for codec in (0, GZIP, SNAPPY, LZ4, ZSTD):
        for n, pid in ((1, -1), (3, 7), (40, -1), (100, 9)):
            b = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=pid,
                                          producer_epoch=0 if pid >= 0 else -1, base_sequence=0 if pid >= 0 else -1,
                                          batch_size=2**31 - 1)
            for i in range(n):
                b.append(i, T0 + i * 70, None if i % 3 == 0 else b"key-%d" % i, None if i % 5 == 4 else b"v" * (i * 7),
                         [("h", b"x"), ("trace", b"")] if i % 2 and n < 100 else [])
            out.append(bytes(b.build()))
    return out


def frames() -> list[bytes]:
    """Request frames (without their size) of the APIs fuzzed most: Produce at several
    versions carrying the batches above, and a few others."""
    from kafka.protocol.consumer import FetchRequest
    from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
    from kafka.protocol.producer import ProduceRequest

    out = []
    for version, records in zip((3, 7, 9, 12), batches()[::4], strict=False):
        P = ProduceRequest[version]
        req = P(transactional_id=None, acks=-1, timeout_ms=1000, topic_data=[P.TopicProduceData(
            name="t", partition_data=[P.TopicProduceData.PartitionProduceData(index=0, records=records)])])
        req.with_header(correlation_id=1, client_id="fuzz")
        out.append(req.encode(header=True))
    F = FetchRequest[11]
    fetch = F(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0,
              session_epoch=-1, topics=[F.FetchTopic(topic="t", partitions=[F.FetchTopic.FetchPartition(
                  partition=0, current_leader_epoch=-1, fetch_offset=0, log_start_offset=-1,
                  partition_max_bytes=1 << 20)])], forgotten_topics_data=[], rack_id="")
    for req in (fetch, MetadataRequest[8](topics=None, allow_auto_topic_creation=False,
                                          include_cluster_authorized_operations=False,
                                          include_topic_authorized_operations=False),
                ApiVersionsRequest[3](client_software_name="fuzz", client_software_version="1")):
        req.with_header(correlation_id=2, client_id="fuzz")
        out.append(req.encode(header=True))
    return out


def write(target: str, into: Path) -> None:
    """The seeds of ``target`` (``kafka_batches`` or ``kafka_frames``) as files in ``into``."""
    into.mkdir(parents=True, exist_ok=True)
    # kafka_batches reads a first byte that says whether to sign the batch again.
    seeds = [b"\x01" + b for b in batches()] + [b"\x00" + b for b in batches()[:3]] if target == "kafka_batches" \
        else frames()
    for i, data in enumerate(seeds):
        (into / f"seed-{i:03d}").write_bytes(data)
