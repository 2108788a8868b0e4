"""Unit tests of the pure codec: bytes-batch-v1 bodies, the shared WAL blob, etcd values."""

from __future__ import annotations

import struct
import zlib
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llog.codec import batch, blob
from llog.codec.etcd_values.compaction import CompactionCursor, CompactionRecord
from llog.codec.etcd_values.maps import MetaFormatError
from llog.codec.etcd_values.partition import COMPACTED, FENCED, OPEN, WAL, Control, IndexEntry, Pending
from llog.codec.etcd_values.topic import TopicMeta
from llog.records import Record

Row = tuple[int, bytes | None, bytes | None, tuple[tuple[str, bytes], ...]]

header_keys = st.text(max_size=8)
headers = st.lists(st.tuples(header_keys, st.binary(max_size=12)), max_size=3).map(tuple)
records = st.builds(
    Record,
    value=st.binary(max_size=64) | st.none(),  # None: a tombstone
    key=st.none() | st.binary(max_size=16),
    timestamp=st.integers(min_value=0, max_value=2**63 - 1),
    headers=headers,
)
record_lists = st.lists(records, min_size=1, max_size=40)
plain_lists = st.lists(
    st.builds(Record, value=st.binary(max_size=64), timestamp=st.integers(0, 2**63 - 1)),
    min_size=1,
    max_size=40,
)


def _rows(recs: list[Record]) -> list[Row]:
    return [(r.timestamp or 0, r.key, r.value, r.headers) for r in recs]


def _small() -> list[Record]:
    return [
        Record(b"v0", key=b"k0", timestamp=1, headers=(("a", b"1"),)),
        Record(b"", key=None, timestamp=2),
        Record(b"\x00\xff", key=b"", timestamp=3, headers=(("\u00e9", b""), ("b", b"22"))),
    ]


def _recrc(body: bytearray) -> bytes:
    struct.pack_into("<I", body, 4, zlib.crc32(body[8:]))
    return bytes(body)


# -- bytes-batch-v1 round trips ----------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(record_lists)
def test_batch_round_trip(recs: list[Record]) -> None:
    body = batch.encode(recs)
    assert len(body) % 8 == 0
    b = batch.decode(body)
    assert len(b) == len(recs)
    assert list(b.rows()) == _rows(recs)


@settings(max_examples=200, deadline=None)
@given(plain_lists)
def test_batch_without_keys_or_headers_sets_no_flags(recs: list[Record]) -> None:
    body = batch.encode(recs)
    _, _, _, flags, hcount, _, klen, _ = struct.unpack_from("<4sIIIIIII", body, 0)
    assert (flags, hcount, klen) == (0, 0, 0)
    b = batch.decode(body)
    assert b.key_offsets is None and b.header_offsets is None
    assert list(b.rows()) == _rows(recs)


@settings(max_examples=200, deadline=None)
@given(record_lists, st.data())
def test_batch_rows_slice(recs: list[Record], data: st.DataObject) -> None:
    n = len(recs)
    start = data.draw(st.integers(0, n))
    stop = data.draw(st.integers(0, n + 3))
    assert list(batch.decode(batch.encode(recs)).rows(start, stop)) == _rows(recs)[start:stop]


def test_batch_empty_values_keys_and_all_byte_values() -> None:
    recs = [
        Record(b"", timestamp=0),
        Record(bytes(range(256)), key=bytes(range(255, -1, -1)), timestamp=2**63 - 1),
        Record(b"", key=b"", timestamp=5, headers=(("", b""),)),
    ]
    assert list(batch.decode(batch.encode(recs)).rows()) == _rows(recs)


def test_batch_unstamped_timestamp_encodes_as_zero() -> None:
    assert list(batch.decode(batch.encode([Record(b"x")])).rows()) == [(0, None, b"x", ())]


