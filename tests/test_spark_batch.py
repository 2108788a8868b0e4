"""Spark batch reads and writes of the ``llog`` format against the real etcd + S3
servers, in the suite's one ``local[2]`` SparkSession (the ``spark`` fixture).

The data: 3 topics x 8 partitions, 6 appends of 5 records per partition (one shared
blob per round). Then on every partition of topic ``a`` the compactor rewrites the
first three entries ([0, 14]) into one COMPACTED entry, and the last append of every
partition stays *pending* (the writer is kept open and readers do not settle), so
reads cross compacted entries, WAL entries and the pending tail.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.functions import spark_partition_id

from compactor.compact import compact_once
from llog.codec.etcd_values.partition import COMPACTED, IndexEntry
from llog.config import LlogConfig
from llog.connection import Connection
from llog.reader import Reader
from llog.records import AppendGroup, Record
from llog.state.control import read_control
from llog.topic.admin import Topics
from llog.writer import Writer

BUCKET = "llog-test"  # created by the servers fixture in conftest.py
TOPICS = ("a", "b", "c")
PARTITIONS = 8
ROUNDS = 6
PER_ROUND = 5
BASE_TS = 1_700_000_000_000

Row = tuple[str, int, int, bytes]


@pytest.fixture(scope="module")
def cfg(servers: Any) -> LlogConfig:
    return LlogConfig(
        etcd_endpoints=(servers.etcd_endpoint,),
        object_store=f"s3://{BUCKET}",
        s3_endpoint_url=servers.s3_endpoint,
        root_prefix=f"t-{uuid.uuid4().hex[:12]}",
    )


def spark_options(cfg: LlogConfig) -> dict[str, str]:
    return {
        "etcdEndpoints": ",".join(cfg.etcd_endpoints),
        "objectStore": cfg.object_store,
        "s3EndpointUrl": cfg.s3_endpoint_url or "",
        "rootPrefix": cfg.root_prefix,
    }


def value_of(topic: str, p: int, offset: int) -> bytes:
    return f"{topic}/{p}/{offset}".encode()


@pytest.fixture(scope="module")
def written(cfg: LlogConfig) -> Iterator[set[Row]]:
    """Write the data set; yield every (topic, partition, offset, value)."""
    with Connection(cfg) as conn:
        for t in TOPICS:
            Topics(conn).create(t, PARTITIONS)
        writer = Writer(conn)
        try:
            expected: set[Row] = set()
            for r in range(ROUNDS):
                groups = []
                for t in TOPICS:
                    for p in range(PARTITIONS):
                        first = r * PER_ROUND
                        recs = [
                            Record(
                                value_of(t, p, first + i),
                                key=f"k{p}".encode() if i % 2 else None,
                                timestamp=BASE_TS + r * 1000 + i,
                                headers=(("round", str(r).encode()),) if i == 0 else (),
                            )
                            for i in range(PER_ROUND)
                        ]
                        groups.append(AppendGroup(t, p, recs))
                        expected.update(
                            (t, p, first + i, value_of(t, p, first + i)) for i in range(PER_ROUND)
                        )
                outs = writer.append_shared(groups)
                assert all(o.ok for o in outs)
            # Compact [0, 14] of every partition of "a"; keep the pending tails.
            compact_cfg = replace(
                cfg, compact_min_age_ms=0, compact_max_records=15, settle_after_ms=3_600_000
            )
            with Connection(compact_cfg) as cconn:
                for p in range(PARTITIONS):
                    assert compact_once(cconn, "a", p).outcome == "compacted"
            yield expected
        finally:
            writer.close()


def index_entries(conn: Connection, topic: str, p: int) -> list[tuple[int, IndexEntry]]:
    keys = conn.keys
    return [
        (keys.end_offset_of(kv.key), IndexEntry.decode(kv.value))
        for kv in conn.etcd.scan(keys.index_prefix(topic, p), keys.index_range_end(topic, p))
    ]


def load(spark: SparkSession, cfg: LlogConfig, **options: str) -> Any:
    return spark.read.format("llog").options(**spark_options(cfg)).options(**options).load()


def rows(df: Any) -> list[Row]:
    return [
        (r.topic, r.partition, r.offset, bytes(r.value))
        for r in df.select("topic", "partition", "offset", "value").collect()
    ]


def test_layout_has_compacted_wal_and_pending_entries(cfg: LlogConfig, written: set[Row]) -> None:
    with Connection(cfg) as conn:
        entries = index_entries(conn, "a", 0)
        assert [(end, e.kind, e.msg_count) for end, e in entries] == [
            (14, COMPACTED, 15),
            (19, "WAL", 5),
            (24, "WAL", 5),
        ]
        pending = read_control(conn, "a", 0).control.pending
        assert pending is not None and (pending.start_offset, pending.end_offset) == (25, 29)


def test_batch_read_returns_exactly_the_written_records(
    spark: SparkSession, cfg: LlogConfig, written: set[Row]
) -> None:
    df = load(spark, cfg, topics="a,b,c")
    got = rows(df)
    assert len(got) == len(written) == len(TOPICS) * PARTITIONS * ROUNDS * PER_ROUND
    assert set(got) == written
    # Small ranges share input partitions (minRecordsPerPartition, default 65,536): these
    # 720 records are one task; minRecordsPerPartition=1 reads each topic-partition alone.
    assert df.rdd.getNumPartitions() == 1
    alone = load(spark, cfg, topics="a,b,c", minRecordsPerPartition="1")
    assert alone.rdd.getNumPartitions() == len(TOPICS) * PARTITIONS
    assert set(rows(alone)) == written


def test_small_partitions_are_packed_whole_and_in_order(
    spark: SparkSession, cfg: LlogConfig, written: set[Row]
) -> None:
    # 30 records per topic-partition: two fit in 70, so 24 ranges make 12 tasks.
    df = load(spark, cfg, topics="a,b,c", minRecordsPerPartition="70")
    assert df.rdd.getNumPartitions() == len(TOPICS) * PARTITIONS // 2
    per_task = (
        df.select(spark_partition_id().alias("sp"), "topic", "partition", "offset").collect()
    )
    tasks: dict[int, list[tuple[str, int, int]]] = {}
    for r in per_task:
        tasks.setdefault(r.sp, []).append((r.topic, r.partition, r.offset))
    tps = sorted((t, p) for t in TOPICS for p in range(PARTITIONS))
    for sp, got in tasks.items():
        # Task sp reads topic-partitions 2sp and 2sp+1, each whole and in offset order.
        want = [(t, p, o) for t, p in tps[2 * sp : 2 * sp + 2] for o in range(ROUNDS * PER_ROUND)]
        assert got == want
    assert set(rows(df)) == written


def test_all_columns_match_the_sdk_reader(spark: SparkSession, cfg: LlogConfig, written: set[Row]) -> None:
    got = (
        load(spark, cfg, topic="a")
        .where("partition = 3")
        .orderBy("offset")
        .selectExpr("*", "unix_millis(timestamp) AS ts_ms")
        .collect()
    )
    with Connection(cfg) as conn, Reader(conn, settle_pending=False) as reader:
        want = list(reader.scan("a", 3))
    assert len(got) == len(want) == ROUNDS * PER_ROUND
    for row, rec in zip(got, want, strict=True):
        assert (row.topic, row.partition, row.offset) == ("a", 3, rec.offset)
        assert bytes(row.value) == rec.value
        assert (bytes(row.key) if row.key is not None else None) == rec.key
        assert row.ts_ms == rec.timestamp
        assert [(h.key, bytes(h.value)) for h in row.headers] == list(rec.headers)
        assert row.timestampType == 0


def test_start_and_end_offsets_cross_compacted_wal_and_pending(
    spark: SparkSession, cfg: LlogConfig, written: set[Row]
) -> None:
    starting = '{"a": {"0": 3, "1": 17, "2": -1}, "b": {"0": -2, "5": 29}}'
    ending = '{"a": {"0": 27, "1": -1, "2": -1}, "b": {"0": 12}}'
    got = rows(load(spark, cfg, topics="a,b", startingOffsets=starting, endingOffsets=ending))
    bounds = {
        ("a", 0): (3, 27),
        ("a", 1): (17, 30),
        ("a", 2): (30, 30),
        ("b", 0): (0, 12),
        ("b", 5): (29, 30),
    }

    def wanted(t: str, p: int, off: int) -> bool:
        lo, hi = bounds.get((t, p), (0, ROUNDS * PER_ROUND))
        return lo <= off < hi

    expected = {r for r in written if r[0] in ("a", "b") and wanted(*r[:3])}
    assert sorted(got) == sorted(expected)


def test_big_partitions_split_at_index_entries(
    spark: SparkSession, cfg: LlogConfig, written: set[Row]
) -> None:
    df = load(spark, cfg, topic="a", maxRecordsPerPartition="10")
    # Per partition: [0, 10) inside the compacted entry (15 records > 10), then
    # [10, 20) ending at a WAL entry boundary, then [20, 30) with the pending tail.
    assert df.rdd.getNumPartitions() == 3 * PARTITIONS
    spans = (
        df.groupBy(spark_partition_id().alias("sp"), "partition")
        .agg({"offset": "min", "*": "count"})
        .collect()
    )
    assert sorted((r["partition"], r["min(offset)"], r["count(1)"]) for r in spans) == sorted(
        (p, lo, 10) for p in range(PARTITIONS) for lo in (0, 10, 20)
    )
    assert set(rows(df)) == {r for r in written if r[0] == "a"}


def test_min_partitions_spreads_a_small_read(spark: SparkSession, cfg: LlogConfig, written: set[Row]) -> None:
    df = load(spark, cfg, topic="b", minPartitions="40")
    assert df.rdd.getNumPartitions() >= 40
    assert set(rows(df)) == {r for r in written if r[0] == "b"}


def test_starting_timestamp(spark: SparkSession, cfg: LlogConfig, written: set[Row]) -> None:
    # Round 3's first record has timestamp BASE_TS + 3000 and offset 15.
    got = rows(load(spark, cfg, topic="c", startingTimestamp=str(BASE_TS + 3000)))
    assert set(got) == {r for r in written if r[0] == "c" and r[2] >= 15}


def test_topic_pattern(spark: SparkSession, cfg: LlogConfig, written: set[Row]) -> None:
    got = rows(load(spark, cfg, topicPattern="[ab]"))
    assert set(got) == {r for r in written if r[0] in ("a", "b")}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"topic": "nope"}, "unknown topic 'nope'"),
        ({"topic": "a", "colour": "blue"}, "unknown llog option 'colour'"),
        ({"topic": "a", "startingOffsets": '{"a": {"0": 99}}'}, "is past its next offset"),
        ({"topic": "a", "startingOffsets": '{"z": {"0": 1}}'}, "not subscribed"),
        ({}, "give exactly one of the options"),
    ],
)
def test_bad_options_fail_with_a_clear_error(
    spark: SparkSession, cfg: LlogConfig, written: set[Row], options: dict[str, str], message: str
) -> None:
    with pytest.raises(Exception, match=message):
        load(spark, cfg, **options).collect()


def test_write_then_read_round_trip(spark: SparkSession, cfg: LlogConfig, written: set[Row]) -> None:
    with Connection(cfg) as conn:
        Topics(conn).create("rt", 4)
    ts = datetime(2024, 5, 1, 12, 0, 0, 123000)
    data = [
        # explicit partition
        (b"k1", b"v-explicit", 2, [("h1", b"x"), ("h2", b"")], ts),
        # keyed, no partition: the key's partition
        (b"k-keyed", b"v-keyed", None, [], ts),
        # neither key nor partition
        (None, b"v-free", None, None, None),
    ] + [
        (f"bulk{i}".encode(), f"bulk-{i}".encode(), i % 4, [("n", str(i).encode())], ts + timedelta(milliseconds=i))
        for i in range(200)
    ]
    schema = (
        "key binary, value binary, partition int, "
        "headers array<struct<key: string, value: binary>>, timestamp timestamp"
    )
    df = spark.createDataFrame(data, schema)
    df.write.format("llog").options(**spark_options(cfg)).option("topic", "rt").mode("append").save()

    back = load(spark, cfg, topic="rt").collect()
    assert len(back) == len(data)
    got = {
        (
            bytes(r.key) if r.key is not None else None,
            bytes(r.value),
            tuple((h.key, bytes(h.value)) for h in r.headers),
            r.timestamp if r.value != b"v-free" else None,
        )
        for r in back
    }
    want = {(k, v, tuple(h or ()), t) for k, v, _, h, t in data}
    assert got == want
    by_value = {bytes(r.value): r for r in back}
    assert by_value[b"v-explicit"].partition == 2
    assert by_value[b"v-explicit"].timestamp == ts
    from llog.partitioner import partition_for_key  # written alongside (issue 4)

    assert by_value[b"v-keyed"].partition == partition_for_key(b"k-keyed", 4)
    assert all(by_value[f"bulk-{i}".encode()].partition == i % 4 for i in range(200))
    # No timestamp given: the append time.
    assert by_value[b"v-free"].timestamp.year >= 2025


def test_a_read_dataframe_writes_back_and_topic_column_routes(
    spark: SparkSession, cfg: LlogConfig, written: set[Row]
) -> None:
    with Connection(cfg) as conn:
        Topics(conn).create("copy-a", PARTITIONS)
        Topics(conn).create("copy-b", 2)
    src = load(spark, cfg, topics="a").where("partition = 1")
    # The read schema as is (offset/timestampType ignored), topic taken from the option.
    src.drop("topic").write.format("llog").options(**spark_options(cfg)).option("topic", "copy-a").mode(
        "append"
    ).save()
    copied = load(spark, cfg, topic="copy-a").orderBy("offset").collect()
    original = src.orderBy("offset").collect()
    assert [(r.partition, bytes(r.value), r.timestamp) for r in copied] == [
        (r.partition, bytes(r.value), r.timestamp) for r in original
    ]
    # A topic column overrides the default.
    routed = spark.createDataFrame(
        [("copy-b", b"x", 0), ("copy-b", b"y", 1)], "topic string, value binary, partition int"
    )
    routed.write.format("llog").options(**spark_options(cfg)).option("topic", "copy-a").mode("append").save()
    assert sorted(bytes(r.value) for r in load(spark, cfg, topic="copy-b").collect()) == [b"x", b"y"]


@pytest.mark.parametrize(
    ("ddl", "message"),
    [
        ("key binary", "needs a 'value' column"),
        ("value binary, colour string", "unknown columns"),
        ("value int", "must be binary or string"),
    ],
)
def test_bad_write_schema_fails_clearly(spark: SparkSession, cfg: LlogConfig, ddl: str, message: str) -> None:
    df = spark.createDataFrame([], ddl)
    with pytest.raises(Exception, match=message):
        df.write.format("llog").options(**spark_options(cfg)).option("topic", "rt").mode("append").save()
