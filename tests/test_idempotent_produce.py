"""Idempotent produce (protocol/README.md, "Idempotent produce"): a producer id and a
per-partition sequence ride in the commit transaction, so a retry of one of the last 5
batches whose acknowledgement was lost returns the original offsets instead of
appending again; another batch under a used sequence, a gap, a batch older than the
window and an older epoch are refused with nothing written."""

from __future__ import annotations

import itertools
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest

import llog
from llog import AppendGroup
from llog.codec.etcd_values.producers import ProducerState
from llog.errors import AmbiguousCommit, InvalidInput, ProducerFenced, SequenceError, SequenceReused
from llog.etcd.operations import KV
from llog.state.keys import prefix_range_end
from llog.writer import AppendFailure, AppendResult
from tests.conftest import PrivateEtcd

PARTITIONS = 8
BATCHES = 1000


class LostReply(Exception):
    """The commit went through but its reply never reached the caller."""


class LoseNextReply:
    """A fault hook that raises :class:`LostReply` after the next successful commit
    and remembers the data key of that commit."""

    def __init__(self) -> None:
        self.armed = False
        self.lost: list[str] = []

    def __call__(self, point: str, data_key: str) -> None:
        if point == "after_commit" and self.armed:
            self.armed = False
            self.lost.append(data_key)
            raise LostReply(data_key)


def _batch(producer: str, seq: int) -> list[bytes]:
    return [f"{producer}/{seq}/{i}".encode() for i in range(1 + seq % 3)]


def _partition_keys(conn: llog.Connection, topic: str, partition: int) -> list[KV]:
    prefix = conn.keys.partition_prefix(topic, partition)
    return conn.etcd.range(prefix, prefix_range_end(prefix))


def _scan(conn: llog.Connection, topic: str, partition: int) -> list[tuple[int, bytes]]:
    with llog.Reader(conn) as r:
        return [(rec.offset, rec.value) for rec in r.scan(topic, partition)]


def _append(
    w: llog.Writer, topic: str, partition: int, records: list[bytes] | list[llog.Record], pid: str, seq: int,
    epoch: int | None = None,
) -> AppendResult:
    [out] = w.append_shared([AppendGroup(topic, partition, records, pid, seq, epoch)])
    if isinstance(out, AppendFailure):
        raise out.error
    return out


def _produce_with_lost_replies(
    conn: llog.Connection, topic: str, partition: int, batches: int
) -> list[tuple[list[bytes], AppendResult, str]]:
    """One producer on one partition: every batch's first reply is lost, then it is
    retried with the same sequence, every 10th time through a brand-new writer."""
    hook = LoseNextReply()
    pid = f"prod-{partition}"
    out = []
    with llog.Writer(conn, fault_hook=hook) as w:
        for seq in range(batches):
            records = _batch(pid, seq)
            hook.armed = True
            with pytest.raises(LostReply):
                _append(w, topic, partition, records, pid, seq)
            if seq % 10 == 9:
                with llog.Writer(conn) as fresh:
                    res = _append(fresh, topic, partition, records, pid, seq)
            else:
                res = _append(w, topic, partition, records, pid, seq)
            out.append((records, res, hook.lost[-1]))
    return out


def test_retries_after_lost_replies_keep_each_record_once(conn: llog.Connection) -> None:
    llog.Topics(conn).create("idem", PARTITIONS)
    per_partition = BATCHES // PARTITIONS
    with ThreadPoolExecutor(PARTITIONS) as pool:
        runs = list(pool.map(lambda p: _produce_with_lost_replies(conn, "idem", p, per_partition),
                             range(PARTITIONS)))
    assert sum(len(r) for r in runs) == BATCHES
    dup = conn.metrics.registry.get_sample_value("llog_partition_appends_total", {"outcome": "duplicate"})
    assert dup == BATCHES
    for partition, run in enumerate(runs):
        log = _scan(conn, "idem", partition)
        expected = [v for records, _, _ in run for v in records]
        # Each record exactly once, in batch order, and nothing else in the log.
        assert [v for _, v in log] == expected
        assert [o for o, _ in log] == list(range(len(expected)))
        by_offset = dict(log)
        for records, res, lost_key in run:
            # The retry got the original commit's offsets and blob, not its own.
            assert res.data_key == lost_key
            assert res.append_id.startswith(lost_key.rsplit("/", 1)[1] + ":")
            assert res.count == len(records)
            assert [by_offset[o] for o in range(res.start_offset, res.end_offset + 1)] == records
        ps = ProducerState.decode(
            conn.etcd.get(conn.keys.producer("idem", partition, f"prod-{partition}")).value  # type: ignore[union-attr]
        )
        assert (ps.sequence, ps.end_offset) == (per_partition - 1, len(expected) - 1)