def test_batch_decodes_from_memoryview_slice() -> None:
    recs = _small()
    body = batch.encode(recs)
    framed = b"junk" + body + b"tail"
    b = batch.decode(memoryview(framed)[4 : 4 + len(body)])
    assert list(b.rows()) == _rows(recs)


def test_batch_encode_rejects_empty() -> None:
    with pytest.raises(batch.BatchFormatError):
        batch.encode([])


# -- Arrow -----------------------------------------------------------------------


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(record_lists)
def test_batch_to_arrow_equals_rows(recs: list[Record]) -> None:
    pa = pytest.importorskip("pyarrow")
    cols = batch.decode(batch.encode(recs)).to_arrow()
    for arr in cols.values():
        arr.validate(full=True)
    assert cols["timestamp"].type == pa.int64()
    assert cols["key"].type == pa.binary() and cols["value"].type == pa.binary()
    assert cols["timestamp"].to_pylist() == [r.timestamp for r in recs]
    assert cols["key"].to_pylist() == [r.key for r in recs]
    assert cols["value"].to_pylist() == [r.value for r in recs]
    assert cols["headers"].to_pylist() == [[{"key": k, "value": v} for k, v in r.headers] for r in recs]


def test_tombstones_set_the_null_values_flag_and_round_trip_apart_from_empty_values() -> None:
    recs = [Record(b"", key=b"a", timestamp=1), Record(None, key=b"a", timestamp=2), Record(b"x", timestamp=3)]
    body = batch.encode(recs)
    assert struct.unpack_from("<I", body, 12)[0] == batch.FLAG_KEYS | batch.FLAG_NULL_VALUES
    assert [v for _, _, v, _ in batch.decode(body).rows()] == [b"", None, b"x"]
    assert [v for _, _, v, _ in batch.decode(body).rows(1, 3)] == [None, b"x"]
    no_nulls = batch.encode([Record(b"", key=b"a", timestamp=1)])
    assert not struct.unpack_from("<I", no_nulls, 12)[0] & batch.FLAG_NULL_VALUES


def test_a_key_compacted_body_carries_its_offsets_and_spans_by_them() -> None:
    recs = [Record(b"a", key=b"a", timestamp=1), Record(None, key=b"b", timestamp=2),
            Record(b"c", key=b"c", timestamp=3)]
    body = batch.encode_columns(batch.columns_of(recs), deltas=[2, 5, 9]).tobytes()
    b = batch.decode(body)
    assert struct.unpack_from("<I", body, 12)[0] & batch.FLAG_OFFSETS
    assert b.extent == 10 and len(b) == 3
    assert b.span(0, 10) == (0, 3) and b.span(3, 9) == (1, 2) and b.span(6, 9) == (2, 2)
    assert list(b.offsets(100, *b.span(3, 10))) == [105, 109]
    assert [r[2] for r in b.rows(*b.span(3, 10))] == [None, b"c"]
    # A dense body spans by row.
    dense = batch.decode(batch.encode(recs))
    assert dense.span(1, 7) == (1, 3) and list(dense.offsets(100, 1, 3)) == [101, 102]
    for bad in ([2, 2, 9], [-1, 5, 9], [5, 2, 9], [1, 2]):
        with pytest.raises(batch.BatchFormatError):
            batch.encode_columns(batch.columns_of(recs), deltas=bad)
    crafted = bytearray(body)
    struct.pack_into("<i", crafted, 32 + 24 + 4, 1)  # the second delta (after 24 bytes of stamps) below the first
    with pytest.raises(batch.BatchFormatError, match="rise strictly"):
        batch.decode(_recrc(crafted))


def test_batch_to_arrow_without_keys_or_headers() -> None:
    pa = pytest.importorskip("pyarrow")
    cols = batch.decode(batch.encode([Record(b"a", timestamp=1), Record(b"", timestamp=2)])).to_arrow()
    assert cols["key"].to_pylist() == [None, None]
    assert cols["headers"].to_pylist() == [[], []]
    assert cols["headers"].type == pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    table = pa.table(cols)
    assert table.num_rows == 2


