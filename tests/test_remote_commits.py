"""Another broker's appends read into the tail cache as the watch announces them
(llog/broker/remote_commits.py), against the real etcd and S3 servers; GETs are counted
on the nemesis proxy in front of the S3 server."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import replace
from typing import Any

import llog
from llog.broker.fetch import PartitionRead, read_partitions
from llog.broker.remote_commits import RemoteCommits
from llog.broker.state import Broker
from llog.broker.tailcache import TailCache
from llog.broker.wakeup import TailView
from llog.codec import kafka_body
from llog.codec.bodies import KafkaBody
from llog.codec.etcd_values.partition import Pending
from llog.config import LlogConfig
from llog.errors import LlogError, OffsetOutOfRange
from llog.names import TopicPartition
from llog.records import AppendGroup, ConsumedRecord
from llog.state.control import read_control
from tests.broker_harness import broker_process
from tests.conftest import ProxiedS3, wait_until

PARTS = 8


class _Announced:
    """What ``announce`` was called with, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[TopicPartition, int]] = []
        self._lock = threading.Lock()

    def __call__(self, tp: TopicPartition, next_offset: int) -> None:
        with self._lock:
            self.calls.append((tp, next_offset))


def _pendings(conn: llog.Connection, topic: str) -> list[Pending]:
    """One flush of 3 records per partition; each partition's pending."""
    llog.Topics(conn).create(topic, PARTS)
    with llog.Writer(conn) as w:
        outs = w.append_shared([AppendGroup(topic, p, [b"v%d-%d" % (p, i) for i in range(3)]) for p in range(PARTS)])
        assert all(o.ok for o in outs)
        pendings = [read_control(conn, topic, p).control.pending for p in range(PARTS)]  # a closing writer settles
    assert all(p is not None for p in pendings)
    return [p for p in pendings if p is not None]


def _values(got: list[ConsumedRecord] | None) -> list[tuple[int, bytes]]:
    assert got is not None
    return [(r.offset, r.value) for r in got]


def _remote(conn: llog.Connection, cache: TailCache, announced: _Announced) -> RemoteCommits:
    return RemoteCommits(conn.blob_cache, cache, conn.metrics, workers=4, announce=announced)


def _outcome(conn: llog.Connection, outcome: str) -> float:
    return conn.metrics.value("llog_tail_remote_appends_total", outcome=outcome)


def test_one_flushs_appends_are_read_with_one_get_then_announced(s3_proxy: ProxiedS3) -> None:
    with llog.Connection(s3_proxy.config) as conn:
        pendings = _pendings(conn, "flush")
        assert len({p.data_key for p in pendings}) == 1  # one shared blob
        cache, announced = TailCache(1 << 20), _Announced()
        before = s3_proxy.proxy.requests().get("GET", 0)
        remote = _remote(conn, cache, announced)
        try:
            assert all(remote.add(("flush", p), pend) for p, pend in enumerate(pendings))
            wait_until(lambda: len(announced.calls) == PARTS, 30, "every append announced")
        finally:
            remote.close()
        assert sorted(announced.calls) == [(("flush", p), 3) for p in range(PARTS)]
        assert s3_proxy.proxy.requests().get("GET", 0) - before == 1
        for p in range(PARTS):
            assert _values(cache.get("flush", p, 0, 1 << 20)) == [(i, b"v%d-%d" % (p, i)) for i in range(3)]
        assert _outcome(conn, "cached") == PARTS


