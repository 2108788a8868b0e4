"""BatchingProducer against real etcd + S3: coalescing, triggers, keyed routing,
back-pressure, flush and close under load."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import replace
from typing import Any

import pytest

from llog.config import LlogConfig
from llog.connection import Connection
from llog.errors import BackPressure, Fenced, InvalidInput, LlogError, UnknownPartition
from llog.partitioner import partition_for_key
from llog.producer import BatchingProducer
from llog.reader import Reader
from llog.topic.admin import Topics
from llog.writer import AppendResult, Writer


def _conn(config: LlogConfig, **batch: Any) -> Connection:
    c = Connection(replace(config, **batch))
    Topics(c).create("p", 4)
    return c


@pytest.fixture
def slow_conn(config: LlogConfig) -> Iterator[Connection]:
    """Batches close only on flush/close (huge size and delay triggers)."""
    with _conn(config, batch_max_delay_ms=600_000, batch_max_bytes=1 << 30) as c:
        yield c


def _read_all(conn: Connection, partition: int) -> list[bytes]:
    with Reader(conn) as r:
        return [rec.value for rec in r.scan("p", partition, 0)]


def test_many_threads_are_coalesced_and_offsets_read_back(config: LlogConfig) -> None:
    with _conn(config, batch_max_delay_ms=50) as conn, BatchingProducer(conn) as prod:
        sent: dict[bytes, Future[int]] = {}
        lock = threading.Lock()

        def worker(t: int) -> None:
            for i in range(50):
                v = f"t{t}-{i}".encode()
                f = prod.send("p", (t + i) % 4, v)
                with lock:
                    sent[v] = f

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        prod.flush()
        assert all(f.done() for f in sent.values())
        by_part = {p: _read_all(conn, p) for p in range(4)}
        for v, f in sent.items():
            t, i = (int(x) for x in v.decode()[1:].split("-"))
            assert by_part[(t + i) % 4][f.result()] == v
        assert sum(len(vs) for vs in by_part.values()) == 400
        blobs = conn.metrics.value("llog_shared_blob_bytes_count")
        assert 1 <= blobs < 400 / 4, f"{blobs} blobs for 400 sends: not coalesced"


def test_keyed_sends_follow_the_partitioner_in_order(config: LlogConfig) -> None:
    with _conn(config) as conn, BatchingProducer(conn) as prod:
        futs = [(k, prod.send("p", None, f"{k}-{i}".encode(), key=k.encode())) for i in range(10) for k in "abcdef"]
        prod.flush()
        for k in "abcdef":
            p = partition_for_key(k.encode(), 4)
            with Reader(conn) as r:
                mine = [rec for rec in r.scan("p", p, 0) if rec.key == k.encode()]
            assert [rec.value for rec in mine] == [f"{k}-{i}".encode() for i in range(10)]
            assert [f.result() for kk, f in futs if kk == k] == [rec.offset for rec in mine]


def test_size_trigger_sends_without_flush(config: LlogConfig) -> None:
    with _conn(config, batch_max_delay_ms=600_000, batch_max_bytes=1000) as conn, BatchingProducer(conn) as prod:
        futs = [prod.send("p", 0, b"x" * 100) for _ in range(10)]
        assert [f.result(timeout=60) for f in futs] == list(range(10))
        assert conn.metrics.value("llog_producer_flushes_total", reason="size") >= 1


def test_delay_trigger_sends_without_flush(config: LlogConfig) -> None:
    with _conn(config, batch_max_delay_ms=20) as conn, BatchingProducer(conn) as prod:
        assert prod.send("p", 1, b"late").result(timeout=60) == 0
        assert conn.metrics.value("llog_producer_flushes_total", reason="delay") == 1


def test_flush_resolves_buffered_sends(slow_conn: Connection) -> None:
    with BatchingProducer(slow_conn) as prod:
        futs = [prod.send("p", 2, b"v%d" % i) for i in range(5)]
        assert not any(f.done() for f in futs)
        prod.flush()
        assert [f.result(timeout=0) for f in futs] == [0, 1, 2, 3, 4]
    assert _read_all(slow_conn, 2) == [b"v%d" % i for i in range(5)]


def test_send_group_is_one_contiguous_append(slow_conn: Connection) -> None:
    with BatchingProducer(slow_conn) as prod:
        single = prod.send("p", 0, b"s0")
        group = prod.send_group("p", 0, [b"g0", b"g1", b"g2"])
        after = prod.send("p", 0, b"s1")
        prod.flush()
        res = group.result()
        assert isinstance(res, AppendResult)
        assert (res.count, res.end_offset - res.start_offset) == (3, 2)
        got = _read_all(slow_conn, 0)
        assert got[res.start_offset : res.end_offset + 1] == [b"g0", b"g1", b"g2"]
        assert got[single.result()] == b"s0"
        assert got[after.result()] == b"s1"


def test_full_buffer_gives_backpressure_then_recovers(config: LlogConfig) -> None:
    with _conn(config, batch_max_delay_ms=600_000, batch_max_bytes=1 << 30,
               batch_max_buffered_bytes=1000) as conn, BatchingProducer(conn) as prod:
        first = prod.send("p", 0, b"a" * 600)
        with pytest.raises(BackPressure):
            prod.send("p", 0, b"b" * 600, timeout=0.05)
        assert conn.metrics.value("llog_producer_backpressure_total") == 1
        # A blocked sender gets in once a flush frees the buffer.
        started = threading.Event()
        box: list[Future[int]] = []

        def blocked() -> None:
            started.set()
            box.append(prod.send("p", 0, b"c" * 600, timeout=120))

        th = threading.Thread(target=blocked)
        th.start()
        started.wait()
        prod.flush()
        th.join()
        prod.flush()
        assert first.result() == 0
        assert box[0].result() == 1
        assert _read_all(conn, 0) == [b"a" * 600, b"c" * 600]


def test_partition_errors_reach_only_their_futures(slow_conn: Connection) -> None:
    Topics(slow_conn).fence("p", 3)
    with BatchingProducer(slow_conn) as prod:
        with pytest.raises(UnknownPartition):
            prod.send("p", 9, b"x")
        bad = prod.send("p", 3, b"x")
        good = prod.send("p", 1, b"y")
        prod.flush()
        with pytest.raises(Fenced):
            bad.result()
        assert good.result() == 0


def test_close_under_load_resolves_every_future(config: LlogConfig) -> None:
    with _conn(config, batch_max_delay_ms=5, batch_max_bytes=4096) as conn:
        prod = BatchingProducer(conn)
        futures: list[tuple[bytes, int, Future[int]]] = []
        lock = threading.Lock()
        some_acked = threading.Event()
        refused = []

        def worker(t: int) -> None:
            i = 0
            while True:
                v = f"{t}-{i}".encode()
                try:
                    f = prod.send("p", t % 4, v)
                except LlogError:
                    refused.append(t)
                    return
                f.add_done_callback(lambda _f: some_acked.set())
                with lock:
                    futures.append((v, t % 4, f))
                i += 1

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
        for th in threads:
            th.start()
        some_acked.wait()
        prod.close()
        for th in threads:
            th.join()
        assert sorted(refused) == list(range(8))
        assert futures and all(f.done() for _, _, f in futures)
        by_part = {p: _read_all(conn, p) for p in range(4)}
        for v, p, f in futures:
            assert f.exception() is None
            assert by_part[p][f.result()] == v
        assert sum(len(vs) for vs in by_part.values()) == len(futures)


def test_a_group_the_writer_rejects_fails_alone(slow_conn: Connection) -> None:
    class PickyWriter(Writer):
        """Rejects any call holding the value b"bad" up front, as a writer-side check
        the producer did not repeat would (e.g. a stale topic definition)."""

        def validate(self, groups: Any, **kwargs: Any) -> Any:
            groups = list(groups)
            if any(r.value == b"bad" for g in groups for r in g.records):
                raise InvalidInput("bad record")
            return super().validate(groups, **kwargs)

    with PickyWriter(slow_conn) as w, BatchingProducer(w) as prod:
        good = prod.send_group("p", 0, [b"ok"])
        bad = prod.send_group("p", 1, [b"bad"])
        prod.flush()
        assert good.result().start_offset == 0
        with pytest.raises(InvalidInput):
            bad.result()


def test_groups_of_one_partition_in_a_batch_share_one_append(slow_conn: Connection) -> None:
    txns = slow_conn.metrics.value("llog_etcd_ops_total", op="txn")
    with BatchingProducer(slow_conn) as prod:
        a = prod.send_group("p", 0, [b"a0", b"a1"])
        other = prod.send_group("p", 1, [b"o0"])
        idem = prod.send_group("p", 0, [b"i0"], producer_id="prod-1", sequence=0)
        b = prod.send_group("p", 0, [b"b0", b"b1", b"b2"])
        c = prod.send_group("p", 0, [b"c0"])
        prod.flush()
        ra, ri, rb, rc = a.result(), idem.result(), b.result(), c.result()
        # Partition 0: [a] alone (an idempotent group never merges, nor across one),
        # then [idem], then [b + c] as one append; partition 1: one append. One txn
        # each (closing adds the settles).
        assert slow_conn.metrics.value("llog_etcd_ops_total", op="txn") - txns == 4
    assert [(r.start_offset, r.end_offset, r.count) for r in (ra, ri, rb, rc)] == [
        (0, 1, 2), (2, 2, 1), (3, 5, 3), (6, 6, 1)
    ]
    assert rb.append_id == rc.append_id != ri.append_id != ra.append_id
    assert other.result().start_offset == 0
    assert _read_all(slow_conn, 0) == [b"a0", b"a1", b"i0", b"b0", b"b1", b"b2", b"c0"]


def test_next_batch_is_staged_while_the_previous_commits_in_order(slow_conn: Connection) -> None:
    first_staged, second_staged = threading.Event(), threading.Event()
    overlapped: list[bool] = []

    class GatedWriter(Writer):
        """Holds the first commit until a second blob is staged: that only happens if
        staging overlaps committing."""

        def put_encoded(self, encoded: Any) -> Any:
            staged = super().put_encoded(encoded)
            (second_staged if first_staged.is_set() else first_staged).set()
            return staged

        def commit_staged(self, staged: Any) -> Any:
            if not overlapped:
                overlapped.append(second_staged.wait(60))
            return super().commit_staged(staged)

    with GatedWriter(slow_conn) as w, BatchingProducer(w, max_inflight=2) as prod:
        first = prod.send_group("p", 0, [b"first"])
        prod.flush(timeout=0)  # close the first batch without waiting for it
        assert first_staged.wait(60)
        second = prod.send_group("p", 0, [b"second"])
        prod.flush()
        assert overlapped == [True]
        assert (first.result().start_offset, second.result().start_offset) == (0, 1)
    assert _read_all(slow_conn, 0) == [b"first", b"second"]


def test_one_put_at_a_time_while_the_next_blob_encodes(slow_conn: Connection) -> None:
    """``max_inflight_puts=1``: the next blob is encoded while the current one is being
    PUT, but its PUT waits for the current one to finish."""
    release_first = threading.Event()
    first_put = threading.Event()
    second_encoded = threading.Event()
    events: list[str] = []
    lock = threading.Lock()

    class GatedWriter(Writer):
        def encode_shared(self, groups: Any, **kwargs: Any) -> Any:
            encoded = super().encode_shared(groups, **kwargs)
            with lock:
                events.append("encoded")
                if events.count("encoded") == 2:
                    second_encoded.set()
            return encoded

        def put_encoded(self, encoded: Any) -> Any:
            with lock:
                events.append("put")
                first = events.count("put") == 1
            if first:
                first_put.set()
                assert release_first.wait(60)
            staged = super().put_encoded(encoded)
            with lock:
                events.append("put done")
            return staged

    with GatedWriter(slow_conn) as w, BatchingProducer(w, max_inflight=2, max_inflight_puts=1) as prod:
        first = prod.send_group("p", 0, [b"first"])
        prod.flush(timeout=0)  # close the first batch without waiting for it
        assert first_put.wait(60)
        second = prod.send_group("p", 0, [b"second"])
        prod.flush(timeout=0)
        assert second_encoded.wait(60)  # encoded while the first PUT is held
        with lock:
            assert events == ["encoded", "put", "encoded"]
        release_first.set()
        assert (first.result(60).start_offset, second.result(60).start_offset) == (0, 1)
    assert events == ["encoded", "put", "encoded", "put done", "put", "put done"]
    assert _read_all(slow_conn, 0) == [b"first", b"second"]


def test_records_are_checked_once_at_send_not_again_at_flush(
    slow_conn: Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    import llog.producer as producer_mod
    import llog.write.validation as validation_mod

    calls: list[str] = []
    real = validation_mod.check_records

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append("check")
        return real(*args, **kwargs)

    monkeypatch.setattr(producer_mod, "check_records", counting)
    monkeypatch.setattr(validation_mod, "check_records", counting)
    with BatchingProducer(slow_conn) as prod:
        futs = [prod.send_group("p", i % 4, [b"a%d" % i, b"b%d" % i]) for i in range(8)]
        assert len(calls) == 8  # one check per send
        prod.flush()
        assert [f.result() for f in futs]
    assert len(calls) == 8  # the flush staged them without checking again
    assert _read_all(slow_conn, 1) == [b"a1", b"b1", b"a5", b"b5"]


def test_inflight_settings_come_from_the_config_and_bad_ones_raise(slow_conn: Connection) -> None:
    cfg = replace(slow_conn.config, batch_max_inflight=3, batch_max_inflight_puts=5)
    with Connection(cfg) as conn, BatchingProducer(conn) as prod:
        # The PUT limit is capped at the batches in flight: three uploaders, not five.
        assert len(prod._sender._uploaders) == 3
        fut = prod.send_group("p", 0, [b"x"])
        prod.flush()
        assert fut.result(60).start_offset == 0
    with BatchingProducer(slow_conn, max_inflight=4, max_inflight_puts=1) as prod:
        assert len(prod._sender._uploaders) == 1
    for bad in ({"max_inflight": 0}, {"max_inflight_puts": 0}):
        with pytest.raises(InvalidInput):
            BatchingProducer(slow_conn, **bad)