# -- corruption --------------------------------------------------------------------


def test_every_flipped_byte_is_detected() -> None:
    body = batch.encode(_small())
    assert len(body) > 100
    for i in range(len(body)):
        for mask in (0x01, 0x80, 0xFF):
            bad = bytearray(body)
            bad[i] ^= mask
            with pytest.raises(batch.BatchFormatError):
                batch.decode(bytes(bad))


@pytest.mark.parametrize("cut", [0, 1, 7, 31, 32, 33, 64])
def test_truncated_body_is_rejected(cut: int) -> None:
    body = batch.encode(_small())
    with pytest.raises(batch.BatchFormatError):
        batch.decode(body[:cut])
    # Truncated with a matching CRC: still caught, by the section bounds.
    if cut >= 32:
        with pytest.raises(batch.BatchFormatError, match=r"truncated|length"):
            batch.decode(_recrc(bytearray(body[:cut])))


def test_every_truncation_is_rejected() -> None:
    body = batch.encode(_small())
    for cut in range(len(body)):
        with pytest.raises(batch.BatchFormatError):
            batch.decode(body[:cut])
        if cut >= 8:
            with pytest.raises(batch.BatchFormatError):
                batch.decode(_recrc(bytearray(body[:cut])))


def test_trailing_bytes_are_rejected() -> None:
    body = batch.encode(_small())
    with pytest.raises(batch.BatchFormatError, match="length"):
        batch.decode(_recrc(bytearray(body + bytes(8))))


def test_bad_magic_is_rejected() -> None:
    body = bytearray(batch.encode(_small()))
    body[:4] = b"LLB2"
    with pytest.raises(batch.BatchFormatError, match="magic"):
        batch.decode(bytes(body))


def test_unknown_flags_and_empty_count_are_rejected() -> None:
    body = bytearray(batch.encode(_small()))
    flagged = bytearray(body)
    struct.pack_into("<I", flagged, 12, 3 | 16)
    with pytest.raises(batch.BatchFormatError, match="flags"):
        batch.decode(_recrc(flagged))
    empty = bytearray(body)
    struct.pack_into("<I", empty, 8, 0)
    with pytest.raises(batch.BatchFormatError, match="empty"):
        batch.decode(_recrc(empty))


def test_inconsistent_offsets_with_valid_crc_are_rejected() -> None:
    body = bytearray(batch.encode([Record(b"ab", timestamp=1), Record(b"cd", timestamp=2)]))
    vo = 32 + 16  # value offsets follow two i64 timestamps
    assert struct.unpack_from("<3i", body, vo) == (0, 2, 4)
    not_monotonic = bytearray(body)
    struct.pack_into("<i", not_monotonic, vo + 4, 5)
    with pytest.raises(batch.BatchFormatError, match="monotonic"):
        batch.decode(_recrc(not_monotonic))
    not_spanning = bytearray(body)
    struct.pack_into("<i", not_spanning, vo, 1)
    with pytest.raises(batch.BatchFormatError, match="span"):
        batch.decode(_recrc(not_spanning))


def test_header_key_bytes_that_are_not_utf8_are_rejected() -> None:
    body = bytearray(batch.encode([Record(b"v", timestamp=1, headers=(("\u00e9", b"x"), ("a", b"")))]))
    i = body.find("\u00e9".encode())
    invalid = bytearray(body)
    invalid[i] = 0xFF
    with pytest.raises(batch.BatchFormatError, match="UTF-8"):
        batch.decode(_recrc(invalid))


def test_header_key_boundary_inside_a_character_is_rejected() -> None:
    # Keys "é" (2 bytes) and "a": move the boundary between them into the "é".
    body = bytearray(batch.encode([Record(b"v", timestamp=1, headers=(("\u00e9", b"x"), ("a", b"")))]))
    hko = 32 + 8 + 8 + 8  # timestamps (8), value offsets (8), header offsets (8, padded)
    assert struct.unpack_from("<3i", body, hko) == (0, 2, 3)
    struct.pack_into("<i", body, hko + 4, 1)
    with pytest.raises(batch.BatchFormatError, match="UTF-8"):
        batch.decode(_recrc(body))


