"""The codec against the committed golden vectors in protocol/vectors/, byte for byte.

Each ``NAME.bin`` holds exact bytes and ``NAME.json`` what they mean (byte strings as
lowercase hex). Encoding the JSON's decoded form must reproduce the ``.bin``; decoding
the ``.bin`` must give the JSON's form. A wire-format change fails here.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import msgpack
import pytest

from llog.codec import batch, blob, bodies, kafka_body
from llog.codec.etcd_values.cluster import FormatRecord
from llog.codec.etcd_values.compaction import CleanCursor, CompactionCursor, CompactionRecord, DamagedRange
from llog.codec.etcd_values.partition import Control, IndexEntry, Pending
from llog.codec.etcd_values.producers import ProducerState, SequencedBatch
from llog.codec.etcd_values.topic import TopicMeta
from llog.codec.etcd_values.transaction import PartitionSequences, SinkProgress, StagedAppend, StagedOffset, TxnRecord
from llog.records import Record
from llog.state.keys import KeyLayout

ROOT = Path(__file__).resolve().parent.parent
VECTORS = ROOT / "protocol" / "vectors"
KEYS = KeyLayout("llog")


#: Each release's vectors as it was cut (issue 60): every later release still reads them.
RELEASED = sorted(p for p in (VECTORS / "releases").iterdir() if p.is_dir())


def _load(kind: str | None = None, root: Path = VECTORS) -> list[tuple[str, dict[str, Any], bytes]]:
    out = []
    prefix = "" if root == VECTORS else f"{root.name}/"
    for j in sorted(root.glob("*.json")):
        doc = json.loads(j.read_text())
        if kind is None or doc["kind"] == kind:
            out.append((prefix + j.stem, doc, j.with_suffix(".bin").read_bytes()))
    return out


def _read(kind: str) -> list[tuple[str, dict[str, Any], bytes]]:
    """``kind``'s vectors of this tree and of every release: what must decode."""
    return [v for root in (VECTORS, *RELEASED) for v in _load(kind, root)]


def _ids(vs: list[tuple[str, dict[str, Any], bytes]]) -> list[str]:
    return [v[0] for v in vs]


def _record(m: dict[str, Any]) -> Record:
    return Record(
        value=None if m["value"] is None else bytes.fromhex(m["value"]),
        key=None if m["key"] is None else bytes.fromhex(m["key"]),
        timestamp=m["timestamp"],
        headers=tuple((h["key"], bytes.fromhex(h["value"])) for h in m["headers"]),
    )


Row = tuple[int, bytes | None, bytes, tuple[tuple[str, bytes], ...]]


def _rows(records: list[dict[str, Any]]) -> list[Row]:
    return [(r.timestamp or 0, r.key, r.value, r.headers) for r in map(_record, records)]


BATCHES = _load("batch")
KAFKA_BODIES = _load("kafka-batch")
BLOBS = _load("wal-blob")
_DATA_KINDS = ("batch", "kafka-batch", "wal-blob")
METAS = [v for v in _load() if v[1]["kind"] not in _DATA_KINDS]
BATCHES_READ, KAFKA_BODIES_READ, BLOBS_READ = _read("batch"), _read("kafka-batch"), _read("wal-blob")
METAS_READ = [v for root in (VECTORS, *RELEASED) for v in _load(None, root) if v[1]["kind"] not in _DATA_KINDS]


def test_every_release_keeps_its_vectors() -> None:
    """A release's vectors stay as they were cut: RELEASES.md names each release, and
    each has its set (the decode tests read them all)."""
    released = {p.name for p in RELEASED}
    table = (ROOT / "RELEASES.md").read_text()
    assert "0.2.0" in released
    for name in released:
        assert f"| {name} |" in table, name
        assert len(_load(None, VECTORS / "releases" / name)) >= 30, name


def test_vector_set_is_complete() -> None:
    names = {v[0] for v in _load()}
    required = {
        "batch-plain", "batch-keys-headers", "kafka-batch-v2", "wal-blob",
        "control-open", "control-pending", "control-fenced",
        "index-wal", "index-compacted", "topic", "compaction-cursor",
        "compaction-writing-compacted-index", "compaction-deleting-old", "compaction-updating-cursor",
        "cluster-format",
    }
    assert required <= names
    for bin_file in VECTORS.glob("*.bin"):
        assert bin_file.with_suffix(".json").is_file(), bin_file.name
    for _, doc, data in _load():
        assert doc["size"] == len(data)


