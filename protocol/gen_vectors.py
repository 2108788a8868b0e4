"""Regenerate the golden vectors in ``protocol/vectors/`` from fixed inputs.

    python protocol/gen_vectors.py           # (re)write every vector
    python protocol/gen_vectors.py --check   # exit 1 if any file differs from what the codec makes

Each vector is ``NAME.bin`` (the exact bytes) and ``NAME.json`` (what they mean). Every
input is fixed (timestamps, blob ids, offsets), so two runs write identical files. In
the JSON, byte strings are lowercase hex; ``null`` is an absent key. The files are
the contract: ``tests/test_golden_vectors.py`` checks the codec against the committed
files, so a change to the wire format shows up as a failing test and a diff here.
"""

from __future__ import annotations

import argparse
import base64
import json
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import msgpack
from kafka.record.default_records import DefaultRecordBatchBuilder

from llog.codec import batch, blob, kafka_body
from llog.codec.etcd_values.cluster import FormatRecord
from llog.codec.etcd_values.compaction import CleanCursor, CompactionCursor, CompactionRecord, DamagedRange
from llog.codec.etcd_values.groups import GroupEpoch
from llog.codec.etcd_values.partition import COMPACTED, FENCED, OPEN, Control, IndexEntry, Pending
from llog.codec.etcd_values.producers import ProducerState, SequencedBatch
from llog.codec.etcd_values.topic import TopicMeta
from llog.codec.etcd_values.transaction import (
    COMPLETE_COMMIT,
    ONGOING,
    PartitionSequences,
    SinkProgress,
    StagedAppend,
    StagedBatch,
    StagedOffset,
    TxnRecord,
)
from llog.records import Record
from llog.state.keys import KeyLayout

VECTORS = Path(__file__).resolve().parent / "vectors"
KEYS = KeyLayout("llog")
BYTES_ENCODING = "hex"

#: Fixed inputs: 2024-05-01T12:00:00Z and a little after.
T0 = 1_714_564_800_000
BLOB_ID = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"
SESSION_ID = "5e5510115e5510115e5510115e551011"
COMPACTED_ID = "c0ffee00c0ffee00c0ffee00c0ffee00"
OWNER = "compactor-7f3a:4242"
PRODUCER_ID = "checkout-svc-3"


@dataclass(frozen=True)
class Vector:
    name: str
    data: bytes
    doc: dict[str, Any]


# -- JSON forms ------------------------------------------------------------------


def record_json(r: Record) -> dict[str, Any]:
    return {
        "timestamp": r.timestamp,
        "key": None if r.key is None else r.key.hex(),
        "value": None if r.value is None else r.value.hex(),
        "headers": [{"key": k, "value": v.hex()} for k, v in r.headers],
    }


_BODY_HEADER = struct.Struct("<4sIIIIIII")