def test_out_of_order_sequence_is_rejected_and_writes_nothing(conn: llog.Connection) -> None:
    llog.Topics(conn).create("seq", 1)
    with llog.Writer(conn) as w:
        for seq in range(3):
            _append(w, "seq", 0, [b"x%d" % seq], "p", seq)
        before = _partition_keys(conn, "seq", 0)
        with pytest.raises(SequenceError) as err:  # a gap
            _append(w, "seq", 0, [b"bad"], "p", 4)
        assert type(err.value) is SequenceError
        assert (err.value.topic, err.value.partition, err.value.producer_id) == ("seq", 0, "p")
        assert (err.value.expected, err.value.got) == (3, 4)
        assert "seq/0" in str(err.value) and "'p'" in str(err.value)
        # A sequence already used, for other records (or another count): not a retry.
        for seq, records in ((1, [b"bad"]), (0, [b"bad"]), (2, [b"x2", b"extra"]), (2, [b"X2"])):
            with pytest.raises(SequenceReused) as reused:
                _append(w, "seq", 0, records, "p", seq)
            assert (reused.value.got, reused.value.start_offset, reused.value.end_offset) == (seq, seq, seq)
            assert "other records" in str(reused.value)
    # A writer without cached state reaches the same verdicts from etcd.
    with llog.Writer(conn) as fresh:
        with pytest.raises(SequenceError):
            _append(fresh, "seq", 0, [b"bad"], "p", 5)
        with pytest.raises(SequenceReused):
            _append(fresh, "seq", 0, [b"bad"], "p", 1)
    assert _partition_keys(conn, "seq", 0) == before
    assert [v for _, v in _scan(conn, "seq", 0)] == [b"x0", b"x1", b"x2"]


def test_a_retry_of_any_of_the_last_five_batches_gets_its_offsets(conn: llog.Connection) -> None:
    llog.Topics(conn).create("window", 1)
    with llog.Writer(conn) as w:
        first = [_append(w, "window", 0, _batch("p", seq), "p", seq) for seq in range(7)]
    before = _partition_keys(conn, "window", 0)
    for writer_cached in (True, False):
        with llog.Writer(conn) as w:
            if writer_cached:  # a writer that knows the producer's state from its own commit
                _append(w, "window", 0, _batch("p", 6), "p", 6)
            for seq in range(2, 7):  # in any order: the client's retries of in-flight batches
                retry = _append(w, "window", 0, _batch("p", seq), "p", seq)
                assert retry.duplicate and not first[seq].duplicate
                assert (retry.start_offset, retry.end_offset, retry.count) == (
                    first[seq].start_offset, first[seq].end_offset, first[seq].count)
                assert (retry.data_key, retry.append_id) == (first[seq].data_key, first[seq].append_id)
            # Older than the window: refused, as Kafka does (OUT_OF_ORDER_SEQUENCE_NUMBER).
            for seq in (0, 1):
                with pytest.raises(SequenceError) as err:
                    _append(w, "window", 0, _batch("p", seq), "p", seq)
                assert type(err.value) is SequenceError and err.value.expected == 7
    assert _partition_keys(conn, "window", 0) == before
    assert [v for _, v in _scan(conn, "window", 0)] == [v for seq in range(7) for v in _batch("p", seq)]


def test_a_retry_is_told_by_its_records_not_their_timestamps(conn: llog.Connection) -> None:
    llog.Topics(conn).create("stamps", 1)
    records = [llog.Record(b"v", b"k", None, (("h", b"1"),)), llog.Record(b"w")]
    with llog.Writer(conn) as w:
        first = _append(w, "stamps", 0, records, "p", 0)
        # Unset timestamps are stamped at append time, which differs in the retry.
        stamped = [replace(r, timestamp=1_700_000_000_000) for r in records]
        assert _append(w, "stamps", 0, stamped, "p", 0) == replace(first, duplicate=True)
        for other in ([llog.Record(b"v", b"K"), records[1]], [llog.Record(b"v", b"k", None, (("h", b"2"),)),
                                                              records[1]]):
            with pytest.raises(SequenceReused):
                _append(w, "stamps", 0, other, "p", 0)
    assert [(r.key, r.value) for r in llog.Reader(conn).scan("stamps", 0)] == [(b"k", b"v"), (None, b"w")]