def test_generator_reports_files_current() -> None:
    r = subprocess.run(
        [sys.executable, str(ROOT / "protocol" / "gen_vectors.py"), "--check"],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )
    assert r.returncode == 0, r.stdout + r.stderr


# -- bytes-batch-v1 ----------------------------------------------------------------


@pytest.mark.parametrize(("name", "doc", "data"), BATCHES, ids=_ids(BATCHES))
def test_batch_encodes_to_vector(name: str, doc: dict[str, Any], data: bytes) -> None:
    assert doc["encoding"] == batch.ENCODING == "bytes-batch-v1"
    records = [_record(r) for r in doc["decoded"]["records"]]
    deltas = doc["decoded"].get("offset_deltas")
    assert batch.encode_columns(batch.columns_of(records), deltas=deltas).tobytes() == data
    if deltas is None:
        assert batch.encode(records) == data


@pytest.mark.parametrize(("name", "doc", "data"), BATCHES_READ, ids=_ids(BATCHES_READ))
def test_batch_decodes_to_vector(name: str, doc: dict[str, Any], data: bytes) -> None:
    b = batch.decode(data)
    assert len(b) == len(doc["decoded"]["records"])
    assert list(b.rows()) == _rows(doc["decoded"]["records"])
    deltas = doc["decoded"].get("offset_deltas")
    assert (None if b.deltas is None else b.deltas.tolist()) == deltas


@pytest.mark.parametrize(("name", "doc", "data"), BATCHES, ids=_ids(BATCHES))
def test_batch_header_and_sections_match_vector(name: str, doc: dict[str, Any], data: bytes) -> None:
    h = doc["header"]
    fields = struct.unpack_from("<4sIIIIIII", data, 0)
    assert fields == (
        h["magic"].encode(), h["crc32"], h["count"], h["flags"], h["header_count"],
        h["values_length"], h["keys_length"], h["reserved"],
    )
    assert h["magic"] == "LLB1" and h["reserved"] == 0
    assert h["crc32"] == zlib.crc32(data[8:])
    # Sections tile the body from byte 32, each on an 8-byte boundary, zero padding.
    pos = 32
    b = batch.decode(data)
    for s in doc["sections"]:
        assert s["offset"] == pos and s["offset"] % 8 == 0, s
        end = s["offset"] + s["length"]
        pos = end + (-end & 7)
        assert data[end:pos] == bytes(pos - end), f"padding after {s['name']} is not zero"
        view = getattr(b, "deltas" if s["name"] == "offset_deltas" else s["name"])
        assert view is not None, s["name"]
        assert view.tobytes() == data[s["offset"] : end], s["name"]
    assert pos == len(data) and len(data) % 8 == 0


def test_batch_vectors_cover_every_flag_combination() -> None:
    assert {doc["header"]["flags"] for _, doc, _ in BATCHES} == {0, 1, 2, 3, 5, 13}


def test_keyed_vector_has_null_and_empty_keys_and_headers() -> None:
    [data] = [v[2] for v in BATCHES if v[0] == "batch-keys-headers"]
    rows = list(batch.decode(data).rows())
    keys = [r[1] for r in rows]
    assert None in keys and b"" in keys
    assert any(r[3] for r in rows)


# -- kafka-batch-v2 ------------------------------------------------------------------


