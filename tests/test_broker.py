"""Broker contract over real HTTP: a ``python -m llog broker`` child process backed by
the real etcd and S3 servers; every status code path, long-poll wake-ups, and two
brokers sharing partitions."""

from __future__ import annotations

import base64
import random
import threading
from typing import Any

import pytest

from llog.config import LlogConfig
from llog.connection import Connection
from llog.reader import Reader
from llog.topic.admin import Topics
from tests.broker_harness import (  # noqa: F401 (the fixtures conn, broker, shared_conn, shared_broker)
    BrokerProcess,
    broker_on_topic_t,
    broker_process,
    conn_with_topic_t,
    shared_broker_on_topic_t,
    shared_conn_with_topic_t,
)
from tests.conftest import wait_until


def _produce(b: BrokerProcess, tps: list[dict[str, Any]], **kw: Any) -> tuple[int, Any]:
    return b.post("/produce", {"topic_partitions": tps}, **kw)


def _consume(b: BrokerProcess, topic: str, partition: int, offset: int, **opts: Any) -> tuple[int, Any]:
    return b.post("/consume", {"topic_partitions": [
        {"topic": topic, "partition": partition, "fetch_offset": offset}], **opts})


def _hwm(conn: Connection, partition: int, topic: str = "t") -> int:
    with Reader(conn) as r:
        return r.high_watermark(topic, partition)[1]


def _wal_objects(conn: Connection) -> list[str]:
    return [o.key for o in conn.store.list(f"{conn.config.root_prefix}/")]


def test_produce_then_consume_round_trip(broker: BrokerProcess, conn: Connection) -> None:
    binary = bytes(range(256))
    status, body = _produce(broker, [
        {"topic": "t", "partition": 0, "records": ["a", "b", "ünï"]},
        {"topic": "t", "partition": 1, "records": [{"base64": base64.b64encode(binary).decode()}]},
    ])
    assert status == 200, body
    assert (body["success_count"], body["error_count"]) == (2, 0)
    r0, r1 = body["results"]
    assert (r0["ok"], r0["start_offset"], r0["end_offset"], r0["count"]) == (True, 0, 2, 3)
    assert r0["index_key"].startswith(conn.config.root_prefix)
    assert r0["wal_uri"].startswith("s3://") and r0["wal_uri"] == r1["wal_uri"]  # one shared blob
    assert (r1["start_offset"], r1["end_offset"]) == (0, 0)

    status, got = _consume(broker, "t", 0, 0)
    assert status == 200, got
    [p0] = got["topic_partitions"]
    assert [r["value"] for r in p0["records"]] == ["a", "b", "ünï"]
    assert [r["offset"] for r in p0["records"]] == [0, 1, 2]
    assert (p0["high_watermark"], p0["next_offset"]) == (3, 3)
    status, got = _consume(broker, "t", 1, 0)
    assert got["topic_partitions"][0]["records"][0]["value"] == {"base64": base64.b64encode(binary).decode()}
    # The SDK reads the same bytes.
    with Reader(conn) as rd:
        assert [r.value for r in rd.scan("t", 0, 0)] == [b"a", b"b", "ünï".encode()]