def body_layout(body: bytes) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The 32-byte header fields and the section table of a ``bytes-batch-v1`` body,
    worked out from the spec (protocol/README.md), not from the codec."""
    magic, crc, n, flags, hcount, vlen, klen, reserved = _BODY_HEADER.unpack_from(body, 0)
    header = {
        "magic": magic.decode(),
        "crc32": crc,
        "count": n,
        "flags": flags,
        "header_count": hcount,
        "values_length": vlen,
        "keys_length": klen,
        "reserved": reserved,
    }
    sections: list[dict[str, Any]] = []
    pos = _BODY_HEADER.size

    def add(name: str, length: int) -> None:
        nonlocal pos
        sections.append({"name": name, "offset": pos, "length": length})
        pos += length + (-length & 7)

    def last_i32(section: str) -> int:
        s = next(x for x in sections if x["name"] == section)
        value: int = struct.unpack_from("<i", body, s["offset"] + s["length"] - 4)[0]
        return value

    add("timestamps", 8 * n)
    if flags & 8:
        add("offset_deltas", 4 * n)
    add("value_offsets", 4 * (n + 1))
    if flags & 4:
        add("value_validity", (n + 7) // 8)
    if flags & 1:
        add("key_validity", (n + 7) // 8)
        add("key_offsets", 4 * (n + 1))
    if flags & 2:
        add("header_offsets", 4 * (n + 1))
        add("header_key_offsets", 4 * (hcount + 1))
        add("header_value_offsets", 4 * (hcount + 1))
        add("header_keys", last_i32("header_key_offsets"))
        add("header_values", last_i32("header_value_offsets"))
    add("values", vlen)
    if flags & 1:
        add("keys", klen)
    assert pos == len(body), (pos, len(body))
    return header, sections


# -- vectors ---------------------------------------------------------------------


PLAIN = [
    Record(b"hello", timestamp=T0),
    Record(b"", timestamp=T0 + 1),
    Record(bytes(range(256)) + b"\x00\xff", timestamp=T0 + 2),
]
KEYED = [
    Record(b"order-1", key=b"customer-17", timestamp=T0, headers=(("trace", b"abc123"), ("retry", b"\x01"))),
    Record(b"order-2", key=None, timestamp=T0 + 5),
    Record(b"", key=b"", timestamp=T0 + 5, headers=(("empty", b""),)),
    Record(b"\x00\x01\x02", key=b"\xff\xfe", timestamp=T0 + 9, headers=(("caf\u00e9", b"\xe2\x82\xac"),)),
]
KEYS_ONLY = [
    Record(b"a", key=None, timestamp=T0),
    Record(b"bb", key=b"k", timestamp=T0),
]
HEADERS_ONLY = [
    Record(b"x", timestamp=T0, headers=(("h", b"1"), ("h", b"2"))),
    Record(b"y", timestamp=T0),
]
TOMBSTONES = [
    Record(b"v1", key=b"user-1", timestamp=T0),
    Record(None, key=b"user-2", timestamp=T0 + 1),
    Record(b"", key=b"user-3", timestamp=T0 + 2),
    Record(None, key=b"user-1", timestamp=T0 + 3),
]
BATCHES: list[tuple[str, str, list[Record]]] = [
    ("batch-plain", "values only (flags 0): an empty value and all 256 byte values", PLAIN),
    (
        "batch-keys-headers",
        "keys and headers (flags 3): a null key, an empty key, an empty header value, a UTF-8 header key",
        KEYED,
    ),
    ("batch-keys-only", "keys without headers (flags 1), one null key", KEYS_ONLY),
    ("batch-headers-only", "headers without keys (flags 2), a repeated header key", HEADERS_ONLY),
    ("batch-tombstones", "null values (flags 5): two tombstones beside an empty value", TOMBSTONES),
]
#: A key-compacted body (§10.2): what stays of an entry of 8 records at offsets S..S+7
#: once keys a and b were updated and c deleted later on; its records' offset deltas.
KEY_COMPACTED = [
    Record(b"a3", key=b"a", timestamp=T0 + 3),
    Record(None, key=b"c", timestamp=T0 + 5),
    Record(b"b7", key=b"b", timestamp=T0 + 7),
]
KEY_COMPACTED_DELTAS = [3, 5, 7]

BLOB_GROUPS: list[tuple[str, int, list[Record]]] = [
    ("orders", 0, [Record(b'{"id":1}', key=b"c-1", timestamp=T0),
                   Record(b'{"id":2}', key=b"c-2", timestamp=T0 + 3)]),
    ("clicks", 1, [Record(b"/home", timestamp=T0 + 1), Record(b"/cart", timestamp=T0 + 2),
                   Record(b"/pay", timestamp=T0 + 2)]),
    ("orders", 3, [Record(b'{"id":3}', timestamp=T0 + 4, headers=(("source", b"web"),))]),
]


def batch_vector(name: str, description: str, records: list[Record], deltas: list[int] | None = None) -> Vector:
    body = batch.encode_columns(batch.columns_of(records), deltas=deltas).tobytes()
    header, sections = body_layout(body)
    decoded: dict[str, Any] = {"records": [record_json(r) for r in records]}
    if deltas is not None:
        decoded["offset_deltas"] = deltas
    return Vector(name, body, {
        "name": name,
        "kind": "batch",
        "encoding": batch.ENCODING,
        "description": description,
        "bytes": BYTES_ENCODING,
        "size": len(body),
        "decoded": decoded,
        "header": header,
        "sections": sections,
    })


#: Two Kafka v2 batches as a producer sends them: (base offset written, producer id,
#: epoch, base sequence, records as (timestamp, key, value, headers)). The second
#: batch's base offset is nonsense on purpose: readers ignore it (§7.5).
KafkaRecord = tuple[int, bytes | None, bytes | None, list[tuple[str, bytes]]]
KAFKA_BATCHES: list[tuple[int, int, int, int, list[KafkaRecord]]] = [
    (0, -1, -1, -1, [(T0, b"k-1", b"first", [("trace", b"ab12")]), (T0 + 1, None, b"", [])]),
    (977, 4001, 0, 7, [(T0 + 5, b"k-2", None, []), (T0 + 6, b"", b"\x00\xff", [("e", b"")])]),
]


def kafka_batches() -> bytes:
    out = b""
    for base, pid, epoch, seq, records in KAFKA_BATCHES:
        builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=pid,
                                            producer_epoch=epoch, base_sequence=seq, batch_size=2**31 - 1)
        for i, (ts, key, value, headers) in enumerate(records):
            builder.append(i, ts, key, value, headers)
        raw = bytearray(builder.build())
        raw[0:8] = base.to_bytes(8, "big", signed=True)
        out += bytes(raw)
    return out


def kafka_body_vector() -> Vector:
    batches = kafka_batches()
    body = kafka_body.encode_body(kafka_body.check_batches(batches)).tobytes()
    magic, crc, n, reserved = struct.unpack_from("<4sIII", body, 0)
    framing, pos = [], 16
    for base, pid, epoch, seq, records in KAFKA_BATCHES:
        (length,) = struct.unpack_from(">i", body, pos + 8)
        framing.append({"offset": pos, "length": length + 12, "base_offset_as_written": base,
                        "record_count": len(records), "producer_id": pid, "producer_epoch": epoch,
                        "base_sequence": seq})
        pos += length + 12
    return Vector("kafka-batch-v2", body, {
        "name": "kafka-batch-v2",
        "kind": "kafka-batch",
        "encoding": kafka_body.ENCODING,
        "description": "two Kafka v2 record batches as produced (the second idempotent, its base offset "
                       "ignored): null and empty keys, a null value, headers",
        "bytes": BYTES_ENCODING,
        "size": len(body),
        "header": {"magic": magic.decode(), "crc32": crc, "count": n, "reserved": reserved},
        "batches": framing,
        "decoded": {
            # As a Kafka consumer sees them (a null value is null) ...
            "kafka_records": [
                {"offset_in_body": i, "timestamp": ts, "key": None if k is None else k.hex(),
                 "value": None if v is None else v.hex(), "headers": [{"key": hk, "value": hv.hex()} for hk, hv in h]}
                for i, (ts, k, v, h) in enumerate(r for *_, rs in KAFKA_BATCHES for r in rs)
            ],
            # ... and as every other reader decodes them: the same, nulls kept (§7.5).
            "records": [
                record_json(Record(v, k, ts, tuple(h)))
                for *_, rs in KAFKA_BATCHES for ts, k, v, h in rs
            ],
        },
    })


def packed_blob() -> blob.PackedBlob:
    bodies = [blob.BlobBody(t, p, len(rs), batch.encode(rs)) for t, p, rs in BLOB_GROUPS]
    return blob.pack(bodies, T0 + 10)


def blob_vector() -> Vector:
    packed = packed_blob()
    (hlen,) = struct.unpack_from(">I", packed.data, 4)
    return Vector("wal-blob", packed.data, {
        "name": "wal-blob",
        "kind": "wal-blob",
        "description": "a shared WAL blob: 3 partition bodies of 2 topics",
        "bytes": BYTES_ENCODING,
        "object_key": KEYS.wal_blob(SESSION_ID, BLOB_ID),
        "key_args": {"session_id": SESSION_ID, "blob_id": BLOB_ID},
        "size": len(packed.data),
        "decoded": {
            "created_at_ms": packed.created_at_ms,
            "header_length": hlen,
            "header": {
                "v": blob.VERSION,
                "created_at_ms": packed.created_at_ms,
                "parts": [
                    {
                        "topic": p.topic,
                        "partition": p.partition,
                        "msg_count": p.msg_count,
                        "encoding": p.encoding,
                        "body_offset": p.body_offset,
                        "body_length": p.body_length,
                        "crc": p.crc,
                    }
                    for p in packed.parts
                ],
            },
            "bodies": [
                {"topic": t, "partition": p, "records": [record_json(r) for r in rs]}
                for t, p, rs in BLOB_GROUPS
            ],
        },
    })


def _orders0_pending() -> Pending:
    """The append of the blob's orders/0 body, committed at offsets 40..41."""
    part = packed_blob().parts[0]
    return Pending(
        append_id=f"{BLOB_ID}:0",
        start_offset=40,
        end_offset=41,
        msg_count=part.msg_count,
        data_key=KEYS.wal_blob(SESSION_ID, BLOB_ID),
        byte_offset=part.body_offset,
        byte_length=part.body_length,
        created_at_ms=T0 + 10,
        max_timestamp=T0 + 3,
    )


