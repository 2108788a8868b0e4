"""The readers' WAL blob cache (llog/store/blob_cache.py) and adaptive read-ahead
(llog/scan/read_ahead.py), against the real etcd and S3 servers; GETs are counted on
the nemesis proxy in front of the S3 server."""

from __future__ import annotations

import http.client
import os
import signal
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from urllib.parse import quote, urlsplit

import pytest

import llog
from llog.errors import CorruptBlob, ObjectNotFound
from llog.metrics import Metrics
from llog.records import AppendGroup
from llog.scan.read_ahead import ReadAhead
from llog.state.control import decode_index, read_control
from llog.store.blob_cache import BlobCache
from llog.store.local import LocalStore
from tests.broker_harness import broker_process
from tests.conftest import ProxiedS3, wait_until

PARTS = 8


def _shared_blob(conn: llog.Connection, topic: str) -> str:
    """One shared WAL blob holding a slice of every partition; its key."""
    llog.Topics(conn).create(topic, PARTS)
    with llog.Writer(conn) as w:
        outs = w.append_shared([AppendGroup(topic, p, [b"v%d-%d" % (p, i) for i in range(3)]) for p in range(PARTS)])
    assert all(o.ok for o in outs)
    [kv] = list(conn.etcd.scan(conn.keys.index(topic, 0, 0), conn.keys.index_range_end(topic, 0)))
    return decode_index(kv.key, kv.value).data_key


def _hits(conn: llog.Connection, result: str) -> float:
    return conn.metrics.read_cache_requests.labels(result)._value.get()


def _expected(p: int) -> list[bytes]:
    return [b"v%d-%d" % (p, i) for i in range(3)]


def test_partitions_of_one_blob_share_one_get(s3_proxy: ProxiedS3) -> None:
    with llog.Connection(s3_proxy.config) as conn:
        _shared_blob(conn, "shared")
        before = s3_proxy.proxy.requests().get("GET", 0)
        with llog.Reader(conn) as r:
            for p in range(PARTS):  # one partition after another, as separate scans
                assert [x.value for x in r.scan("shared", p, 0)] == _expected(p)
        assert s3_proxy.proxy.requests().get("GET", 0) - before == 1
        assert (_hits(conn, "miss"), _hits(conn, "hit")) == (1, PARTS - 1)


def test_without_the_cache_each_partition_gets_its_slice(s3_proxy: ProxiedS3) -> None:
    with llog.Connection(replace(s3_proxy.config, read_cache_bytes=0)) as conn:
        _shared_blob(conn, "nocache")
        before = s3_proxy.proxy.requests().get("GET", 0)
        with llog.Reader(conn) as r:
            for p in range(PARTS):
                assert [x.value for x in r.scan("nocache", p, 0)] == _expected(p)
        assert s3_proxy.proxy.requests().get("GET", 0) - before == PARTS


