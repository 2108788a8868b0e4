"""Topics whose compacted ranges are Parquet files (spec §7.6), on the suite's real
etcd and S3: records written before and after compaction read back identically
through the SDK and the broker, the compacted object is a Parquet file any Parquet
reader reads, the compactor killed at every stage loses and duplicates nothing, the
format can change between compactions, and a bad setting or file gets a clear error."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

from compactor import compact_once
from compactor.stages import StageEvent
from llog.codec import batch, parquet_body
from llog.codec.etcd_values.partition import IndexEntry
from llog.codec.etcd_values.topic import TopicMeta
from llog.config import LlogConfig
from llog.connection import Connection
from llog.errors import CorruptBlob, InvalidInput, UnknownTopic
from llog.producer import BatchingProducer
from llog.reader import Reader
from llog.records import Record
from llog.topic.admin import Topics
from tests.broker_harness import broker_process

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

T0 = 1_714_564_800_000


@pytest.fixture(name="pconn")
def pconn_fixture(config: LlogConfig) -> Iterator[Connection]:
    with Connection(replace(config, compact_min_age_ms=0)) as c:
        yield c


def _records(n: int, start: int = 0) -> list[Record]:
    return [Record(f"value-{i}".encode() * (i % 3), None if i % 4 == 0 else f"k{i}".encode(), T0 + i,
                   (("h", str(i).encode()),) if i % 5 == 0 else ()) for i in range(start, start + n)]


def _write(conn: Connection, topic: str, partition: int, records: list[Record], groups: int) -> None:
    with BatchingProducer(conn) as prod:
        step = len(records) // groups
        for g in range(groups):
            prod.send_group(topic, partition, records[g * step:(g + 1) * step]).result()


def _read(conn: Connection, topic: str, partition: int) -> list[tuple[int, int, bytes | None, bytes, tuple]]:
    with Reader(conn) as r:
        return [(x.offset, x.timestamp, x.key, x.value, x.headers) for x in r.scan(topic, partition)]


def _entries(conn: Connection, topic: str, partition: int) -> list[IndexEntry]:
    keys = conn.keys
    return [IndexEntry.decode(kv.value)
            for kv in conn.etcd.scan(keys.index_prefix(topic, partition), keys.index_range_end(topic, partition))]


def _first_compacted(conn: Connection, topic: str, partition: int) -> tuple[str, int]:
    """(data key, first offset) of the partition's first COMPACTED entry."""
    keys = conn.keys
    for kv in conn.etcd.scan(keys.index_prefix(topic, partition), keys.index_range_end(topic, partition)):
        e = IndexEntry.decode(kv.value)
        if e.kind == "COMPACTED":
            return e.data_key, keys.end_offset_of(kv.key) - e.msg_count + 1
    raise AssertionError("no COMPACTED entry")


def _want(records: list[Record]) -> list[tuple[int, int, bytes | None, bytes, tuple]]:
    return [(i, r.timestamp or 0, r.key, r.value, r.headers) for i, r in enumerate(records)]


def test_a_parquet_topic_compacts_into_a_parquet_file_every_reader_reads(pconn: Connection) -> None:
    meta = Topics(pconn).create("pq", 2, compacted_format="parquet")
    assert meta.compacted_format == "parquet"
    recs = _records(600)
    _write(pconn, "pq", 1, recs[:400], groups=8)
    result = compact_once(pconn, "pq", 1)
    assert result.outcome == "compacted"
    _write(pconn, "pq", 1, recs[400:], groups=2)  # an uncompacted tail after it
    assert _read(pconn, "pq", 1) == _want(recs)
    # The compacted object is a Parquet file with the documented columns.
    data_key, first = _first_compacted(pconn, "pq", 1)
    data = pconn.store.get(data_key)
    assert data[:4] == data[-4:] == b"PAR1"
    table = pq.read_table(pa.BufferReader(data))
    assert table.column_names == list(parquet_body.COLUMNS)
    assert first == 0 and table.column("offset").to_pylist() == list(range(400))
    assert set(table.column("partition").to_pylist()) == {1}
    assert table.column("value").to_pylist() == [r.value for r in recs[:400]]
    assert table.column("key").to_pylist() == [r.key for r in recs[:400]]
    assert table.column("headers").to_pylist()[:6] == [
        [{"key": k, "value": v} for k, v in r.headers] for r in recs[:6]]
    # The broker serves the same records from it.
    with broker_process(pconn.config) as b:
        status, resp = b.post("/consume", {"topic_partitions": [
            {"topic": "pq", "partition": 1, "fetch_offset": 390}], "max_wait_ms": 0})
    assert status == 200
    got = resp["topic_partitions"][0]["records"]
    assert [r["offset"] for r in got[:15]] == list(range(390, 405))