def _orders0_digest() -> int:
    """The content digest (spec §8.7) of the blob's orders/0 body."""
    part = packed_blob().parts[0]
    return batch.content_digest(packed_blob().data[part.body_offset : part.body_offset + part.body_length])


_COMPACTED_KEY = KEYS.compacted_blob("orders", 0, SESSION_ID, COMPACTED_ID)
_COMPACTED_LENGTH = 3_912
_PARQUET_KEY = KEYS.compacted_blob("events", 0, SESSION_ID, COMPACTED_ID)
_PARQUET_LENGTH = 5_218
_COMPACTION = CompactionRecord(
    stage="WRITING_COMPACTED_INDEX",
    start_offset=0,
    end_offset=41,
    last_wal_start_offset=40,
    msg_count=42,
    data_key=_COMPACTED_KEY,
    byte_length=_COMPACTED_LENGTH,
    max_timestamp=T0 + 3,
    created_at_ms=T0 + 60_000,
    owner=OWNER,
)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def meta_vectors() -> list[Vector]:
    pending = _orders0_pending()
    cases: list[tuple[str, str, str, dict[str, Any], Any]] = [
        ("control-open", "control: OPEN, no pending", "control",
         {"topic": "orders", "partition": 0}, Control(OPEN, 42, 0, None)),
        ("control-pending", "control right after the commit of the blob's orders/0 body (offsets 40..41)",
         "control", {"topic": "orders", "partition": 0}, Control(OPEN, 42, 0, pending)),
        ("control-fenced", "control: FENCED, log start advanced by retention, no pending", "control",
         {"topic": "orders", "partition": 0}, Control(FENCED, 42, 10, None)),
        ("index-wal", "index entry materialized from control-pending's pending", "index",
         {"topic": "orders", "partition": 0, "end_offset": 41}, pending.index_entry()),
        ("index-compacted", "index entry of a compacted range [0, 41] (no append_id)", "index",
         {"topic": "orders", "partition": 0, "end_offset": 41},
         IndexEntry(COMPACTED, 42, _COMPACTED_KEY, 0, _COMPACTED_LENGTH, T0 + 60_000, T0 + 3)),
        ("index-compacted-parquet", "index entry of a compacted range [0, 41] written as a Parquet file", "index",
         {"topic": "events", "partition": 0, "end_offset": 41},
         IndexEntry(COMPACTED, 42, _PARQUET_KEY, 0, _PARQUET_LENGTH, T0 + 60_000, T0 + 3,
                    encoding="parquet-v1")),
        ("compaction-parquet", "in-flight compaction of [0, 41] into a Parquet file", "compaction",
         {"topic": "events", "partition": 0},
         replace(_COMPACTION, data_key=_PARQUET_KEY, byte_length=_PARQUET_LENGTH, encoding="parquet-v1")),
        ("topic", "topic record without retention", "topic_meta", {"topic": "orders"},
         TopicMeta("orders", 4, T0 - 86_400_000)),
        ("topic-retention", "topic record with time and size retention", "topic_meta", {"topic": "clicks"},
         TopicMeta("clicks", 2, T0 - 86_400_000, 7 * 86_400_000, 10 * 2**30)),
        ("topic-parquet", "topic record whose compacted ranges are Parquet files", "topic_meta",
         {"topic": "events"}, TopicMeta("events", 8, T0 - 86_400_000, None, None, "parquet")),
        ("topic-table", "topic record of a table topic: Parquet files kept as an Iceberg table", "topic_meta",
         {"topic": "events"}, TopicMeta("events", 8, T0 - 86_400_000, None, None, "parquet", "iceberg")),
        ("topic-typed-table", "topic record of a table topic whose values carry a schema id (typed columns)",
         "topic_meta", {"topic": "clicks"},
         TopicMeta("clicks", 4, T0 - 86_400_000, None, None, "parquet", "iceberg", value_schema="schema-id")),
        ("topic-validated", "topic record whose produced values are checked, the bad ones dead-lettered",
         "topic_meta", {"topic": "orders"},
         TopicMeta("orders", 4, T0 - 86_400_000, value_schema="schema-id", value_validation="dlq")),
        ("topic-compacted", "a compacted topic's record: cleanup_policy compact,delete with retention, "
         "min_compaction_lag_ms and delete_retention_ms",
         "topic_meta", {"topic": "users"},
         TopicMeta("users", 3, T0 - 86_400_000, 30 * 86_400_000, None, None, None, "compact,delete", 60_000,
                   3_600_000)),
        ("compaction-cursor", "compaction cursor after compacting [0, 41]", "compaction_cursor",
         {"topic": "orders", "partition": 0}, CompactionCursor(42)),
        ("clean-cursor", "a compacted topic's clean cursor: [0, 41] key-compacted, 3 tombstones kept below it",
         "clean_cursor", {"topic": "users", "partition": 0}, CleanCursor(42, 3)),
        ("compaction-key-compacted", "in-flight key compaction of [0, 41] replacing index-compacted's object",
         "compaction", {"topic": "users", "partition": 0},
         replace(_COMPACTION, last_wal_start_offset=0, replaces=_COMPACTED_KEY)),
        ("producer-state", "idempotent producer (epoch 2) whose batch 7 is control-pending's append (offsets "
         "40..41), its digest that body's, and batches 3..6 before it in its window",
         "producer", {"topic": "orders", "partition": 0, "producer_id": PRODUCER_ID},
         ProducerState(7, pending.start_offset, pending.end_offset, pending.append_id, pending.data_key,
                       T0 + 11, 2, _orders0_digest(),
                       (SequencedBatch(3, 30, 31, 0x1B3D5F71), SequencedBatch(4, 32, 34, 0x2A4C6E80),
                        SequencedBatch(5, 35, 35, 0x39517395), SequencedBatch(6, 36, 39, 0x4862A4B6)))),
        ("transaction-ongoing", "a transactional id's record: transaction 3 ongoing over orders/0 and orders/1, "
         "control-pending's slice staged for orders/0, an offset of group g staged, the producer's window on "
         "orders/0", "transaction", {"transactional_id": "etl-1"},
         TxnRecord(9001, 2, 60_000, ONGOING, 3, T0 + 5, (("orders", 0), ("orders", 1)), ("g",),
                   (StagedAppend("orders", 0, 17, pending.append_id, pending.data_key, pending.byte_offset,
                                 pending.byte_length, pending.msg_count, pending.created_at_ms,
                                 pending.max_timestamp),),
                   (StagedOffset("g", "clicks", 0, 120, _b64(GroupEpoch(7, "kafka-coordinator", T0).encode())),),
                   (PartitionSequences("orders", 0, (StagedBatch(10, 3, 0x1B3D5F71),
                                                     StagedBatch(13, 2, _orders0_digest()))),))),
        ("transaction-committed", "the same id after its commit: the window kept, the rest emptied",
         "transaction", {"transactional_id": "etl-1"},
         TxnRecord(9001, 2, 60_000, COMPLETE_COMMIT, 3, T0 + 5,
                   sequences=(PartitionSequences("orders", 0, (StagedBatch(10, 3, 0x1B3D5F71),
                                                               StagedBatch(13, 2, _orders0_digest()))),))),
        ("transaction-sdk-offsets", "an SDK transaction holding offsets of group g: one of an exclusive "
         "consumer (its epoch as guard), one of a member session (owner and lease)",
         "transaction", {"transactional_id": "etl-2"},
         TxnRecord(9002, 0, 60_000, ONGOING, 1, T0 + 5, groups=("g",),
                   offsets=(StagedOffset("g", "clicks", 0, 120, _b64(GroupEpoch(3, "etl-2", T0).encode())),
                            StagedOffset("g", "clicks", 1, 7, None, "member-1", 0x694D7A2B10)))),
        ("cluster-format", "the cluster's format record after an operator's llog upgrade finalize raised it to "
         "format 2 (absent until the first raise: format 1)", "cluster_format", {}, FormatRecord(2, "0.4.0", T0)),
        ("sink-progress", "a transactional Spark sink whose micro-batch 41 committed", "sink_progress",
         {"transactional_id": "orders-sink"}, SinkProgress(41, T0 + 9)),
        ("damaged-range", "control-pending's append [40, 41] passed by compaction: its body does not decode",
         "damaged", {"topic": "orders", "partition": 0, "end_offset": 41},
         DamagedRange(pending.start_offset, pending.data_key, pending.byte_offset, pending.byte_length,
                      "checksum mismatch", T0 + 120_000, OWNER)),
    ]
    for stage in ("WRITING_COMPACTED_INDEX", "DELETING_OLD", "UPDATING_CURSOR"):
        cases.append((
            f"compaction-{stage.lower().replace('_', '-')}",
            f"in-flight compaction of [0, 41] at stage {stage}",
            "compaction",
            {"topic": "orders", "partition": 0},
            _COMPACTION.at_stage(stage),
        ))
    out = []
    for name, description, key_fn, key_args, value in cases:
        key: str = getattr(KEYS, key_fn)(*key_args.values())
        data: bytes = value.encode()
        out.append(Vector(name, data, {
            "name": name,
            "kind": type(value).__name__,
            "description": description,
            "etcd_key": key,
            "key_fn": key_fn,
            "key_args": key_args,
            "size": len(data),
            # msgpack's own view of the bytes, field order as encoded
            "decoded": msgpack.unpackb(data),
        }))
    return out


