"""Every read path serves only what the index says exists now (protocol/README.md §9,
"Cached appends"): after key compaction, retention and DeleteRecords, consumers
through the broker that took the writes (its in-memory tail cache and its files in
``LLOG_TAIL_CACHE_DIR``), through another running broker (other brokers' appends read
into its tail cache as their watch events announce them) and through a broker started
afterwards (sharing the first one's files) read exactly the log as it is now: a
Kafka consumer (confluent-kafka), the HTTP ``/consume`` and the SDK's ``Reader``."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

import llog
from compactor import Compactor, compact_once
from compactor.retention import apply_retention
from llog.broker.fetch import NeedsIO, PartitionRead, read_partitions
from llog.broker.state import Broker
from llog.broker.wakeup import TailView
from llog.errors import LlogError
from llog.state.control import decode_cursor
from tests.broker_harness import BrokerProcess, broker_process
from tests.conftest import wait_until
from tests.test_kafka import KafkaBroker, kafka_broker

confluent_kafka = pytest.importorskip("confluent_kafka")

#: ``(offset, key, value)``.
Rec = tuple[int, bytes | None, bytes | None]
PARTITIONS = 2


def _stored(conn: llog.Connection, topic: str, partition: int) -> list[Rec]:
    """The log as the index says it is now: the SDK's reader, from the log start."""
    with llog.Reader(conn) as r:
        start = r.high_watermark(topic, partition)[0]
        return [(c.offset, c.key, c.value) for c in r.scan(topic, partition, start)]


def _http(b: BrokerProcess, topic: str, partition: int, start: int) -> list[Rec] | str:
    """Every record from ``start`` through ``b``'s ``/consume``, or the partition's error."""
    out: list[Rec] = []
    offset = start
    while True:
        _, resp = b.post("/consume", {"topic_partitions": [
            {"topic": topic, "partition": partition, "fetch_offset": offset}], "max_wait_ms": 0})
        [part] = resp["topic_partitions"]
        if not part["ok"]:
            return str(part["error_type"])
        out += [(r["offset"], None if r["key"] is None else r["key"].encode(),
                 None if r["value"] is None else r["value"].encode()) for r in part["records"]]
        if part["next_offset"] >= part["high_watermark"]:
            return out
        assert part["next_offset"] > offset, resp  # a fetch from a gap moves past it
        offset = part["next_offset"]


def _kafka(bootstrap: str, topic: str, want: dict[int, list[Rec]]) -> dict[int, list[Rec]]:
    """A Kafka consumer's records of each partition from the earliest offset, up to
    the last one ``want`` holds (a compacted partition keeps its last record)."""
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex}",
                                  "enable.auto.commit": False, "fetch.wait.max.ms": 10})
    c.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING) for p in want])
    got: dict[int, list[Rec]] = {p: [] for p in want}
    try:
        while any(not got[p] or got[p][-1][0] < want[p][-1][0] for p in want):
            m = c.poll(10)
            assert m is not None and m.error() is None, m and m.error()
            got[m.partition()].append((m.offset(), m.key(), m.value()))
    finally:
        c.close()
    return got


def _produce(bootstrap: str, topic: str, batches: list[list[tuple[int, bytes, bytes | None]]]) -> None:
    """Each batch of ``(partition, key, value)`` produced and flushed in turn (one
    append or more per batch and partition)."""
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for batch in batches:
        for partition, key, value in batch:
            p.produce(topic, value=value, key=key, partition=partition)
        assert p.flush(30) == 0


def _all_read_paths_agree(topic: str, want: dict[int, list[Rec]], brokers: list[BrokerProcess],
                          kafka: list[KafkaBroker], conn: llog.Connection) -> None:
    """The SDK, ``/consume`` through each broker and a Kafka consumer through each
    Kafka listener read ``want``, once the running brokers' watches told them (a
    broker reads etcd on a partition's first fetch, so a new one is current at once)."""
    for p, recs in want.items():
        assert _stored(conn, topic, p) == recs
        for b in brokers:
            wait_until(lambda b=b, p=p, recs=recs: _http(b, topic, p, recs[0][0]) == recs, 30,
                       f"{b.url} to serve partition {p} as the index says")
    for kb in kafka:
        assert _kafka(kb.bootstrap, topic, want) == want