def test_the_format_changes_between_compactions_and_both_read(pconn: Connection) -> None:
    Topics(pconn).create("mixed", 1)
    recs = _records(300)
    _write(pconn, "mixed", 0, recs[:100], groups=4)
    assert compact_once(pconn, "mixed", 0).outcome == "compacted"  # bytes-batch-v1
    assert Topics(pconn).set_compacted_format("mixed", "parquet").compacted_format == "parquet"
    _write(pconn, "mixed", 0, recs[100:200], groups=4)
    assert compact_once(pconn, "mixed", 0).outcome == "compacted"  # Parquet
    _write(pconn, "mixed", 0, recs[200:], groups=4)
    kinds = [pconn.store.get_range(e.data_key, 0, 4) for e in _entries(pconn, "mixed", 0) if e.kind == "COMPACTED"]
    assert kinds == [b"LLB1", b"PAR1"]
    assert _read(pconn, "mixed", 0) == _want(recs)
    Topics(pconn).set_compacted_format("mixed", None)
    assert TopicMeta.decode(pconn.etcd.get(pconn.keys.topic_meta("mixed")).value).compacted_format is None


@pytest.mark.parametrize("point", ["after_put", "after_record", "after_WRITING_COMPACTED_INDEX",
                                   "after_DELETING_OLD", "after_UPDATING_CURSOR"])
def test_a_compactor_stopped_at_each_point_of_a_parquet_compaction_loses_nothing(
    pconn: Connection, point: str
) -> None:
    class Stopped(BaseException):  # like a kill: nothing after the point runs
        pass

    Topics(pconn).create("pk", 1, compacted_format="parquet")
    recs = _records(200)
    _write(pconn, "pk", 0, recs, groups=5)

    def hook(event: StageEvent) -> None:
        if event.point == point:
            raise Stopped

    with pytest.raises(Stopped):
        compact_once(pconn, "pk", 0, hook=hook)
    assert _read(pconn, "pk", 0) == _want(recs)  # mid-compaction: nothing lost or doubled
    compact_once(pconn, "pk", 0)  # finishes the interrupted one first
    assert _read(pconn, "pk", 0) == _want(recs)
    assert [e.kind for e in _entries(pconn, "pk", 0)] == ["COMPACTED"]