def test_an_older_epoch_is_fenced_and_a_new_one_starts_at_zero(conn: llog.Connection) -> None:
    llog.Topics(conn).create("epochs", 1)
    with llog.Writer(conn) as w:
        _append(w, "epochs", 0, [b"e0"], "p", 0)  # epoch 0, the default
        _append(w, "epochs", 0, [b"e1"], "p", 0, epoch=1)
        with pytest.raises(ProducerFenced) as fenced:
            _append(w, "epochs", 0, [b"zombie"], "p", 1, epoch=0)
        assert (fenced.value.epoch, fenced.value.current) == (0, 1) and "'p'" in str(fenced.value)
        with pytest.raises(SequenceError) as err:
            _append(w, "epochs", 0, [b"e2"], "p", 5, epoch=2)
        assert err.value.expected == 0
        _append(w, "epochs", 0, [b"e2"], "p", 0, epoch=2)
        # A new epoch's window holds its own batches only.
        assert _append(w, "epochs", 0, [b"e2"], "p", 0, epoch=2).duplicate
        with pytest.raises(ProducerFenced):
            _append(w, "epochs", 0, [b"e1"], "p", 0, epoch=1)
    with llog.Writer(conn) as fresh, pytest.raises(ProducerFenced):
        _append(fresh, "epochs", 0, [b"zombie"], "p", 1, epoch=1)
    assert [v for _, v in _scan(conn, "epochs", 0)] == [b"e0", b"e1", b"e2"]


def test_state_written_before_digests_still_recognises_a_retry(conn: llog.Connection) -> None:
    """A producer key of an older llog (no epoch, digest or window fields) decodes, and
    a retry of its last batch is still answered with its offsets."""
    import msgpack

    llog.Topics(conn).create("compat", 1)
    with llog.Writer(conn) as w:
        first = _append(w, "compat", 0, [b"a"], "p", 0)
    key = conn.keys.producer("compat", 0, "p")
    old = {k: v for k, v in msgpack.unpackb(conn.etcd.get(key).value).items()  # type: ignore[union-attr]
           if k not in ("epoch", "digest", "recent")}
    conn.etcd.put(key, msgpack.packb(old))
    with llog.Writer(conn) as w:
        assert _append(w, "compat", 0, [b"a"], "p", 0) == replace(first, duplicate=True)
        _append(w, "compat", 0, [b"b"], "p", 1)
    assert [v for _, v in _scan(conn, "compat", 0)] == [b"a", b"b"]


def test_two_producers_interleave_on_one_partition(conn: llog.Connection) -> None:
    llog.Topics(conn).create("inter", 1)
    n = 40
    results: dict[str, list[AppendResult]] = {"a": [], "b": []}
    barrier = threading.Barrier(2)

    def produce(pid: str) -> None:
        with llog.Writer(conn) as w:
            barrier.wait()
            for seq in range(n):
                res = _append(w, "inter", 0, _batch(pid, seq), pid, seq)
                results[pid].append(res)
                if seq % 4 == 0:  # a plain retry of an acknowledged batch
                    assert _append(w, "inter", 0, _batch(pid, seq), pid, seq) == replace(res, duplicate=True)

    with ThreadPoolExecutor(2) as pool:
        for f in [pool.submit(produce, "a"), pool.submit(produce, "b")]:
            f.result()
    log = _scan(conn, "inter", 0)
    spans = sorted((r.start_offset, r.end_offset) for rs in results.values() for r in rs)
    # Acknowledged ranges tile the log: no gap, no overlap, no duplicate.
    assert spans[0][0] == 0 and spans[-1][1] == len(log) - 1
    assert all(b[0] == a[1] + 1 for a, b in itertools.pairwise(spans))
    for pid, rs in results.items():
        assert [v for _, v in log if v.startswith(pid.encode() + b"/")] == [
            v for seq in range(n) for v in _batch(pid, seq)
        ]
        assert [v for _, v in log[rs[-1].start_offset : rs[-1].end_offset + 1]] == _batch(pid, n - 1)