def test_crafted_bodies_with_valid_crc_fail_cleanly() -> None:
    """A single changed byte with a recomputed CRC either fails with BatchFormatError
    or decodes into a batch whose rows and Arrow arrays are well-formed: never a
    stray IndexError/UnicodeDecodeError out of the reader."""
    body = batch.encode(_small())
    for i in range(8, len(body)):
        for value in (0x00, 0x01, 0x7F, 0x80, 0xFF):
            if body[i] == value:
                continue
            crafted = bytearray(body)
            crafted[i] = value
            try:
                b = batch.decode(_recrc(crafted))
            except batch.BatchFormatError:
                continue
            rows = list(b.rows())
            assert len(rows) == len(b)


def test_decode_without_verify_skips_only_the_crc() -> None:
    body = bytearray(batch.encode(_small()))
    body[4] ^= 0xFF
    assert list(batch.decode(bytes(body), verify=False).rows()) == _rows(_small())
    with pytest.raises(batch.BatchFormatError, match="checksum"):
        batch.decode(bytes(body))


# -- shared WAL blob ---------------------------------------------------------------


def _bodies(n: int) -> list[blob.BlobBody]:
    out = []
    for i in range(n):
        recs = [Record(b"x" * (i * 37 + j), timestamp=j) for j in range(i + 1)]
        out.append(blob.BlobBody(f"t{i % 2}", i, len(recs), batch.encode(recs)))
    return out


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 40), st.integers(0, 2**63 - 1))
def test_blob_round_trip_and_header_fixpoint(n: int, created: int) -> None:
    bodies = _bodies(n)
    packed = blob.pack(bodies, created)
    got_created, parts = blob.parse_header(packed.data)
    assert got_created == created and parts == packed.parts
    (hlen,) = struct.unpack_from(">I", packed.data, 4)
    assert parts[0].body_offset == 8 + hlen
    for body, part in zip(bodies, parts, strict=True):
        assert (part.topic, part.partition, part.msg_count) == (body.topic, body.partition, body.msg_count)
        assert part.encoding == batch.ENCODING
        raw = packed.data[part.body_offset : part.body_offset + part.body_length]
        assert raw == body.body
        assert part.crc == zlib.crc32(raw[8:])
    assert parts[-1].body_offset + parts[-1].body_length == len(packed.data)


@settings(max_examples=60, deadline=None)
@given(st.lists(record_lists, min_size=1, max_size=6), st.booleans())
def test_blob_crc_is_the_crc_of_the_whole_blob(groups: list[list[Record]], pieces: bool) -> None:
    """The writer hands this CRC to S3 as the upload's checksum: combined from the
    bodies' own CRCs, it must equal a CRC over every byte of the blob."""
    bodies = [
        blob.BlobBody("t", i, len(recs), batch.encode_body(recs, 7) if pieces else batch.encode(recs, 7))
        for i, recs in enumerate(groups)
    ]
    packed = blob.pack(bodies, 1)
    assert packed.crc32 == zlib.crc32(packed.data)
    for recs in groups:  # one body alone (a compacted object) likewise
        enc = batch.encode_body(recs, 7)
        assert enc.full_crc() == zlib.crc32(enc.tobytes())


@settings(max_examples=200, deadline=None)
@given(record_lists, st.integers(0, 2**40))
def test_encode_columns_equals_encode_of_records(recs: list[Record], stamp: int) -> None:
    assert batch.encode_columns(batch.columns_of(recs), stamp).tobytes() == batch.encode(recs, stamp)


def test_blob_pack_rejects_no_bodies() -> None:
    with pytest.raises(blob.BlobFormatError):
        blob.pack([], 0)