@pytest.mark.parametrize(("name", "doc", "data"), KAFKA_BODIES, ids=_ids(KAFKA_BODIES))
def test_kafka_body_wraps_batches_to_vector(name: str, doc: dict[str, Any], data: bytes) -> None:
    assert doc["encoding"] == kafka_body.ENCODING == "kafka-batch-v2"
    h = doc["header"]
    assert struct.unpack_from("<4sIII", data, 0) == (h["magic"].encode(), h["crc32"], h["count"], h["reserved"])
    assert h["magic"] == "LLK1" and h["reserved"] == 0 and h["crc32"] == zlib.crc32(data[8:])
    # The batches follow the 16-byte header byte for byte, as produced.
    assert doc["batches"][0]["offset"] == 16
    assert sum(b["length"] for b in doc["batches"]) == len(data) - 16
    checked = kafka_body.check_batches(data[16:])
    assert checked.count == h["count"] == sum(b["record_count"] for b in doc["batches"])
    assert kafka_body.encode_body(checked).tobytes() == data
    for b in doc["batches"]:
        assert struct.unpack_from(">q", data, b["offset"])[0] == b["base_offset_as_written"]


@pytest.mark.parametrize(("name", "doc", "data"), KAFKA_BODIES_READ, ids=_ids(KAFKA_BODIES_READ))
def test_kafka_body_decodes_to_vector(name: str, doc: dict[str, Any], data: bytes) -> None:
    b = bodies.decode(data)
    assert list(b.rows()) == _rows(doc["decoded"]["records"])
    # A Kafka client reading the stored batches sees the null value as null.
    from kafka.record.default_records import DefaultRecordBatch

    got = []
    for _count, raw in kafka_body.iter_batches(memoryview(data)[16:]):
        for r in DefaultRecordBatch(bytes(raw)):
            got.append((r.timestamp, r.key, r.value, [(k, v) for k, v in r.headers]))
    want = [(r["timestamp"], None if r["key"] is None else bytes.fromhex(r["key"]),
             None if r["value"] is None else bytes.fromhex(r["value"]),
             [(x["key"], bytes.fromhex(x["value"])) for x in r["headers"]]) for r in doc["decoded"]["kafka_records"]]
    assert got == want


# -- shared WAL blob -----------------------------------------------------------------


@pytest.mark.parametrize(("name", "doc", "data"), BLOBS, ids=_ids(BLOBS))
def test_blob_packs_to_vector(name: str, doc: dict[str, Any], data: bytes) -> None:
    d = doc["decoded"]
    bodies = [
        blob.BlobBody(
            b["topic"], b["partition"], len(b["records"]), batch.encode([_record(r) for r in b["records"]])
        )
        for b in d["bodies"]
    ]
    packed = blob.pack(bodies, d["created_at_ms"])
    assert packed.data == data
    assert doc["object_key"] == KEYS.wal_blob(**doc["key_args"])


@pytest.mark.parametrize(("name", "doc", "data"), BLOBS_READ, ids=_ids(BLOBS_READ))
def test_blob_parses_to_vector(name: str, doc: dict[str, Any], data: bytes) -> None:
    d = doc["decoded"]
    assert data[:4] == b"LLS1"
    (hlen,) = struct.unpack_from(">I", data, 4)
    assert hlen == d["header_length"]
    assert msgpack.unpackb(data[8 : 8 + hlen]) == d["header"]
    created, parts = blob.parse_header(data)
    assert created == d["created_at_ms"]
    assert [
        {
            "topic": p.topic, "partition": p.partition, "msg_count": p.msg_count, "encoding": p.encoding,
            "body_offset": p.body_offset, "body_length": p.body_length, "crc": p.crc,
        }
        for p in parts
    ] == d["header"]["parts"]
    # Bodies follow the header back to back, at absolute offsets, and decode on their own.
    pos = 8 + hlen
    assert len({(p.topic) for p in parts}) == 2 and len(parts) == 3
    for p, body in zip(parts, d["bodies"], strict=True):
        assert p.body_offset == pos
        pos += p.body_length
        raw = data[p.body_offset : p.body_offset + p.body_length]
        assert p.crc == struct.unpack_from("<I", raw, 4)[0] == zlib.crc32(raw[8:])
        assert (p.topic, p.partition) == (body["topic"], body["partition"])
        assert list(batch.decode(raw).rows()) == _rows(body["records"])
    assert pos == len(data)


# -- etcd values ---------------------------------------------------------------------