def test_new_producer_starts_anywhere_and_plain_appends_still_work(conn: llog.Connection) -> None:
    llog.Topics(conn).create("start", 1)
    with llog.Writer(conn) as w:
        first = _append(w, "start", 0, [b"a"], "late", 100)
        plain = w.append("start", 0, [b"b"])
        assert _append(w, "start", 0, [b"c"], "late", 101).start_offset == plain.end_offset + 1
        with pytest.raises(SequenceReused):  # the sequence of a batch of other records
            _append(w, "start", 0, [b"z"], "late", 101)
        with pytest.raises(SequenceReused):
            _append(w, "start", 0, [b"d"], "late", 100)
    assert first.start_offset == 0
    assert [v for _, v in _scan(conn, "start", 0)] == [b"a", b"b", b"c"]


def test_steady_state_is_one_txn_and_no_read_per_append(conn: llog.Connection) -> None:
    llog.Topics(conn).create("steady", 2)

    def ops(op: str) -> float:
        return conn.metrics.registry.get_sample_value("llog_etcd_ops_total", {"op": op}) or 0.0

    with llog.Writer(conn) as w:
        for p in range(2):
            _append(w, "steady", p, [b"warm"], "s", 0)
        before = {op: ops(op) for op in ("txn", "get", "range")}
        for seq in range(1, 21):
            for p in range(2):
                _append(w, "steady", p, [b"v%d" % seq], "s", seq)
        assert {op: ops(op) - before[op] for op in before} == {"txn": 40, "get": 0, "range": 0}


@pytest.mark.parametrize(
    ("pid", "seq", "epoch"),
    [("p", None, None), (None, 0, None), ("p", -1, None), ("p", True, None), ("a/b", 0, None), ("", 0, None),
     ("p", "1", None), ("p", 0, -1), ("p", 0, 2**31), ("p", 0, True), (None, None, 0)],
)
def test_bad_producer_fields_are_rejected_before_any_write(
    conn: llog.Connection, pid: object, seq: object, epoch: object
) -> None:
    llog.Topics(conn).create("bad", 1)
    with llog.Writer(conn) as w, pytest.raises(InvalidInput):
        w.append_shared([AppendGroup("bad", 0, [b"x"], pid, seq, epoch)])  # type: ignore[arg-type]
    assert _partition_keys(conn, "bad", 0) == []
    assert list(conn.store.list(conn.keys.wal_prefix())) == []


def test_unresolvable_outcome_is_ambiguous_then_the_retry_resolves(
    config: llog.LlogConfig, private_etcd: PrivateEtcd
) -> None:
    cfg = private_etcd.config(config)
    with llog.Connection(cfg) as c:
        llog.Topics(c).create("amb", 1)
        with llog.Writer(c, fault_hook=private_etcd) as w:
            # Warm the writer's cache so the next commit is a txn with no read before it.
            _append(w, "amb", 0, [b"w"], "p", 0)
            private_etcd.armed = True
            [out] = w.append_shared([AppendGroup("amb", 0, [b"x"], "p", 1)])
    # The txn never reached etcd, but the writer cannot know that: the append may exist.
    assert isinstance(out, AppendFailure)
    assert isinstance(out.error, AmbiguousCommit)
    blob_id = private_etcd.put[0].rsplit("/", 1)[1]
    assert "amb/0" in str(out.error) and f"{blob_id}:0" in str(out.error)

    private_etcd.restart()
    with llog.Connection(cfg) as c, llog.Writer(c) as w:
        retry = _append(w, "amb", 0, [b"x"], "p", 1)
        assert (retry.start_offset, retry.end_offset) == (1, 1)
        assert _append(w, "amb", 0, [b"x"], "p", 1) == replace(retry, duplicate=True)
        assert [v for _, v in _scan(c, "amb", 0)] == [b"w", b"x"]


def test_a_batch_comes_before_the_window_by_record_counted_sequences_across_the_wrap() -> None:
    from llog.codec.etcd_values.producers import ProducerState, SequencedBatch
    from llog.write.older_batches import behind

    # Window: batches of 3 records at sequences 100, 103 (offsets 50.., 60..).
    st = ProducerState(103, 60, 62, "a", "k", 0, recent=(SequencedBatch(100, 50, 52, 1),))
    assert behind(97, 3, st) == 49  # right before the window: ends at most at B0's start - 1
    assert behind(90, 3, st) == 49 - 7  # 7 of the producer's records lie between
    assert behind(99, 3, st) is None  # overlaps the window's oldest batch
    assert behind(106, 3, st) is None  # after the window: a gap, not a retry
    wrapped = ProducerState(5, 60, 62, "a", "k", 0, recent=(SequencedBatch(2, 50, 52, 1),))
    assert behind(2**31 - 3, 3, wrapped) == 47  # sequences wrap to 0 after 2^31 - 1
