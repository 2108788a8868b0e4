"""Pure unit tests of the Spark source's option parsing, planning arithmetic, Arrow
conversion and sink schema checks (no SparkSession, no servers)."""

from __future__ import annotations

from itertools import pairwise

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from llog.codec import batch
from llog.errors import ConfigError
from llog.records import Record
from llog.spark.options import (
    EARLIEST,
    LATEST,
    OffsetSpec,
    config_from_dict,
    config_to_dict,
    parse_sink_options,
    parse_source_options,
)
from llog.spark.planning import (
    OffsetRange,
    cut,
    offsets_from_json,
    offsets_to_json,
    pack,
    pack_size,
    rate_limit,
    split,
    split_size,
)
from llog.spark.schema import ARROW_SCHEMA, SPARK_SCHEMA, coalesce, record_batch
from llog.spark.sink import LlogCommitMessage, SinkColumns, summarize


@pytest.fixture(autouse=True)
def no_llog_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for k in list(os.environ):
        if k.startswith("LLOG_"):
            monkeypatch.delenv(k)


# -- source options ----------------------------------------------------------------------
def test_defaults_follow_the_kafka_source() -> None:
    b = parse_source_options({"topic": "orders"}, streaming=False)
    assert b.subscription.topics == ("orders",)
    assert b.starting == OffsetSpec(EARLIEST) and b.ending == OffsetSpec(LATEST)
    assert b.fail_on_data_loss is True
    s = parse_source_options({"subscribe": "a, b,a"}, streaming=True)
    assert s.subscription.topics == ("a", "b")
    assert s.starting == OffsetSpec(LATEST)


def test_offsets_json_and_symbols() -> None:
    o = parse_source_options(
        {
            "topics": "orders,x",
            "startingoffsets": '{"orders": {"0": 23, "1": -2}}',
            "endingOffsets": "latest",
        },
        streaming=False,
    )
    assert o.starting.resolve("orders", 0) == ("offset", 23)
    assert o.starting.resolve("orders", 1) == ("offset", EARLIEST)
    assert o.starting.resolve("orders", 2) == ("offset", EARLIEST)
    assert o.starting.resolve("x", 0) == ("offset", EARLIEST)
    assert o.ending.resolve("orders", 0) == ("offset", LATEST)


def test_timestamp_options_take_precedence() -> None:
    o = parse_source_options(
        {
            "topic": "t",
            "startingOffsets": '{"t": {"0": 5}}',
            "startingOffsetsByTimestamp": '{"t": {"1": 1000}}',
        },
        streaming=False,
    )
    assert o.starting.resolve("t", 0) == ("offset", 5)
    assert o.starting.resolve("t", 1) == ("timestamp", 1000)
    g = parse_source_options({"topic": "t", "startingTimestamp": "777"}, streaming=True)
    assert g.starting.resolve("t", 0) == ("timestamp", 777)


def test_pattern_subscription() -> None:
    o = parse_source_options({"topicPattern": "orders-.*"}, streaming=True)
    assert o.subscription.matches("orders-eu") and not o.subscription.matches("xorders-eu")


def test_connection_options_map_onto_the_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLOG_ROOT_PREFIX", "from-env")
    monkeypatch.setenv("LLOG_READ_PREFETCH", "5")
    o = parse_source_options(
        {
            "topic": "t",
            "etcdendpoints": "h1:1,h2:2",
            "object_store": "s3://bkt/pre",
            "s3EndpointUrl": "http://127.0.0.1:9000",
            "rootprefix": "from-option",
        },
        streaming=False,
    )
    c = o.config
    assert c.etcd_endpoints == ("h1:1", "h2:2")
    assert c.object_store == "s3://bkt/pre"
    assert c.s3_endpoint_url == "http://127.0.0.1:9000"
    assert c.root_prefix == "from-option"  # the option wins over the environment
    assert c.read_prefetch == 5  # the environment fills the rest
    assert config_from_dict(config_to_dict(c)) == c