def test_produce_keys_and_headers_round_trip(broker: BrokerProcess, conn: Connection) -> None:
    b64 = base64.b64encode(b"\x00\xff").decode()
    status, body = _produce(broker, [{"topic": "t", "partition": 0, "records": [
        {"value": "v0", "key": "k0", "headers": [["h", "x"], ["bin", {"base64": b64}]]},
        {"value": {"base64": b64}, "key": {"base64": b64}},
        {"value": "v2", "key": None, "headers": []},
        "v3",
    ]}])
    assert status == 200, body
    expected = [
        ("k0", "v0", [["h", "x"], ["bin", {"base64": b64}]]),
        ({"base64": b64}, {"base64": b64}, []),
        (None, "v2", []),
        (None, "v3", []),
    ]
    status, got = _consume(broker, "t", 0, 0)  # from the broker's tail cache
    assert status == 200, got
    assert [(r["key"], r["value"], r["headers"]) for r in got["topic_partitions"][0]["records"]] == expected
    with broker_process(conn.config) as other:  # from storage
        status, got = _consume(other, "t", 0, 0)
        assert [(r["key"], r["value"], r["headers"]) for r in got["topic_partitions"][0]["records"]] == expected
    with Reader(conn) as rd:
        assert [(r.key, r.value, r.headers) for r in rd.scan("t", 0, 0)] == [
            (b"k0", b"v0", (("h", b"x"), ("bin", b"\x00\xff"))),
            (b"\x00\xff", b"\x00\xff", ()),
            (None, b"v2", ()),
            (None, b"v3", ()),
        ]


@pytest.mark.parametrize(("body", "field"), [
    (b"{not json", "body"),
    (b"[1, 2]", "body"),
    (b'{"topic_partitions": []}', "topic_partitions"),
    (b'{"topic_partitions": [{"topic": "t", "partition": 0}]}', "topic_partitions[0].records"),
    (b'{"topic_partitions": [{"topic": "t", "partition": "0", "records": ["x"]}]}', "topic_partitions[0].partition"),
    (b'{"topic_partitions": [{"topic": "no/slash", "partition": 0, "records": ["x"]}]}', "topic_partitions[0].topic"),
    (b'{"topic_partitions": [{"topic": "t", "partition": 0, "records": [{"base64": "@@"}]}]}',
     "topic_partitions[0].records[0].base64"),
    (b'{"topic_partitions": [{"topic": "t", "partition": 0, "records": ["x"], "sequence": 1}]}',
     "topic_partitions[0].sequence"),
    (b'{"topic_partitions": [{"topic": "t", "partition": 0, "records": ["x"]}], "extra": 1}', "extra"),
    (b'{"topic_partitions": [{"topic": "t", "partition": 0, "records": [{"key": "k"}]}]}',
     "topic_partitions[0].records[0].value"),
    (b'{"topic_partitions": [{"topic": "t", "partition": 0, "records": [{"value": "v", "ts": 1}]}]}',
     "topic_partitions[0].records[0].ts"),
    (b'{"topic_partitions": [{"topic": "t", "partition": 0, "records": [{"value": "v", "key": 7}]}]}',
     "topic_partitions[0].records[0].key"),
    (b'{"topic_partitions": [{"topic": "t", "partition": 0, "records": [{"value": "v", "headers": {"h": "x"}}]}]}',
     "topic_partitions[0].records[0].headers"),
    (b'{"topic_partitions": [{"topic": "t", "partition": 0, "records": [{"value": "v", "headers": [["h"]]}]}]}',
     "topic_partitions[0].records[0].headers[0]"),
    (b'{"topic_partitions": [{"topic": "t", "partition": 0, "records": [{"value": "v", "headers": [[1, "x"]]}]}]}',
     "topic_partitions[0].records[0].headers[0][0]"),
    (b'{"topic_partitions": [{"topic": "t", "partition": 0, "records": [{"value": "v", "headers": [["h", '
     b'{"base64": "@@"}]]}]}]}', "topic_partitions[0].records[0].headers[0][1].base64"),
])
def test_malformed_produce_is_400_with_field(
    shared_broker: BrokerProcess, shared_conn: Connection, body: bytes, field: str
) -> None:
    status, resp = shared_broker.request("POST", "/produce", raw=body)
    assert status == 400
    assert resp["field"] == field and resp["error"]
    assert _hwm(shared_conn, 0) == 0 and _wal_objects(shared_conn) == []