def test_key_compaction_reaches_every_cache(kconn: llog.Connection, tmp_path: Path) -> None:
    conn = kconn
    topic = "kc"
    llog.Topics(conn).create(topic, PARTITIONS, cleanup_policy="compact", delete_retention_ms=0)
    files = {"LLOG_TAIL_CACHE_DIR": str(tmp_path / "tail")}
    keys = [b"k%02d" % k for k in range(20)]
    rounds = [[(p, k, b"v%d.%d.%s" % (r, p, k)) for p in range(PARTITIONS) for k in keys] for r in range(4)]
    tombstones = [[(p, k, None) for p in range(PARTITIONS) for k in keys[:5]]]
    last = [[(p, b"last", b"end") for p in range(PARTITIONS)]]  # a new key: nothing of it to remove
    # The other broker has no Kafka listener: Kafka's leaders stay on the writer.
    with kafka_broker(conn.config, **files) as writer, broker_process(conn.config) as other:
        # The other broker's consumers watch the partitions before the writes, so it
        # reads the writer's appends into its tail cache as they are announced.
        for p in range(PARTITIONS):
            assert _http(other, topic, p, 0) == []
        _produce(writer.bootstrap, topic, rounds + tombstones + last)
        full = {p: _stored(conn, topic, p) for p in range(PARTITIONS)}
        assert all(len(recs) == 4 * 20 + 5 + 1 for recs in full.values())
        _all_read_paths_agree(topic, full, [writer.http, other], [writer], conn)
        # The caches do serve these reads (else the rest proves nothing): the other broker's
        # once it has read the writer's appends, which it does after their announcement.
        for b in (writer.http, other):
            wait_until(lambda b=b: _http(b, topic, 0, 0) == full[0] and
                       b.metric("llog_tail_cache_lookups_total", result="hit") > 0, 30, f"{b.url} to serve from cache")

        for p in range(PARTITIONS):
            while compact_once(conn, topic, p).outcome == "compacted":
                pass
            with Compactor(conn) as c:  # the first pass keeps the tombstones, the second drops them
                assert c.clean_once(topic, p).outcome == "cleaned"
                assert c.clean_once(topic, p).outcome == "cleaned"
        latest: dict[int, dict[bytes | None, Rec]] = {p: {} for p in range(PARTITIONS)}
        for p, recs in full.items():
            for rec in recs:
                latest[p][rec[1]] = rec
        compacted = {p: sorted(r for r in latest[p].values() if r[2] is not None) for p in range(PARTITIONS)}
        assert all(len(recs) == 15 + 1 for recs in compacted.values())
        # The writer and the other broker learn it from their watches; a new broker
        # sharing the writer's files reads etcd first. Kafka's leaders of the two
        # partitions are then spread over the writer and the new broker.
        with kafka_broker(conn.config, **files) as new:
            _all_read_paths_agree(topic, compacted, [writer.http, other, new.http], [writer, new], conn)