def all_vectors() -> list[Vector]:
    key_compacted = batch_vector(
        "batch-key-compacted", "a key-compacted body (flags 13): 3 records left of 8, their offset deltas, a tombstone",
        KEY_COMPACTED, KEY_COMPACTED_DELTAS)
    return [*(batch_vector(*b) for b in BATCHES), key_compacted, kafka_body_vector(), blob_vector(), *meta_vectors()]


def render(v: Vector) -> dict[str, bytes]:
    return {
        f"{v.name}.bin": v.data,
        f"{v.name}.json": (json.dumps(v.doc, indent=2, ensure_ascii=False) + "\n").encode(),
    }


def main(argv: list[str] | None = None, out: Callable[[str], None] = print) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="verify the files are current; write nothing")
    args = ap.parse_args(argv)
    wanted: dict[str, bytes] = {}
    for v in all_vectors():
        wanted.update(render(v))
    present = {p.name for p in VECTORS.glob("*.bin")} | {p.name for p in VECTORS.glob("*.json")}
    stale = sorted(name for name, data in wanted.items()
                   if not (VECTORS / name).is_file() or (VECTORS / name).read_bytes() != data)
    extra = sorted(present - set(wanted))
    if args.check:
        for name in stale:
            out(f"stale or missing: {name}")
        for name in extra:
            out(f"not generated: {name}")
        out(f"{len(wanted)} files, {len(stale)} stale, {len(extra)} extra")
        return 1 if stale or extra else 0
    VECTORS.mkdir(parents=True, exist_ok=True)
    for name in stale:
        (VECTORS / name).write_bytes(wanted[name])
    out(f"{len(wanted)} files, {len(stale)} written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