def _blob_with_header(header: Any) -> bytes:
    raw: bytes = msgpack.packb(header)
    return b"LLS1" + struct.pack(">I", len(raw)) + raw


GOOD_PART = {
    "topic": "t", "partition": 0, "msg_count": 1, "encoding": "bytes-batch-v1",
    "body_offset": 8, "body_length": 40, "crc": 1,
}


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"", "prefix"),
        (b"LLS1\x00\x00", "prefix"),
        (b"LLS2" + bytes(4), "magic"),
        (b"LLS1" + struct.pack(">I", 100) + b"\x80", "shorter than its header"),
        (b"LLS1" + struct.pack(">I", 1) + b"\xc1", "bad header"),  # 0xc1: never used in msgpack
        (_blob_with_header([1, 2]), "bad header"),
        (_blob_with_header({"v": 2, "created_at_ms": 0, "parts": []}), "version"),
        (_blob_with_header({"v": 1, "parts": []}), "bad header"),
        (_blob_with_header({"v": 1, "created_at_ms": 0}), "bad header"),
        (_blob_with_header({"v": 1, "created_at_ms": 0, "parts": [{"topic": "t"}]}), "bad header"),
        (_blob_with_header({"v": 1, "created_at_ms": 0, "parts": 7}), "bad header"),
        (_blob_with_header({"v": 1, "created_at_ms": "soon", "parts": [GOOD_PART]}), "bad header"),
    ],
)
def test_blob_header_parse_errors(data: bytes, match: str) -> None:
    with pytest.raises(blob.BlobFormatError, match=match):
        blob.parse_header(data)


def test_blob_header_parses_from_prefix_only() -> None:
    packed = blob.pack(_bodies(3), 7)
    (hlen,) = struct.unpack_from(">I", packed.data, 4)
    assert blob.parse_header(packed.data[: 8 + hlen]) == (7, packed.parts)


# -- etcd values ---------------------------------------------------------------------

PENDING = Pending("ab:0", 10, 11, 2, "llog/wal-shared/ab", 100, 64, 5, 6)
VALUES: list[Any] = [
    Control(),
    Control(FENCED, 12, 3, PENDING),
    Control(OPEN, 12, 0, PENDING),
    PENDING.index_entry(),
    IndexEntry(COMPACTED, 12, "llog/t/partitions/0/data/compacted/cd", 0, 500, 9, 6),
    TopicMeta("t", 3, 1),
    TopicMeta("t", 3, 1, 1000, 2000),
    CompactionCursor(12),
    CompactionRecord("DELETING_OLD", 0, 11, 10, 12, "k", 500, 6, 9, "me"),
]


@pytest.mark.parametrize("value", VALUES, ids=lambda v: type(v).__name__)
def test_meta_round_trip(value: Any) -> None:
    assert type(value).decode(value.encode()) == value


def test_meta_decode_ignores_unknown_fields() -> None:
    m = msgpack.unpackb(Control(OPEN, 12, 0, PENDING).encode())
    m["future_field"] = [1, 2]
    m["pending"]["another"] = "x"
    assert Control.decode(msgpack.packb(m)) == Control(OPEN, 12, 0, PENDING)


def test_pending_index_entry_carries_the_append() -> None:
    e = PENDING.index_entry()
    assert (e.kind, e.msg_count, e.data_key, e.byte_offset, e.byte_length, e.append_id) == (
        WAL, 2, "llog/wal-shared/ab", 100, 64, "ab:0"
    )


def _mutated(value: Any, **changes: Any) -> bytes:
    m = msgpack.unpackb(value.encode())
    for k, v in changes.items():
        if v is _DROP:
            del m[k]
        else:
            m[k] = v
    out: bytes = msgpack.packb(m)
    return out


_DROP = object()
CTL = Control(OPEN, 12, 0, PENDING)
IDX = PENDING.index_entry()
CR = CompactionRecord("DELETING_OLD", 0, 11, 10, 12, "k", 500, 6, 9, "me")