def test_status_paths(broker: BrokerProcess, conn: Connection) -> None:
    status, resp = broker.request("GET", "/nope")
    assert status == 404 and resp["error_type"] == "NotFound"
    status, resp = broker.request("GET", "/produce")
    assert status == 405 and resp["error"]
    status, resp = broker.post("/consume", {"topic_partitions": [{"topic": "t", "partition": 0}]})
    assert status == 400 and resp["field"] == "topic_partitions[0].fetch_offset"

    Topics(conn).fence("t", 3)
    status, resp = _produce(broker, [
        {"topic": "t", "partition": 0, "records": ["ok"]},
        {"topic": "missing", "partition": 0, "records": ["x"]},
        {"topic": "t", "partition": 3, "records": ["x"]},
        {"topic": "t", "partition": 9, "records": ["x"]},
    ])
    assert status == 409
    assert (resp["success_count"], resp["error_count"]) == (1, 3)
    assert [r.get("error_type") for r in resp["results"]] == [None, "UnknownTopic", "Fenced", "UnknownPartition"]
    assert resp["results"][0]["ok"] is True

    status, resp = broker.post("/consume", {"topic_partitions": [
        {"topic": "t", "partition": 0, "fetch_offset": 0},
        {"topic": "missing", "partition": 0, "fetch_offset": 0},
    ], "max_wait_ms": 0})
    assert status == 409
    ok, bad = resp["topic_partitions"]
    assert [r["value"] for r in ok["records"]] == ["ok"]
    assert bad["error_type"] == "UnknownTopic"

    status, doc = broker.request("GET", "/openapi.json")
    assert status == 200 and {"/produce", "/consume"} <= set(doc["paths"])
    assert broker.request("GET", "/health")[1]["status"] == "ok"
    assert broker.prometheus("llog_http_requests_total", route="/produce", status="409") is not None
    assert broker.metric("llog_produce_records_total") == 1


def test_producer_id_and_sequence_pass_through(broker: BrokerProcess) -> None:
    status, resp = _produce(broker, [
        {"topic": "t", "partition": 2, "records": ["i0"], "producer_id": "p-1", "sequence": 0}])
    assert status == 200, resp
    assert resp["results"][0]["start_offset"] == 0


def test_request_size_limit_is_413(config: LlogConfig, conn: Connection) -> None:
    with broker_process(config, "--max-request-bytes", "1000") as b:
        status, resp = _produce(b, [{"topic": "t", "partition": 0, "records": ["x" * 2000]}])
        assert status == 413 and resp["error_type"] == "RequestTooLarge"
        assert _produce(b, [{"topic": "t", "partition": 0, "records": ["small"]}])[0] == 200
    assert _hwm(conn, 0) == 1


def test_request_size_limit_from_the_environment_and_the_flag_over_it(config: LlogConfig, conn: Connection) -> None:
    big = [{"topic": "t", "partition": 0, "records": ["x" * 2000]}]
    with broker_process(config, LLOG_BROKER_MAX_REQUEST_BYTES="1000") as b:
        assert _produce(b, big)[0] == 413
    with broker_process(config, "--max-request-bytes", "100000", LLOG_BROKER_MAX_REQUEST_BYTES="1000") as b:
        assert _produce(b, big)[0] == 200
    assert _hwm(conn, 0) == 1


def test_bearer_token(config: LlogConfig, conn: Connection) -> None:
    with broker_process(config, LLOG_BROKER_TOKEN="s3cret") as b:
        tp = [{"topic": "t", "partition": 0, "records": ["x"]}]
        assert _produce(b, tp)[0] == 401
        status, resp = _produce(b, tp, headers={"authorization": "Bearer wrong"})
        assert status == 401 and resp["error"]
        assert _consume(b, "t", 0, 0, headers={"authorization": "Basic s3cret"})[0] == 401
        assert b.request("GET", "/metrics")[0] == 401
        assert b.request("GET", "/health")[0] == 200
        # An unknown path is 401 too without the token (no hint of which paths exist),
        # 404 with it; a trailing slash is redirected (307 keeps method and body).
        assert b.request("GET", "/nope")[0] == 401
        auth = {"authorization": "Bearer s3cret"}
        assert b.request("GET", "/nope", headers=auth)[0] == 404
        status, hdrs, _ = b.exchange("POST", "/produce/", {"topic_partitions": tp}, headers=auth)
        assert status == 307 and hdrs["location"].endswith("/produce")
        assert _hwm(conn, 0) == 0 and _wal_objects(conn) == []
        assert _produce(b, tp, headers={"authorization": "Bearer s3cret"})[0] == 200
    assert _hwm(conn, 0) == 1