class _GatedStore(LocalStore):
    """A real local store whose range GETs wait for ``go``, counting them."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, Metrics())
        self.go = threading.Event()
        self.gets = 0

    def get_upto(self, key: str, offset: int, length: int) -> bytes:
        self.gets += 1
        assert self.go.wait(30)
        return super().get_upto(key, offset, length)


def test_sixteen_concurrent_readers_wait_for_one_get(tmp_path: Path) -> None:
    store = _GatedStore(tmp_path)
    store.put("root/wal-shared/s/b", bytes(range(256)) * 64)
    metrics = Metrics()
    cache = BlobCache(store, "root/wal-shared/", max_bytes=1 << 20, chunk_bytes=64 * 1024, metrics=metrics)
    readers = 16
    with ThreadPoolExecutor(readers) as pool:
        futs = [pool.submit(cache.read, "root/wal-shared/s/b", i * 100, 100) for i in range(readers)]
        waiting = metrics.read_cache_requests.labels("wait")
        # Every reader but the first is parked on the first one's GET before it answers.
        wait_until(lambda: waiting._value.get() >= readers - 1, 30, "15 readers waiting on one GET")
        store.go.set()
        got = [f.result() for f in futs]
    assert store.gets == 1
    assert got == [(bytes(range(256)) * 64)[i * 100 : i * 100 + 100] for i in range(readers)]
    assert metrics.read_cache_requests.labels("wait")._value.get() == readers - 1


def test_a_chunk_discarded_while_its_get_is_in_flight_is_not_kept(tmp_path: Path) -> None:
    store = _GatedStore(tmp_path)
    store.put("root/wal-shared/s/b", b"x" * 1000)
    metrics = Metrics()
    cache = BlobCache(store, "root/wal-shared/", max_bytes=1 << 20, chunk_bytes=64 * 1024, metrics=metrics)
    with ThreadPoolExecutor(1) as pool:
        fut = pool.submit(cache.read, "root/wal-shared/s/b", 0, 10)
        wait_until(lambda: store.gets == 1, 30, "the GET in flight")
        cache.discard("root/wal-shared/s/b")  # found damaged meanwhile
        store.go.set()
        assert fut.result() == b"x" * 10
    assert cache.chunks == 0


def test_a_corrupt_blob_is_read_again_from_storage_not_the_cache(s3_proxy: ProxiedS3) -> None:
    with llog.Connection(s3_proxy.config) as conn:
        key = _shared_blob(conn, "damaged")
        good = conn.store.get(key)
        conn.store.put(key, good[:-8] + b"\xff" * 8)  # the last partition's body damaged
        proxy = s3_proxy.proxy
        with llog.Reader(conn) as r:
            for _ in range(2):
                before = proxy.requests().get("GET", 0)
                with pytest.raises(CorruptBlob) as err:
                    list(r.scan("damaged", PARTS - 1, 0))
                assert err.value.key == key
                assert proxy.requests().get("GET", 0) - before == 1  # not served from memory
                assert conn.blob_cache.nbytes == 0
            conn.store.put(key, good)  # repaired: the next read sees the repaired bytes
            assert [x.value for x in r.scan("damaged", PARTS - 1, 0)] == _expected(PARTS - 1)


def test_a_deleted_blob_is_not_served_after_it_was_found_gone(s3_proxy: ProxiedS3) -> None:
    with llog.Connection(s3_proxy.config) as conn:
        key = _shared_blob(conn, "gone")
        conn.store.delete([key])
        with llog.Reader(conn) as r:
            for _ in range(2):
                with pytest.raises(ObjectNotFound):
                    list(r.scan("gone", 0, 0))
                assert conn.blob_cache.nbytes == 0


def test_the_cache_stays_within_its_bytes_and_counts_hits(s3_proxy: ProxiedS3) -> None:
    cfg = replace(s3_proxy.config, read_cache_bytes=3 * 4096, read_cache_chunk_bytes=4096)
    with llog.Connection(cfg) as conn:
        llog.Topics(conn).create("bounded", 2)
        with llog.Writer(conn) as w:
            for i in range(10):  # ten blobs, each with a slice of both partitions
                w.append_shared([AppendGroup("bounded", p, [b"x" * 1000, b"%d" % i]) for p in (0, 1)])
        with llog.Reader(conn) as r:
            assert len(list(r.scan("bounded", 0, 0))) == 20
            held = conn.blob_cache.chunks  # the newest blobs, as many as fit
            assert 0 < held < 10 and conn.blob_cache.nbytes <= 3 * 4096
            assert conn.metrics.read_cache_evictions._value.get() == 10 - held
            assert len(list(r.scan("bounded", 1, 0))) == 20
            assert conn.blob_cache.nbytes <= 3 * 4096
        assert conn.metrics.read_cache_bytes._value.get() == conn.blob_cache.nbytes
        # Partition 1's scan starts at the oldest blobs, long evicted; of the newer ones
        # it finds those its read-ahead asks for before its own misses evict them.
        hits, misses = _hits(conn, "hit"), _hits(conn, "miss")
        assert hits + misses == 20 and hits <= held


def test_read_ahead_doubles_when_the_consumer_waits_and_steps_back_when_ahead() -> None:
    ra = ReadAhead(2, 32)
    for want in (4, 8, 16, 32, 32):
        ra.taken(False)
        assert ra.depth == want
    for _ in range(31):
        ra.taken(True)
    assert ra.depth == 32  # one window of GETs ready in time is not yet a trend
    ra.taken(True)
    assert ra.depth == 31
    for _ in range(10_000):
        ra.taken(True)
    assert ra.depth == 2  # never below the configured start


def test_scans_read_ahead_deeper_at_s3_latency(s3_proxy: ProxiedS3) -> None:
    """Behind a 30 ms store a scan of many blobs waits on its GETs and deepens its
    window; the records still come back in order."""
    cfg = replace(s3_proxy.config, read_cache_bytes=0)
    with llog.Connection(cfg) as conn:
        llog.Topics(conn).create("deep", 1)
        with llog.Writer(conn) as w:
            for i in range(40):
                w.append("deep", 0, [b"%d" % i])
        s3_proxy.proxy.set_latency("fixed:30")
        with llog.Reader(conn) as r:
            assert [x.value for x in r.scan("deep", 0, 0)] == [b"%d" % i for i in range(40)]
            assert r._ahead.depth > cfg.read_prefetch


@pytest.mark.parametrize("peers", [False, True], ids=["from-s3", "from-the-writer"])
def test_a_broker_fetches_another_brokers_commit_as_its_watch_reports_it(s3_proxy: ProxiedS3, peers: bool) -> None:
    """Consumers on broker B of records produced on broker A: B learns of each commit
    from its etcd watch, reads it into its tail cache (one read of the blob for both
    partitions) and only then wakes the consumers, who are served from memory. With
    peer reads B asks A, which holds the blob it wrote, and S3 sees no GET; without,
    one GET of the blob."""
    cfg = s3_proxy.config
    with llog.Connection(cfg) as conn:
        llog.Topics(conn).create("w", 2)
    env = {"LLOG_READ_PEERS": "1" if peers else "0"}
    with broker_process(cfg, **env) as a, broker_process(cfg, **env) as b:
        for p in (0, 1):  # both partitions watched on B
            assert b.post("/consume", {"topic_partitions": [
                {"topic": "w", "partition": p, "fetch_offset": 0}], "max_wait_ms": 0})[0] == 200
        gets = s3_proxy.proxy.requests().get("GET", 0)
        status, _ = a.post("/produce", {"topic_partitions": [
            {"topic": "w", "partition": p, "records": ["eA=="]} for p in (0, 1)]})
        assert status == 200
        for p in (0, 1):
            status, got = b.post("/consume", {"topic_partitions": [
                {"topic": "w", "partition": p, "fetch_offset": 0}], "max_wait_ms": 10_000})
            assert status == 200 and [r["value"] for r in got["topic_partitions"][0]["records"]] == ["eA=="]
        assert s3_proxy.proxy.requests().get("GET", 0) - gets == (0 if peers else 1)
        assert b.metric("llog_read_peer_requests_total") == (1 if peers else 0)
        assert b.metric("llog_tail_remote_appends_total", outcome="cached") == 2
        assert b.metric("llog_tail_cache_lookups_total", result="hit") == 2


def _raw_get(url: str, path: str) -> tuple[int, bytes]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_a_peer_serves_from_memory_only_what_it_wrote(s3_proxy: ProxiedS3) -> None:
    cfg = s3_proxy.config
    with llog.Connection(cfg) as conn:
        llog.Topics(conn).create("held", 1)
        with broker_process(cfg) as a:
            produce = {"topic_partitions": [{"topic": "held", "partition": 0, "records": ["abc"]}]}
            assert a.post("/produce", produce)[0] == 200
            pend = read_control(conn, "held", 0).control.pending
            assert pend is not None
            whole = conn.store.get(pend.data_key)
            key = quote(pend.data_key, safe="")
            gets = s3_proxy.proxy.requests().get("GET", 0)
            # Past the blob's end: what there is, as a range GET of S3 answers.
            assert _raw_get(a.url, f"/blobs?key={key}&offset=0&length={len(whole) + 100}") == (200, whole)
            assert _raw_get(a.url, f"/blobs?key={key}&offset=3&length=5") == (200, whole[3:8])
            assert s3_proxy.proxy.requests().get("GET", 0) == gets  # served from memory
            other = quote(cfg.root_prefix + "/wal-shared/s/b", safe="")
            assert _raw_get(a.url, f"/blobs?key={other}&offset=0&length=5")[0] == 404  # never from S3
            assert a.exchange("GET", f"/blobs?key={key}&offset=-1&length=5")[0] == 400
            assert a.exchange("GET", "/blobs?offset=0&length=5")[0] == 400


@pytest.mark.alone  # a paused writer and a peer timeout: the timing is the test
def test_a_paused_writer_costs_a_peer_timeout_then_s3(s3_proxy: ProxiedS3) -> None:
    """Broker A wrote the blob and is then stopped (SIGSTOP: a pause, a GC, a frozen
    VM); B's read of it waits out the peer timeout and reads S3."""
    cfg = s3_proxy.config
    with llog.Connection(cfg) as conn:
        llog.Topics(conn).create("paused", 1)
    with broker_process(cfg) as a, broker_process(cfg) as b:
        produce = {"topic_partitions": [{"topic": "paused", "partition": 0, "records": ["r"]}]}
        assert a.post("/produce", produce)[0] == 200
        gets = s3_proxy.proxy.requests().get("GET", 0)
        os.kill(a.proc.pid, signal.SIGSTOP)
        try:
            status, got = b.post("/consume", {"topic_partitions": [
                {"topic": "paused", "partition": 0, "fetch_offset": 0}], "max_wait_ms": 0})
        finally:
            os.kill(a.proc.pid, signal.SIGCONT)
        assert status == 200 and [r["value"] for r in got["topic_partitions"][0]["records"]] == ["r"]
        assert s3_proxy.proxy.requests().get("GET", 0) - gets == 1
        assert b.metric("llog_read_peer_requests_total") == 1  # the one that timed out