@pytest.mark.parametrize(
    ("cls", "raw"),
    [
        (Control, b"\xc1"),
        (Control, b""),
        (Control, msgpack.packb([1, 2, 3])),
        (Control, msgpack.packb("control")),
        (Control, _mutated(CTL, next_offset="12")),
        (Control, _mutated(CTL, next_offset=True)),
        (Control, _mutated(CTL, next_offset=1.5)),
        (Control, _mutated(CTL, log_start_offset=None)),
        (Control, _mutated(CTL, log_state="CLOSED")),
        (Control, _mutated(CTL, log_state=1)),
        (Control, _mutated(CTL, pending=[1])),
        (Control, _mutated(CTL, pending={"append_id": "x"})),
        (Control, _mutated(CTL, next_offset=13)),  # pending must end at next_offset - 1
        (Control, _mutated(CTL, pending={**PENDING.to_map(), "msg_count": 3})),
        (Control, _mutated(CTL, pending={**PENDING.to_map(), "byte_offset": b"\x00"})),
        (Control, _mutated(CTL, log_state=_DROP)),
        (IndexEntry, _mutated(IDX, kind="PENDING")),
        (IndexEntry, _mutated(IDX, msg_count=0)),
        (IndexEntry, _mutated(IDX, byte_length=0)),
        (IndexEntry, _mutated(IDX, byte_offset=-1)),
        (IndexEntry, _mutated(IDX, append_id=7)),
        (IndexEntry, _mutated(IDX, data_key=b"llog/wal-shared/ab")),
        (IndexEntry, _mutated(IDX, max_timestamp=_DROP)),
        (TopicMeta, _mutated(TopicMeta("t", 3, 1), partitions="3")),
        (TopicMeta, _mutated(TopicMeta("t", 3, 1), retention_ms="1d")),
        (TopicMeta, _mutated(TopicMeta("t", 3, 1), retention_bytes=False)),
        (TopicMeta, _mutated(TopicMeta("t", 3, 1), name=_DROP)),
        (CompactionCursor, msgpack.packb({"offset": "12"})),
        (CompactionCursor, msgpack.packb({})),
        (CompactionRecord, _mutated(CR, stage="DONE")),
        (CompactionRecord, _mutated(CR, last_wal_start_offset=None)),
        (CompactionRecord, _mutated(CR, owner=_DROP)),
    ],
)
def test_meta_decode_of_wrong_types_raises(cls: Any, raw: bytes) -> None:
    with pytest.raises(MetaFormatError):
        cls.decode(raw)


def test_a_group_generation_round_trips_and_a_malformed_one_is_refused() -> None:
    from llog.codec.etcd_values.groups import GroupGeneration, GroupMember

    gen = GroupGeneration(7, "consumer", "range", "m-1", (
        GroupMember("m-1", None, "c1", 6000, 300000, (("range", b"\x00\x01"), ("roundrobin", b"")), b"\x00a"),
        GroupMember("m-2", "static-2", "c2", 10000, 60000, (("range", b"\x02"),), b""),
    ))
    assert GroupGeneration.decode(gen.encode()) == gen
    for bad in (msgpack.packb({"epoch": 7}), msgpack.packb([1, 2]),
                msgpack.packb({"epoch": 7, "protocol_type": "consumer", "protocol": "range", "leader": "m",
                               "members": [{"member_id": 3}]}),
                msgpack.packb({"epoch": 7, "protocol_type": "consumer", "protocol": "range", "leader": "m",
                               "members": [{"member_id": "m", "group_instance_id": None, "client_id": "c",
                                            "session_timeout_ms": 1, "rebalance_timeout_ms": 1,
                                            "protocols": [["range"]], "assignment": b""}]})):
        with pytest.raises(MetaFormatError):
            GroupGeneration.decode(bad)