def test_full_buffer_is_503(config: LlogConfig, conn: Connection) -> None:
    env = {"LLOG_BATCH_MAX_BUFFERED_BYTES": "100", "LLOG_BATCH_MAX_DELAY_MS": "600000"}
    with broker_process(config, "--send-timeout", "0.05", **env) as b:
        first: list[tuple[int, Any]] = []
        # Never flushed by delay or size: it holds the buffer until the broker drains at shutdown.
        holder = threading.Thread(
            target=lambda: first.append(_produce(b, [{"topic": "t", "partition": 0, "records": ["a" * 60]}]))
        )
        holder.start()
        while b.metric("llog_producer_queue_bytes") < 60:
            pass  # the first produce is buffered
        status, resp = _produce(b, [{"topic": "t", "partition": 1, "records": ["b" * 60]},
                                    {"topic": "t", "partition": 2, "records": ["c" * 60]}])
        assert status == 503
        assert [r["error_type"] for r in resp["results"]] == ["BackPressure", "BackPressure"]
    holder.join()
    assert first[0][0] == 200  # shutdown drained the accepted produce
    assert (_hwm(conn, 0), _hwm(conn, 1), _hwm(conn, 2)) == (1, 0, 0)


def test_the_put_budget_flags_hold_a_quiet_brokers_second_put(config: LlogConfig, conn: Connection) -> None:
    """``llog broker --put-rate 1 --put-burst 1``: the first produce spends the one
    token, the next waits for the next token (about a second) and is then stored; the
    broker's metrics say the budget held it."""
    with broker_process(config, "--put-rate", "1", "--put-burst", "1") as b:
        for i in range(2):
            status, resp = _produce(b, [{"topic": "t", "partition": 0, "records": [f"r{i}"]}])
            assert status == 200 and resp["results"][0]["start_offset"] == i, resp
        assert b.metric("llog_producer_flushes_total", reason="budget") == 1
        assert b.metric("llog_producer_put_budget_hold_seconds_count") == 1
    assert _hwm(conn, 0) == 2


def test_consume_long_poll_wakes_on_local_commit(broker: BrokerProcess) -> None:
    status, resp = _consume(broker, "t", 0, 0, max_wait_ms=0)
    assert status == 200 and resp["topic_partitions"][0]["records"] == []
    assert _consume(broker, "t", 0, 0, min_bytes=0, max_wait_ms=60_000)[0] == 200
    got: list[tuple[int, Any]] = []
    waiter = threading.Thread(target=lambda: got.append(_consume(broker, "t", 0, 0, max_wait_ms=60_000)))
    waiter.start()
    while broker.metric("llog_consume_waiting") < 1:
        pass
    assert _produce(broker, [{"topic": "t", "partition": 0, "records": ["wake"]}])[0] == 200
    waiter.join()
    assert [r["value"] for r in got[0][1]["topic_partitions"][0]["records"]] == ["wake"]