@pytest.mark.parametrize(
    ("options", "streaming", "message"),
    [
        ({}, False, "exactly one of"),
        ({"topic": "a", "topics": "b"}, False, "exactly one of"),
        ({"topic": "bad name"}, False, "invalid topic name"),
        ({"topicPattern": "("}, True, "not a regular expression"),
        ({"topic": "a", "startingOffsets": "soonest"}, False, "not 'earliest', 'latest' or JSON"),
        ({"topic": "a", "startingOffsets": "[1]"}, False, "JSON object of topics"),
        ({"topic": "a", "startingOffsets": '{"a": {"x": 1}}'}, False, "invalid partition"),
        ({"topic": "a", "startingOffsets": '{"a": {"0": -3}}'}, False, "must be an int >= -2"),
        ({"topic": "a", "startingOffsets": '{"a": {"0": 1.5}}'}, False, "must be an int >= -2"),
        ({"topic": "a", "startingOffsets": '{"b": {"0": 1}}'}, False, "not subscribed"),
        ({"topic": "a", "endingOffsets": "earliest"}, False, "cannot be 'earliest'"),
        ({"topic": "a", "endingOffsets": '{"a": {"0": -2}}'}, False, "cannot be 'earliest'"),
        ({"topic": "a", "endingOffsets": "latest"}, True, "batch reads only"),
        ({"topic": "a", "maxOffsetsPerTrigger": "10"}, False, "streams only"),
        ({"topic": "a", "maxOffsetsPerTrigger": "0"}, True, "must be >= 1"),
        ({"topic": "a", "minPartitions": "many"}, False, "must be an int"),
        ({"topic": "a", "failOnDataLoss": "maybe"}, False, "true or false"),
        ({"topic": "a", "startingTimestamp": "-5"}, False, "must be >= 0"),
        ({"topic": "a", "etcdEndpoint": "h:1"}, False, "unknown llog option 'etcdEndpoint'"),
        ({"topic": "a", "readPrefetch": "0"}, False, "read_prefetch must be > 0"),
    ],
)
def test_bad_options_raise_config_errors(options: dict[str, str], streaming: bool, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_source_options(options, streaming=streaming)


def test_sink_options() -> None:
    s = parse_sink_options({"topic": "out", "rootPrefix": "r", "path": "ignored"})
    assert s.topic == "out" and s.config.root_prefix == "r"
    assert parse_sink_options({}).topic is None
    with pytest.raises(ConfigError, match="unknown llog option"):
        parse_sink_options({"topic": "out", "startingOffsets": "earliest"})


# -- splitting -----------------------------------------------------------------------------
def test_cut_prefers_index_boundaries() -> None:
    r = OffsetRange("t", 0, 0, 30)
    # Entries end at 14, 19, 24 (boundaries 15, 20, 25); the pending tail is [25, 30).
    assert [(x.start, x.end) for x in cut(r, 10, [15, 20, 25])] == [(0, 10), (10, 20), (20, 30)]
    assert [(x.start, x.end) for x in cut(r, 16, [15, 20, 25])] == [(0, 15), (15, 30)]
    assert [(x.start, x.end) for x in cut(r, 30, [15, 20, 25])] == [(0, 30)]


@given(
    start=st.integers(0, 1000),
    length=st.integers(1, 500),
    size=st.integers(1, 100),
    gaps=st.lists(st.integers(1, 60), max_size=40),
)
def test_cut_covers_the_range_in_bounded_aligned_pieces(
    start: int, length: int, size: int, gaps: list[int]
) -> None:
    end = start + length
    bounds, pos = [], start
    for g in gaps:
        pos += g
        if pos >= end:
            break
        bounds.append(pos)
    pieces = cut(OffsetRange("t", 1, start, end), size, bounds)
    assert pieces[0].start == start and pieces[-1].end == end
    assert all(a.end == b.start for a, b in pairwise(pieces))
    assert all(0 < p.count <= size for p in pieces)
    for p in pieces[:-1]:
        inside = [b for b in bounds if p.start < b <= p.start + size]
        # A piece ends at the last boundary that fits, or fills the size when none does.
        assert p.end == (max(inside) if inside else p.start + size)


def test_split_size_and_min_partitions() -> None:
    ranges = [OffsetRange("t", 0, 0, 100), OffsetRange("t", 1, 0, 20), OffsetRange("t", 2, 5, 5)]
    assert split_size(ranges, min_partitions=None, max_records=None) is None
    assert split_size(ranges, min_partitions=2, max_records=None) is None  # already 2 non-empty
    assert split_size(ranges, min_partitions=6, max_records=None) == 20
    assert split_size(ranges, min_partitions=6, max_records=7) == 7
    out = split(ranges, lambda r: [], min_partitions=6, max_records=None)
    assert len(out) >= 6
    assert sum(r.count for r in out) == 120
    assert all(r.count > 0 for r in out)


@given(
    counts=st.lists(st.integers(1, 50), min_size=1, max_size=30),
    size=st.integers(0, 120),
)
def test_pack_groups_consecutive_ranges_up_to_the_size(counts: list[int], size: int) -> None:
    ranges = [OffsetRange("t", p, 0, n) for p, n in enumerate(counts)]
    groups = pack(ranges, size)
    assert [r for g in groups for r in g] == ranges  # every range once, in order
    for g in groups:
        # A group holds at most `size` records, unless it is one range bigger than that.
        assert len(g) == 1 or sum(r.count for r in g) <= size
    for a, b in pairwise(groups):
        # Greedy: the next group's first range did not fit into this one.
        assert sum(r.count for r in a) + b[0].count > size


def test_pack_size_yields_to_min_partitions_and_max_records() -> None:
    ranges = [OffsetRange("t", p, 0, 30) for p in range(8)]  # 240 records
    assert pack_size(ranges, min_records=100, min_partitions=None, max_records=None) == 100
    assert pack_size(ranges, min_records=100, min_partitions=None, max_records=40) == 40
    assert pack_size(ranges, min_records=100, min_partitions=6, max_records=None) == 40
    assert len(pack(ranges, 40)) == 8 >= 6
    assert len(pack(ranges, pack_size(ranges, min_records=1000, min_partitions=None, max_records=None))) == 1


def test_min_records_per_partition_option() -> None:
    assert parse_source_options({"topic": "a"}, streaming=False).min_records_per_partition == 65_536
    o = parse_source_options({"topic": "a", "minRecordsPerPartition": "1"}, streaming=False)
    assert o.min_records_per_partition == 1
    with pytest.raises(ConfigError, match="minRecordsPerPartition must be >= 1"):
        parse_source_options({"topic": "a", "minRecordsPerPartition": "0"}, streaming=False)


# -- streaming offsets ---------------------------------------------------------------------
def test_rate_limit_is_proportional_bounded_and_deterministic() -> None:
    start = {("t", 0): 0, ("t", 1): 100, ("t", 2): 50}
    latest = {("t", 0): 300, ("t", 1): 200, ("t", 2): 50, ("u", 0): 7}
    end = rate_limit(start, latest, 200)
    assert end == rate_limit(start, latest, 200)
    moved = {tp: end[tp] - start[tp] for tp in start}
    assert sum(moved.values()) == 200
    assert moved == {("t", 0): 150, ("t", 1): 50, ("t", 2): 0}
    assert end[("u", 0)] == 7  # a new partition is reported where it starts
    assert rate_limit(start, latest, 10_000) == latest
    # A budget smaller than the partition count still makes progress.
    tiny = rate_limit(start, latest, 1)
    assert sum(tiny[tp] - start[tp] for tp in start) == 1


def test_offsets_json_round_trip() -> None:
    offs = {("b", 10): 3, ("a", 2): 7, ("a", 0): 1}
    doc = offsets_to_json(offs)
    assert list(doc) == ["a", "b"] and list(doc["a"]) == ["0", "2"]
    assert offsets_from_json(doc) == offs
    with pytest.raises(ConfigError, match="malformed"):
        offsets_from_json({"a": {"zero": 1}})


# -- Arrow conversion ------------------------------------------------------------------------
def test_arrow_schema_is_what_spark_expects() -> None:
    assert to_arrow_schema(SPARK_SCHEMA, timezone="UTC").equals(ARROW_SCHEMA)


def test_record_batch_slices_a_body_into_kafka_rows() -> None:
    recs = [
        Record(b"v0", key=None, timestamp=1000),
        Record(b"v1", key=b"k1", timestamp=2000, headers=(("a", b"1"), ("b", b""))),
        Record(b"v2", key=b"k2", timestamp=3000),
        Record(b"", key=b"", timestamp=4000),
    ]
    body = batch.decode(batch.encode(recs))
    rb = record_batch("orders", 7, 40, body, 41, 44)
    assert rb.schema.equals(ARROW_SCHEMA)
    assert rb.to_pydict() == {
        "key": [b"k1", b"k2", b""],
        "value": [b"v1", b"v2", b""],
        "topic": ["orders"] * 3,
        "partition": [7] * 3,
        "offset": [41, 42, 43],
        "timestamp": [pa.scalar(t * 1000, pa.timestamp("us", tz="UTC")).as_py() for t in (2000, 3000, 4000)],
        "timestampType": [0] * 3,
        "headers": [[{"key": "a", "value": b"1"}, {"key": "b", "value": b""}], [], []],
    }
    no_extras = batch.decode(batch.encode([Record(b"x", timestamp=1)] * 3))
    plain = record_batch("t", 0, 0, no_extras, 0, 3)
    assert plain.column("key").null_count == 3 and plain.column("headers").to_pylist() == [[], [], []]


def test_coalesce_merges_small_batches_only() -> None:
    body = batch.decode(batch.encode([Record(str(i).encode(), timestamp=i) for i in range(100)]))
    small = [record_batch("t", 0, 0, body, i, i + 10) for i in range(0, 100, 10)]
    merged = list(coalesce(small, min_rows=25))
    assert [b.num_rows for b in merged] == [30, 30, 30, 10]
    assert [o for b in merged for o in b.column("offset").to_pylist()] == list(range(100))
    big = record_batch("t", 0, 0, body, 0, 100)
    assert list(coalesce([big], min_rows=25)) == [big]


# -- sink ------------------------------------------------------------------------------------
def test_sink_columns_accept_kafka_style_frames() -> None:
    hdr = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))
    cols = SinkColumns.from_schema(
        StructType(
            [
                StructField("value", StringType()),
                StructField("key", BinaryType()),
                StructField("partition", LongType()),
                StructField("timestamp", TimestampType()),
                StructField("headers", hdr),
                StructField("offset", LongType()),
                StructField("timestampType", IntegerType()),
            ]
        )
    )
    assert cols == SinkColumns(key=True, topic=False, partition=True, timestamp=True, headers=True)
    assert SinkColumns.from_schema(SPARK_SCHEMA).topic


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ([StructField("key", BinaryType())], "needs a 'value' column"),
        ([StructField("value", IntegerType())], "'value' must be binary or string"),
        ([StructField("value", BinaryType()), StructField("partition", StringType())], "'partition'"),
        ([StructField("value", BinaryType()), StructField("headers", ArrayType(StringType()))], "'headers'"),
        ([StructField("value", BinaryType()), StructField("extra", BinaryType())], "unknown columns"),
    ],
)
def test_sink_columns_reject_bad_frames(fields: list[StructField], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        SinkColumns.from_schema(StructType(fields))


def test_summarize_commit_messages() -> None:
    msgs = [
        LlogCommitMessage(3, 1, (("t", 0, 2), ("t", 1, 1))),
        None,
        LlogCommitMessage(4, 2, (("t", 0, 4),)),
    ]
    assert summarize(msgs) == (7, 3, {("t", 0): 6, ("t", 1): 1})