def test_a_later_append_read_first_waits_for_the_earlier_one_before_it_is_announced(s3_proxy: ProxiedS3) -> None:
    """Two appends to one partition in two blobs, the first blob's read held until the
    second append is in the tail cache: nothing is announced before the first append
    is cached too, and then the end of both at once, so a consumer woken never finds
    offsets 0-2 missing (and reads storage for them)."""
    tp = ("order", 0)
    with llog.Connection(s3_proxy.config) as conn:
        llog.Topics(conn).create("order", 1)
        pendings = []
        with llog.Writer(conn) as w:
            for batch in range(2):
                assert w.append("order", 0, [b"b%d-%d" % (batch, i) for i in range(3)]).ok
                pending = read_control(conn, "order", 0).control.pending
                assert pending is not None
                pendings.append(pending)
        second_cached = threading.Event()

        class Cache(TailCache):
            def put_stored(self, topic: str, partition: int, start: int, body: Any) -> None:
                super().put_stored(topic, partition, start, body)
                if start == 3:
                    second_cached.set()

        class HeldFirst:  # the blob cache, but the first blob's read waits for the second append
            def __getattr__(self, name: str) -> Any:
                return getattr(conn.blob_cache, name)

            def read(self, key: str, offset: int, length: int) -> bytes:
                if key == pendings[0].data_key:
                    assert second_cached.wait(30)
                return conn.blob_cache.read(key, offset, length)

        cache = Cache(1 << 20)
        seen: list[tuple[int, list[int]]] = []  # each announcement, and the offsets cached then

        def announce(t: TopicPartition, next_offset: int) -> None:
            seen.append((next_offset, [r.offset for r in cache.get("order", 0, 0, 1 << 20) or []]))

        remote = RemoteCommits(HeldFirst(), cache, conn.metrics, workers=4, announce=announce)  # type: ignore[arg-type]
        try:
            assert remote.add(tp, pendings[0]) and remote.add(tp, pendings[1])
            wait_until(lambda: seen, 30, "the appends announced")
        finally:
            remote.close()
    assert seen == [(6, [0, 1, 2, 3, 4, 5])]


def test_a_damaged_or_missing_body_is_announced_and_not_cached(s3_proxy: ProxiedS3) -> None:
    with llog.Connection(s3_proxy.config) as conn:
        [good, *_] = _pendings(conn, "bad")
        damaged_key = good.data_key + "-damaged"
        data = bytearray(conn.store.get(good.data_key))
        data[good.byte_offset + good.byte_length - 1] ^= 0xFF  # inside partition 0's slice: its CRC fails
        conn.store.put(damaged_key, bytes(data))
        cache, announced = TailCache(1 << 20), _Announced()
        remote = _remote(conn, cache, announced)
        try:
            assert remote.add(("bad", 0), replace(good, data_key=damaged_key))
            assert remote.add(("bad", 1), replace(good, data_key=good.data_key + "-gone"))
            # A count the body does not hold: the pending is not that body's.
            assert remote.add(("bad", 2), replace(good, msg_count=4, end_offset=3))
            wait_until(lambda: len(announced.calls) == 3, 30, "the three announcements")
        finally:
            remote.close()
        assert sorted(announced.calls) == [(("bad", 0), 3), (("bad", 1), 3), (("bad", 2), 4)]
        assert all(cache.get("bad", p, 0, 100) is None for p in range(3))
        assert conn.blob_cache.peek(damaged_key, 0, 16) is None  # its chunks dropped: a read goes to storage
        assert _outcome(conn, "failed") == 3
        # Nothing damaged was kept anywhere: a scan of the good blob is whole.
        with llog.Reader(conn) as r:
            assert [x.value for x in r.scan("bad", 0, 0)] == [b"v0-%d" % i for i in range(3)]


def test_appends_too_large_for_the_blob_cache_are_left_to_the_caller(s3_proxy: ProxiedS3) -> None:
    cfg = replace(s3_proxy.config, read_cache_chunk_bytes=16)
    with llog.Connection(cfg) as conn:
        [pend, *_] = _pendings(conn, "large")
        cache, announced = TailCache(1 << 20), _Announced()
        remote = _remote(conn, cache, announced)
        try:
            assert not remote.add(("large", 0), pend)
        finally:
            remote.close()
        assert not remote.add(("large", 0), pend)  # closed
        assert announced.calls == [] and _outcome(conn, "skipped") == 2


def test_the_tail_cache_keeps_stored_kafka_batches_as_they_are() -> None:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i in range(3):
        builder.append(i, timestamp=1000 + i, key=None, value=b"k%d" % i, headers=[])
    raw = bytes(builder.build())
    body = kafka_body.encode_body(kafka_body.check_batches(raw)).tobytes()
    cache = TailCache(1 << 20)
    cache.put_stored("k", 0, 10, KafkaBody(body))
    run = cache.get_batches("k", 0, 10, 1 << 20)
    assert run is not None and run.count == 3
    assert _values(cache.get("k", 0, 11, 100)) == [(11, b"k1"), (12, b"k2")]