def test_tail_consumer_on_the_producing_broker_never_goes_to_storage(broker: BrokerProcess) -> None:
    """The etcd watch reports this broker's own commits too, sometimes before the
    commit listener has put the records in the tail cache: such events are left to the
    local commit, so a consumer at the tail is always served from memory. Each worker of
    a broker of two is a broker of its own, and any of them may take a request: each
    tracks the partition before the records come (its first consume does that)."""

    def consumed_by_every_worker() -> bool:
        assert _consume(broker, "t", 1, 0, max_wait_ms=0)[0] == 200  # tracked (and watched) from here
        samples = broker.request("GET", "/metrics")[1]
        workers = {s["labels"].get("worker", "") for s in samples.get("llog_broker_worker_up", [])} or {""}
        served = {s["labels"].get("worker", "") for s in samples["llog_http_requests_total"]
                  if s["labels"]["route"] == "/consume" and s["value"] > 0}
        return workers <= served

    wait_until(consumed_by_every_worker, 60, "a consume served by every worker of the broker")
    seen: list[str] = []
    done = threading.Event()

    def follow() -> None:
        offset = 0
        while len(seen) < 40:
            status, resp = _consume(broker, "t", 1, offset, max_wait_ms=10_000)
            assert status == 200, resp
            part = resp["topic_partitions"][0]
            seen.extend(r["value"] for r in part["records"])
            offset = part["next_offset"]
        done.set()

    follower = threading.Thread(target=follow)
    follower.start()
    for i in range(40):
        assert _produce(broker, [{"topic": "t", "partition": 1, "records": [f"r{i}"]}])[0] == 200
    follower.join(60)
    assert done.is_set() and seen == [f"r{i}" for i in range(40)]
    lookups: dict[str, float] = {}
    for sample in broker.request("GET", "/metrics")[1]["llog_tail_cache_lookups_total"]:  # summed over workers
        lookups[sample["labels"]["result"]] = lookups.get(sample["labels"]["result"], 0) + sample["value"]
    assert lookups.get("hit", 0) >= 1 and lookups.get("miss", 0) == 0 and lookups.get("file", 0) == 0