@pytest.mark.parametrize("how", ["retention", "delete-records"])
def test_a_moved_log_start_reaches_every_cache(kconn: llog.Connection, tmp_path: Path, how: str) -> None:
    conn = kconn
    topic = "rt"
    topics = llog.Topics(conn)
    topics.create(topic, PARTITIONS)
    files = {"LLOG_TAIL_CACHE_DIR": str(tmp_path / "tail")}
    with kafka_broker(conn.config, **files) as writer, broker_process(conn.config) as other:
        for p in range(PARTITIONS):
            assert _http(other, topic, p, 0) == []
        _produce(writer.bootstrap, topic,
                 [[(p, b"k", b"v%d.%d" % (r, p)) for p in range(PARTITIONS)] * 10 for r in range(6)])
        full = {p: _stored(conn, topic, p) for p in range(PARTITIONS)}
        _all_read_paths_agree(topic, full, [writer.http, other], [writer], conn)
        if how == "retention":  # keeps the newest entry and the pending (never dropped)
            topics.set_retention(topic, retention_bytes=1)
        for p in range(PARTITIONS):
            if how == "retention":
                assert apply_retention(conn, topic, p).new_start > 0
            else:
                topics.delete_records(topic, p, 25)
        now = {p: _stored(conn, topic, p) for p in range(PARTITIONS)}
        assert all(0 < len(recs) < len(full[p]) for p, recs in now.items())
        for b in (writer.http, other):
            for p in range(PARTITIONS):
                wait_until(lambda b=b, p=p: _http(b, topic, p, 0) == "OffsetOutOfRange", 30,
                           f"{b.url} to refuse offset 0 of partition {p}")
        with kafka_broker(conn.config, **files) as new:
            assert _http(new.http, topic, 0, 0) == "OffsetOutOfRange"
            _all_read_paths_agree(topic, now, [writer.http, other, new.http], [writer, new], conn)


def test_a_brokers_watch_moves_its_caches_off_a_key_compacted_range(kconn: llog.Connection) -> None:
    """In one broker: the compaction cursor's watch, not a re-read of etcd once the
    broker stops trusting its watches, keeps the tail cache from serving what key
    compaction removed."""
    conn = kconn
    topic = "kw"
    llog.Topics(conn).create(topic, 1, cleanup_policy="compact")
    loop = asyncio.new_event_loop()
    b = Broker(conn.config, host="127.0.0.1", port=0)
    try:
        b.start(loop)
        assert b.tails is not None
        b.tails._trust_s = 3600.0  # never re-read etcd for want of a watch event

        def fetch(offset: int, *, io: bool = True) -> PartitionRead | LlogError:
            [got], _ = read_partitions(b, [(topic, 0, offset, 1 << 20)], 1 << 20, io=io)
            return got

        assert isinstance(fetch(0), PartitionRead)  # watched from here on
        with llog.Writer(conn) as w:
            for r in range(3):
                w.append(topic, 0, [llog.Record(b"v%d" % r, key=b"k%d" % k) for k in range(10)])
            w.append(topic, 0, [llog.Record(b"end", key=b"last")])

        def in_memory() -> int:
            """Records from offset 0 the tail cache serves."""
            try:
                got = fetch(0, io=False)
            except NeedsIO:
                return 0
            return len(got.records) if isinstance(got, PartitionRead) else 0

        wait_until(lambda: in_memory() == 31, 30, "the appends to be read into the tail cache")
        while compact_once(conn, topic, 0).outcome == "compacted":
            pass
        kv = conn.etcd.get(conn.keys.compaction_cursor(topic, 0))
        assert kv is not None
        cursor = decode_cursor(kv.key, kv.value)
        wait_until(lambda: (known := b.tails.known((topic, 0))) is not None
                   and known.compaction_cursor == cursor, 30, "the broker to learn the compaction cursor")
        with Compactor(conn) as c:
            assert c.clean_once(topic, 0).outcome == "cleaned"
        with pytest.raises(NeedsIO):  # below the cursor, memory no longer answers
            fetch(0, io=False)
        got = fetch(0)
        assert isinstance(got, PartitionRead)
        assert [(r.offset, r.key, r.value) for r in got.records] == _stored(conn, topic, 0)
        assert len(got.records) == 11
        # A cursor watch that may have missed a move (its stream moved to another
        # member before any event) makes the next fetch read etcd before the caches.
        b.tails._cursor_moved((topic, 0), None)
        assert b.tails.known((topic, 0)) is None
        assert isinstance(fetch(cursor), PartitionRead)
        assert b.tails.known((topic, 0)) == TailView(0, 31, cursor)
    finally:
        b.close()
        loop.close()