def _meta_object(kind: str, m: dict[str, Any]) -> Any:
    if kind == "Control":
        p = m["pending"]
        pending = None if p is None else Pending(**p)
        return Control(m["log_state"], m["next_offset"], m["log_start_offset"], pending)
    if kind == "ProducerState":
        return ProducerState(**{**m, "recent": tuple(SequencedBatch.from_array(b) for b in m["recent"])})
    if kind == "TxnRecord":
        return TxnRecord(**{
            **m, "partitions": tuple(tuple(p) for p in m["partitions"]), "groups": tuple(m["groups"]),
            "staged": tuple(StagedAppend.from_array(a) for a in m["staged"]),
            "offsets": tuple(StagedOffset.from_array(o) for o in m["offsets"]),
            "sequences": tuple(PartitionSequences.from_array(q) for q in m["sequences"])})
    classes: dict[str, Any] = {
        "IndexEntry": IndexEntry,
        "TopicMeta": TopicMeta,
        "CompactionCursor": CompactionCursor,
        "CleanCursor": CleanCursor,
        "CompactionRecord": CompactionRecord,
        "ProducerState": ProducerState,
        "DamagedRange": DamagedRange,
        "SinkProgress": SinkProgress,
        "FormatRecord": FormatRecord,
    }
    return classes[kind](**m)


@pytest.mark.parametrize(("name", "doc", "data"), METAS, ids=_ids(METAS))
def test_meta_encodes_to_vector(name: str, doc: dict[str, Any], data: bytes) -> None:
    assert _meta_object(doc["kind"], doc["decoded"]).encode() == data


@pytest.mark.parametrize(("name", "doc", "data"), METAS_READ, ids=_ids(METAS_READ))
def test_meta_decodes_to_vector(name: str, doc: dict[str, Any], data: bytes) -> None:
    obj = _meta_object(doc["kind"], doc["decoded"])
    assert type(obj).decode(data) == obj
    decoded = msgpack.unpackb(data)
    assert decoded == doc["decoded"]
    assert list(decoded) == list(doc["decoded"]), "field order is part of the bytes"


@pytest.mark.parametrize(("name", "doc", "data"), METAS, ids=_ids(METAS))
def test_meta_vector_key(name: str, doc: dict[str, Any], data: bytes) -> None:
    assert getattr(KEYS, doc["key_fn"])(**doc["key_args"]) == doc["etcd_key"]


def test_producer_state_digest_is_its_pending_bodys_content_digest() -> None:
    [doc] = [d for n, d, _ in METAS if n == "producer-state"]
    [pending] = [d for n, d, _ in METAS if n == "control-pending"]
    p = pending["decoded"]["pending"]
    blob_bytes = (VECTORS / "wal-blob.bin").read_bytes()
    body = blob_bytes[p["byte_offset"] : p["byte_offset"] + p["byte_length"]]
    assert doc["decoded"]["append_id"] == p["append_id"]
    assert doc["decoded"]["digest"] == batch.content_digest(body)
    # The digest leaves the timestamps out: the same records stamped otherwise match.
    decoded = batch.decode(body)
    restamped = batch.encode([Record(v, k, 1, h) for _, k, v, h in decoded.rows()])
    assert batch.content_digest(restamped) == doc["decoded"]["digest"]


def test_index_key_is_zero_padded_end_offset() -> None:
    [doc] = [d for n, d, _ in METAS if n == "index-wal"]
    assert doc["etcd_key"] == "llog/orders/partitions/0/index/00000000000000000041"


def test_pending_vector_points_into_blob_vector() -> None:
    """control-pending's pending is the commit of the blob vector's orders/0 body and
    index-wal is its materialization: the vectors tell one consistent story."""
    [(_, blob_doc, blob_data)] = BLOBS
    [ctl] = [d for n, d, _ in METAS if n == "control-pending"]
    [idx] = [d for n, d, _ in METAS if n == "index-wal"]
    p = Pending(**ctl["decoded"]["pending"])
    assert p.data_key == blob_doc["object_key"]
    raw = blob_data[p.byte_offset : p.byte_offset + p.byte_length]
    assert len(batch.decode(raw)) == p.msg_count
    assert ctl["decoded"]["next_offset"] == p.end_offset + 1
    assert IndexEntry(**idx["decoded"]) == p.index_entry()
    assert idx["key_args"]["end_offset"] == p.end_offset