def test_two_brokers_sixteen_clients_eight_partitions(config: LlogConfig, conn: Connection) -> None:
    Topics(conn).create("shared", 8)
    with broker_process(config) as a, broker_process(config) as b:
        # A consumer parked at the tail of partition 5 on broker A...
        woke: list[tuple[int, Any]] = []
        waiter = threading.Thread(
            target=lambda: woke.append(_consume(a, "shared", 5, 0, max_wait_ms=60_000))
        )
        waiter.start()
        while a.metric("llog_consume_waiting") < 1:
            pass
        # ...wakes when broker B commits (etcd watch; A wrote nothing).
        assert _produce(b, [{"topic": "shared", "partition": 5, "records": ["from-b"]}])[0] == 200
        waiter.join()
        assert [r["value"] for r in woke[0][1]["topic_partitions"][0]["records"]] == ["from-b"]

        acked: dict[int, dict[int, str]] = {p: {} for p in range(8)}
        acked[5][0] = "from-b"
        lock = threading.Lock()
        failures: list[Any] = []

        def client(c: int) -> None:
            rng = random.Random(c)
            via = (a, b)[c % 2]
            for i in range(25):
                parts = rng.sample(range(8), rng.randint(1, 3))
                batch = {p: [f"c{c}-{i}-p{p}-{j}" for j in range(rng.randint(1, 4))] for p in parts}
                tps: list[dict[str, Any]] = [
                    {"topic": "shared", "partition": p, "records": recs} for p, recs in batch.items()]
                status, resp = _produce(via, tps)
                if status != 200:
                    failures.append(resp)
                    return
                with lock:
                    for (p, recs), res in zip(batch.items(), resp["results"], strict=True):
                        for j, value in enumerate(recs):
                            acked[p][res["start_offset"] + j] = value

        threads = [threading.Thread(target=client, args=(c,)) for c in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert failures == []

        for p in range(8):
            got: list[dict[str, Any]] = []
            offset = 0
            for reader in (a, b):  # both brokers serve the whole partition, in order
                got, offset = [], 0
                while offset < len(acked[p]):
                    # A long poll, not max_wait_ms=0: the reading broker learns a commit
                    # made through the other one from an etcd watch event, which may
                    # still be in flight; the poll answers as soon as it has a record.
                    status, resp = _consume(reader, "shared", p, offset, max_wait_ms=30_000)
                    assert status == 200
                    recs = resp["topic_partitions"][0]["records"]
                    assert recs, f"partition {p} stops at {offset} of {len(acked[p])}"
                    got.extend(recs)
                    offset = resp["topic_partitions"][0]["next_offset"]
                assert [r["offset"] for r in got] == list(range(len(acked[p])))
                assert [r["value"] for r in got] == [acked[p][o] for o in range(len(acked[p]))]
            assert _hwm(conn, p, "shared") == len(acked[p])
        assert a.metric("llog_tail_wakeups_total") > 0


def test_shared_tail_cache_dir_serves_other_brokers_commits(
    config: LlogConfig, conn: Connection, tmp_path: Any
) -> None:
    shared = {"LLOG_TAIL_CACHE_DIR": str(tmp_path / "tail")}
    with broker_process(config, **shared) as a, broker_process(config, **shared) as b:
        assert _consume(a, "t", 1, 0, max_wait_ms=0)[0] == 200  # A now tracks partition 1
        for i in range(3):
            status, resp = _produce(b, [{"topic": "t", "partition": 1, "records": [f"b{i}", {"base64": "/w=="}]}])
            assert status == 200, resp
        # B writes its files off the produce path, in commit order: wait for the third.
        files = tmp_path / "tail" / config.root_prefix
        wait_until(lambda: any(files.glob("*/t/1/4-2")), 30, "B's tail cache files")
        gets_before = a.metric("llog_s3_ops_total")
        status, resp = _consume(a, "t", 1, 0, max_wait_ms=0)
        assert status == 200
        recs = resp["topic_partitions"][0]["records"]
        assert [r["offset"] for r in recs] == list(range(6))
        assert [r["value"] for r in recs] == ["b0", {"base64": "/w=="}, "b1", {"base64": "/w=="},
                                             "b2", {"base64": "/w=="}]
        assert a.metric("llog_s3_ops_total") == gets_before  # served from B's files, not S3
        snap = a.request("GET", "/metrics")[1]["llog_tail_cache_lookups_total"]
        assert any(s["labels"] == {"result": "file"} and s["value"] >= 1 for s in snap)


def test_tail_cache_serves_contiguous_runs_and_evicts_oldest() -> None:
    from llog.broker.tailcache import TailCache
    from llog.codec import batch
    from llog.records import Record
    from llog.writer import AppendResult

    def put(cache: TailCache, start: int, values: list[bytes]) -> None:
        res = AppendResult("t", 0, start, start + len(values) - 1, len(values), "k", "d", "a")
        records = [Record(v) for v in values]
        cache.put(res, records, memoryview(batch.encode(records, default_timestamp=1)))

    cache = TailCache(max_bytes=10)
    put(cache, 0, [b"aa", b"bb"])
    put(cache, 2, [b"cc"])
    put(cache, 5, [b"ff"])  # offsets 3-4 were written by another broker
    got = cache.get("t", 0, 1, max_bytes=100)
    assert got is not None and [(r.offset, r.value) for r in got] == [(1, b"bb"), (2, b"cc")]
    assert cache.get("t", 0, 3, 100) is None
    one = cache.get("t", 0, 0, max_bytes=1)  # at least one record, then the byte limit
    assert one is not None and [r.value for r in one] == [b"aa"]
    put(cache, 6, [b"gg", b"hh"])  # 12 bytes > 10: the oldest append goes
    assert cache.get("t", 0, 0, 100) is None
    assert cache.nbytes <= 10
    rest = cache.get("t", 0, 5, 100)
    assert rest is not None and [r.offset for r in rest] == [5, 6, 7]