def test_a_fetch_past_the_end_a_broker_knows_is_checked_against_etcd(config: LlogConfig, conn: llog.Connection) -> None:
    """While another broker's append is being read, this broker's known end trails
    etcd's; a Kafka fetch (past the end is an error there) at the true end must not be
    told it is out of range, so the broker checks etcd before it says so."""
    llog.Topics(conn).create("late", 1)
    loop = asyncio.new_event_loop()
    b = Broker(config, host="127.0.0.1", port=0)
    try:
        b.start(loop)
        assert b.tails is not None
        announced = threading.Event()
        b.tails._on_remote_commit = lambda _tp, _p: announced.set() or True  # a read that never ends

        def fetch(offset: int) -> PartitionRead | LlogError:
            [got], _ = read_partitions(b, [("late", 0, offset, 1 << 20)], 1 << 20, io=True, past_end_is_error=True)
            return got

        first = fetch(0)
        assert isinstance(first, PartitionRead) and first.high_watermark == 0  # watched from here on
        with llog.Writer(conn) as w:  # another broker (a closing writer settles: keep it open)
            w.append("late", 0, [b"a", b"b"])
            assert announced.wait(30)
            assert b.tails.known(("late", 0)) == TailView(0, 0, 0)  # the append is "being read"
            at_end = fetch(2)
            assert isinstance(at_end, PartitionRead) and (at_end.high_watermark, at_end.records) == (2, [])
            assert isinstance(fetch(3), OffsetOutOfRange)
    finally:
        b.close()
        loop.close()


def test_a_consumer_on_another_broker_gets_the_records_whole_from_memory(config: LlogConfig) -> None:
    """Records produced on A with keys, headers and binary values, tailed on B: B
    serves them from its tail cache (no lookup misses) exactly as A and the SDK serve
    them, offsets and timestamps included."""
    with llog.Connection(config) as conn:
        llog.Topics(conn).create("whole", 2)
    records = [
        {"value": "v0", "key": "k0", "headers": [["h", "x"], ["bin", {"base64": "AP8="}]]},
        {"value": {"base64": "/w=="}},
        {"value": "v2", "key": None, "headers": []},
    ]
    with broker_process(config) as a, broker_process(config) as b:
        got: dict[int, list[Any]] = {0: [], 1: []}

        def tail(p: int) -> None:
            offset = 0
            while offset < 3 * len(records):
                status, resp = b.post("/consume", {"topic_partitions": [
                    {"topic": "whole", "partition": p, "fetch_offset": offset}], "max_wait_ms": 10_000})
                assert status == 200
                part = resp["topic_partitions"][0]
                got[p] += part["records"]
                offset = part["next_offset"]

        for p in (0, 1):  # watched on B before anything is produced
            assert b.post("/consume", {"topic_partitions": [
                {"topic": "whole", "partition": p, "fetch_offset": 0}], "max_wait_ms": 0})[0] == 200
        tails = [threading.Thread(target=tail, args=(p,)) for p in (0, 1)]
        for t in tails:
            t.start()
        for _ in range(3):
            status, _ = a.post("/produce", {"topic_partitions": [
                {"topic": "whole", "partition": p, "records": records} for p in (0, 1)]})
            assert status == 200
        for t in tails:
            t.join(60)
        for p in (0, 1):
            status, from_a = a.post("/consume", {"topic_partitions": [
                {"topic": "whole", "partition": p, "fetch_offset": 0}], "max_wait_ms": 0})
            assert status == 200 and got[p] == from_a["topic_partitions"][0]["records"]
            assert [r["offset"] for r in got[p]] == list(range(9))
        assert b.metric("llog_tail_cache_lookups_total", result="miss") == 0  # every read from memory
        assert b.metric("llog_tail_remote_appends_total", outcome="cached") == 6
    with llog.Connection(config) as conn, llog.Reader(conn) as r:
        stored = [(x.offset, x.timestamp, x.key, x.value, list(x.headers)) for x in r.scan("whole", 0, 0)]
    assert [r["timestamp"] for r in got[0]] == [s[1] for s in stored]