def test_bad_formats_and_damaged_files_get_clear_errors(pconn: Connection) -> None:
    with pytest.raises(InvalidInput, match="compacted_format"):
        Topics(pconn).create("bad", 1, compacted_format="orc")
    with pytest.raises(UnknownTopic):
        Topics(pconn).set_compacted_format("no-such-topic", "parquet")
    Topics(pconn).create("dmg", 1, compacted_format="parquet")
    _write(pconn, "dmg", 0, _records(50), groups=2)
    assert compact_once(pconn, "dmg", 0).outcome == "compacted"
    data_key, _ = _first_compacted(pconn, "dmg", 0)
    data = bytearray(pconn.store.get(data_key))
    data[len(data) // 2:len(data) // 2 + 64] = bytes(64)  # zero a stretch of pages
    pconn.store.put(data_key, bytes(data))
    with Connection(pconn.config) as fresh, pytest.raises(CorruptBlob) as err:
        _read(fresh, "dmg", 0)
    assert err.value.key == data_key


def test_the_cli_creates_alters_and_describes_the_format(config: LlogConfig, conn: Connection) -> None:
    import json

    from tests.test_cli import llog_cli

    llog_cli(config, "topics", "create", "cli-pq", "-p", "2", "--compacted-format", "parquet")
    assert conn.topic("cli-pq", refresh=True).compacted_format == "parquet"
    out = llog_cli(config, "topics", "describe", "cli-pq", "--json")
    assert json.loads(out.stdout)["compacted_format"] == "parquet"
    out = llog_cli(config, "topics", "alter", "cli-pq", "--compacted-format", "bytes-batch-v1")
    assert "bytes-batch-v1 from the next compaction on" in out.stdout
    assert conn.topic("cli-pq", refresh=True).compacted_format is None
    bad = llog_cli(config, "topics", "alter", "cli-pq", "--compacted-format", "orc", ok=False)
    assert bad.returncode == 2 and "invalid choice" in bad.stderr


def test_a_scan_from_inside_a_parquet_file_gets_only_the_row_groups_it_needs(pconn: Connection) -> None:
    import os

    Topics(pconn).create("rg", 1, compacted_format="parquet")
    recs = [Record(os.urandom(1024), f"k{i}".encode(), T0 + i) for i in range(12_000)]
    _write(pconn, "rg", 0, recs, groups=6)
    with Connection(replace(pconn.config, compact_target_bytes=64 << 20)) as big:
        assert compact_once(big, "rg", 0).outcome == "compacted"
    data_key, _ = _first_compacted(pconn, "rg", 0)
    size = pconn.store.head(data_key).size  # type: ignore[union-attr]
    groups = pq.ParquetFile(pa.BufferReader(pconn.store.get(data_key))).metadata.num_row_groups
    assert groups >= 3
    want = _want(recs)
    for start, most in ((9_000, 0.5 * size), (100, 1.01 * size)):
        with Connection(pconn.config) as fresh, Reader(fresh) as r:
            got = [(x.offset, x.timestamp, x.key, x.value, x.headers) for x in r.scan("rg", 0, start)]
            fetched = fresh.metrics.read_bytes._value.get()
        assert got == want[start:]
        assert fetched <= most, (start, fetched, size)
    # A damaged footer is CorruptBlob naming the object, not a wrong answer.
    data = bytearray(pconn.store.get(data_key))
    data[-8:-4] = (len(data) * 2).to_bytes(4, "little")
    pconn.store.put(data_key, bytes(data))
    with Connection(pconn.config) as fresh, Reader(fresh) as r, pytest.raises(CorruptBlob) as err:
        list(r.scan("rg", 0, 9_000))
    assert err.value.key == data_key


def test_columns_every_row_leaves_empty_are_not_read_and_read_back_empty() -> None:
    n = 3000
    stamps, values = [T0 + i for i in range(n)], [b"v%d" % i for i in range(n)]
    bare = parquet_body.encode((stamps, None, values, None), 0, 0)
    ts, keys, vals, headers = parquet_body.decode(bare).columns()
    assert (ts, keys, vals, headers) == (stamps, None, values, None)
    # Keys and headers only in the last rows: a file of several row groups where the
    # first groups have none; reading from the start or from the last group sees them.
    keys_in = [None] * (n - 10) + [b"k%d" % i for i in range(10)]
    hdrs_in: list[tuple[tuple[str, bytes], ...]] = [()] * (n - 10) + [(("h", b"%d" % i),) for i in range(10)]
    big = [v.ljust(4096, b".") for v in values]  # ~12 MiB of values: three row groups
    body = parquet_body.encode((stamps, keys_in, big, hdrs_in), 0, 0)
    assert pq.ParquetFile(pa.BufferReader(body)).metadata.num_row_groups >= 3
    ts, keys, vals, headers = parquet_body.decode(body).columns()
    assert (keys, headers, vals) == (keys_in, hdrs_in, big)
    b, first = parquet_body.decode_from(body, n - 5)
    assert first > 0
    assert b.columns()[1] == keys_in[first:] and b.columns()[3] == hdrs_in[first:]


def test_any_row_range_of_a_parquet_body_reads_as_of_the_same_records_in_bytes_batch_v1() -> None:
    # ArrowBatch converts through Arrow, Batch splits buffers: the same records either way.
    records = _records(500)
    cols = batch.columns_of(records)
    stamps = [r.timestamp for r in records]
    file = parquet_body.encode((stamps, *cols[1:]), 3, 0)
    chunks = pq.ParquetFile(pa.BufferReader(file)).metadata.row_group(0)
    encodings = {chunks.column(i).path_in_schema: chunks.column(i).encodings for i in range(chunks.num_columns)}
    assert "DELTA_BINARY_PACKED" in encodings["offset"] and "DELTA_BINARY_PACKED" in encodings["timestamp"]
    pq_body = parquet_body.decode(file)
    llb1 = batch.decode(batch.encode(records))
    assert isinstance(pq_body, parquet_body.ArrowBatch)
    for start, stop in ((0, None), (0, 1), (3, 4), (7, 499), (250, 900), (499, 500), (500, 600), (9, 3)):
        assert pq_body.columns(start, stop) == llb1.columns(start, stop), (start, stop)


def test_a_file_of_several_row_groups_is_read_group_by_group(pconn: Connection) -> None:
    import os

    Topics(pconn).create("groups", 1, compacted_format="parquet")
    recs = [Record(os.urandom(1024), f"k{i}".encode(), T0 + i, (("i", b"%d" % i),) if i % 7 == 0 else ())
            for i in range(12_000)]
    _write(pconn, "groups", 0, recs, groups=6)
    with Connection(replace(pconn.config, compact_target_bytes=64 << 20)) as big:
        assert compact_once(big, "groups", 0).outcome == "compacted"
    data_key, _ = _first_compacted(pconn, "groups", 0)
    md = pq.ParquetFile(pa.BufferReader(pconn.store.get(data_key))).metadata
    rows = [md.row_group(g).num_rows for g in range(md.num_row_groups)]
    assert len(rows) >= 3
    want = _want(recs)
    first_end, last_start = rows[0], sum(rows[:-1])
    with Reader(pconn) as r:
        for start, end in ((0, None), (first_end - 5, first_end + 5), (10, first_end - 10), (last_start + 1, None)):
            got = [(x.offset, x.timestamp, x.key, x.value, x.headers) for x in r.scan("groups", 0, start, end)]
            assert got == want[start:end], (start, end)
    # Damage in the last row group: a scan that ends before it never decodes it; one
    # that reaches it gets CorruptBlob naming the object after the groups before it.
    last = md.row_group(len(rows) - 1)
    [col] = [last.column(i) for i in range(last.num_columns) if last.column(i).path_in_schema == "value"]
    data = bytearray(pconn.store.get(data_key))
    data[col.data_page_offset:col.data_page_offset + 64] = bytes(64)  # its first page header
    pconn.store.put(data_key, bytes(data))
    with Connection(pconn.config) as fresh, Reader(fresh) as r:
        assert [x.offset for x in r.scan("groups", 0, 0, first_end)] == list(range(first_end))
        seen: list[int] = []
        with pytest.raises(CorruptBlob) as err:
            seen.extend(x.offset for x in r.scan("groups", 0, 0))
        assert err.value.key == data_key
        assert seen == list(range(len(seen))) and len(seen) >= last_start


def test_a_file_of_one_row_group_over_the_grouped_size_reads_whole_and_from_inside(pconn: Connection) -> None:
    import os

    from llog.scan.iteration import GROUPED_MIN_BYTES

    # One row group (well under the ~4 MiB target) but past GROUPED_MIN_BYTES: the
    # reader reads its footer first, then decodes the file with that footer.
    Topics(pconn).create("onegroup", 1, compacted_format="parquet")
    recs = [Record(os.urandom(100), None if i % 3 else f"k{i}".encode(), T0 + i) for i in range(2_000)]
    _write(pconn, "onegroup", 0, recs, groups=4)
    assert compact_once(pconn, "onegroup", 0).outcome == "compacted"
    data_key, _ = _first_compacted(pconn, "onegroup", 0)
    body = pconn.store.get(data_key)
    assert len(body) >= GROUPED_MIN_BYTES
    assert pq.ParquetFile(pa.BufferReader(body)).metadata.num_row_groups == 1
    want = _want(recs)
    with Reader(pconn) as r:
        for start, end in ((0, None), (1_500, None), (7, 1_200)):
            got = [(x.offset, x.timestamp, x.key, x.value, x.headers) for x in r.scan("onegroup", 0, start, end)]
            assert got == want[start:end], (start, end)
