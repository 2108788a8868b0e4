"""Consumer groups and idempotent produce through the broker, over real HTTP against
``python -m llog broker`` child processes: ``POST /commit``, ``GET /offsets``, consume by
``group``, and ``producer_id``/``sequence`` retries (also across a broker restart)."""

from __future__ import annotations

import http.client
import json
from typing import Any

import jsonschema
import pytest

from llog.broker.openapi import standalone_schema
from llog.config import LlogConfig
from llog.connection import Connection
from llog.groups import Consumer, GroupOffsets
from llog.groups.epoch import bump_epoch
from llog.reader import Reader
from tests.broker_harness import (  # noqa: F401 (the fixtures conn, broker, shared_conn, shared_broker)
    BrokerProcess,
    broker_on_topic_t,
    broker_process,
    conn_with_topic_t,
    shared_broker_on_topic_t,
    shared_conn_with_topic_t,
)


def _produce(b: BrokerProcess, partition: int, records: list[str], **idem: Any) -> tuple[int, Any]:
    return b.post("/produce", {"topic_partitions": [
        {"topic": "t", "partition": partition, "records": records, **idem}]})


def _group_consume(b: BrokerProcess, group: str, partitions: list[int], **opts: Any) -> tuple[int, Any]:
    return b.post("/consume", {"group": group, "max_wait_ms": 0, "topic_partitions": [
        {"topic": "t", "partition": p} for p in partitions], **opts})


def _commit(b: BrokerProcess, group: str, offsets: dict[int, int], **opts: Any) -> tuple[int, Any]:
    return b.post("/commit", {"group": group, "offsets": [
        {"topic": "t", "partition": p, "offset": o} for p, o in offsets.items()], **opts})


def _committed(conn: Connection, group: str, partition: int) -> int | None:
    c = GroupOffsets(conn, group).get("t", partition)
    return None if c is None else c.offset


def _values(resp: Any, i: int = 0) -> list[str]:
    return [r["value"] for r in resp["topic_partitions"][i]["records"]]


def _scan(conn: Connection, partition: int) -> list[str]:
    with Reader(conn) as r:
        return [rec.value.decode() for rec in r.scan("t", partition, 0)]


def test_consume_by_group_resumes_from_commit_on_another_broker(
    config: LlogConfig, conn: Connection
) -> None:
    with broker_process(config) as a, broker_process(config) as b:
        assert _produce(a, 0, [f"r{i}" for i in range(10)])[0] == 200
        assert _produce(a, 1, ["x0", "x1"])[0] == 200

        status, resp = _group_consume(a, "g", [0], topic_partitions=[
            {"topic": "t", "partition": 0, "partition_max_bytes": 8}])
        assert status == 200, resp
        assert _values(resp) == ["r0", "r1", "r2", "r3"]  # no commit yet: earliest, 2 bytes each
        assert _committed(conn, "g", 0) is None  # the broker never commits on its own

        status, resp = _commit(a, "g", {0: resp["topic_partitions"][0]["next_offset"]})
        assert status == 200, resp
        assert resp["results"] == [{"topic": "t", "partition": 0, "ok": True, "offset": 4, "epoch": 0,
                                    "member": "", "updated_at_ms": resp["results"][0]["updated_at_ms"]}]
        assert (resp["success_count"], resp["error_count"]) == (1, 0)

        # Broker B resumes where A's client committed; partition 1 (no commit) per auto_offset_reset.
        status, resp = _group_consume(b, "g", [0, 1], auto_offset_reset="latest")
        assert status == 200, resp
        assert _values(resp, 0) == [f"r{i}" for i in range(4, 10)]
        p1 = resp["topic_partitions"][1]
        assert (p1["records"], p1["next_offset"], p1["high_watermark"]) == ([], 2, 2)
        status, resp = _group_consume(b, "g", [1])
        assert status == 200 and _values(resp) == ["x0", "x1"]  # earliest is the default

        # An explicit fetch_offset wins over the committed one.
        status, resp = b.post("/consume", {"group": "g", "max_wait_ms": 0, "topic_partitions": [
            {"topic": "t", "partition": 0, "fetch_offset": 8}]})
        assert status == 200 and _values(resp) == ["r8", "r9"]
        assert (_committed(conn, "g", 0), _committed(conn, "g", 1)) == (4, None)


def test_group_consume_long_polls_from_committed_offset(broker: BrokerProcess, conn: Connection) -> None:
    assert _produce(broker, 2, ["a", "b"])[0] == 200
    assert _commit(broker, "tail", {2: 2})[0] == 200
    status, resp = _group_consume(broker, "tail", [2], max_wait_ms=0)
    assert status == 200 and _values(resp) == [] and resp["topic_partitions"][0]["next_offset"] == 2
    # A wait that ends by a commit, not by max_wait_ms: the records are in the answer.
    conn_ = http.client.HTTPConnection(broker.host, broker.port, timeout=120)
    try:
        conn_.request("POST", "/consume", body=json.dumps({
            "group": "tail", "max_wait_ms": 60_000, "topic_partitions": [{"topic": "t", "partition": 2}]}))
        while broker.metric("llog_consume_waiting") < 1:
            pass
        assert _produce(broker, 2, ["c"])[0] == 200
        resp_ = conn_.getresponse()
        assert resp_.status == 200
        assert _values(json.loads(resp_.read())) == ["c"]
    finally:
        conn_.close()


def test_commit_rules_and_offsets_view(broker: BrokerProcess, conn: Connection) -> None:
    assert _produce(broker, 0, [f"r{i}" for i in range(10)])[0] == 200
    assert _commit(broker, "g", {0: 6})[0] == 200

    status, resp = _commit(broker, "g", {0: 3})
    assert status == 409 and resp["results"][0]["error_type"] == "BackwardsCommit", resp
    assert _committed(conn, "g", 0) == 6
    status, resp = _commit(broker, "g", {0: 11})  # past the partition's next offset (10)
    assert status == 409 and resp["results"][0]["error_type"] == "CommitOutOfRange", resp
    assert _committed(conn, "g", 0) == 6
    status, resp = _commit(broker, "g", {0: 3}, reset=True)
    assert status == 200, resp
    assert _committed(conn, "g", 0) == 3

    # Per-partition outcomes: one ok, one unknown partition, one unknown topic.
    status, resp = broker.post("/commit", {"group": "g", "offsets": [
        {"topic": "t", "partition": 0, "offset": 10},
        {"topic": "t", "partition": 9, "offset": 0},
        {"topic": "missing", "partition": 0, "offset": 0},
    ]})
    assert status == 409
    assert [r.get("error_type") for r in resp["results"]] == [None, "UnknownPartition", "UnknownTopic"]
    assert (resp["success_count"], resp["error_count"]) == (1, 2)
    assert _committed(conn, "g", 0) == 10

    assert _produce(broker, 0, ["r10", "r11"])[0] == 200
    status, view = broker.request("GET", "/offsets?group=g")
    assert status == 200, view
    assert view["group"] == "g" and view["members"] == [] and view["epoch"] is None
    assert view["partitions"] == [{"topic": "t", "partition": 0, "committed": 10, "log_start_offset": 0,
                                   "next_offset": 12, "lag": 2, "owner": None}]
    assert view["total_lag"] == 2
    # With a topic: its partitions without a commit are listed too (lag from the log start).
    status, view = broker.request("GET", "/offsets?group=g&topic=t")
    assert status == 200
    assert [(p["partition"], p["committed"], p["lag"]) for p in view["partitions"]] == [
        (0, 10, 2), (1, None, 0), (2, None, 0), (3, None, 0)]
    status, view = broker.request("GET", "/offsets?group=never-used")
    assert status == 200 and view["partitions"] == [] and view["total_lag"] == 0

    for path, code, field in [
        ("/offsets", 400, "group"),
        ("/offsets?group=bad/name", 400, "group"),
        ("/offsets?group=g&topic=no/slash", 400, "topic"),
        ("/offsets?group=g&group=h", 400, "group"),
        ("/offsets?group=g&extra=1", 400, "extra"),
        ("/offsets?group=g&topic=missing", 404, None),
    ]:
        status, resp = broker.request("GET", path)
        assert status == code and resp["error"] and resp.get("field") == field, (path, resp)
    assert broker.request("POST", "/offsets?group=g")[0] == 405

    # A partition named twice: which offset wins would be a guess, so neither does; the
    # others commit (JSON Schema cannot say "at most once", so this is no 400).
    status, resp = broker.post("/commit", {"group": "g", "offsets": [
        {"topic": "t", "partition": 0, "offset": 11},
        {"topic": "t", "partition": 1, "offset": 0},
        {"topic": "t", "partition": 0, "offset": 12},
    ]})
    assert status == 409, resp
    assert [(r["ok"], r.get("error_type")) for r in resp["results"]] == [
        (False, "InvalidRequest"), (True, None), (False, "InvalidRequest")]
    assert "t/0 appears more than once" in resp["results"][2]["error"]
    assert (_committed(conn, "g", 0), _committed(conn, "g", 1)) == (10, 0)
    assert broker.prometheus("llog_http_requests_total", route="/commit", status="409") == 4.0
    assert broker.prometheus("llog_http_requests_total", route="/offsets", status="404") == 1.0


def test_stale_epoch_and_unowned_member_cannot_move_the_offset(broker: BrokerProcess, conn: Connection) -> None:
    assert _produce(broker, 0, [f"r{i}" for i in range(5)])[0] == 200
    zombie = bump_epoch(conn, "ex", "first")
    assert _commit(broker, "ex", {0: 2}, epoch=zombie.epoch)[0] == 200
    fresh = bump_epoch(conn, "ex", "second")  # a new exclusive consumer starts: the first is a zombie

    status, resp = _commit(broker, "ex", {0: 4}, epoch=zombie.epoch)
    assert status == 409 and resp["results"][0]["error_type"] == "StaleEpoch", resp
    status, resp = _commit(broker, "ex", {0: 4}, epoch=fresh.epoch + 1)  # not an epoch that exists
    assert status == 409 and resp["results"][0]["error_type"] == "StaleEpoch", resp
    assert _committed(conn, "ex", 0) == 2
    status, resp = _commit(broker, "ex", {0: 4}, epoch=fresh.epoch)
    assert status == 200 and resp["results"][0]["epoch"] == fresh.epoch, resp
    status, view = broker.request("GET", "/offsets?group=ex")
    assert (view["epoch"], view["epoch_owner"]) == (fresh.epoch, "second")

    with Consumer(conn, "members", ["t"], member_id="m1") as member:
        assert member.assignment() == {("t", p) for p in range(4)}
        assert member.membership is not None
        lease = member.membership.lease
        status, resp = _commit(broker, "members", {0: 1}, member="m2", member_lease=lease)
        assert status == 409 and resp["results"][0]["error_type"] == "NotAssigned", resp
        # The right member id with another session's lease (one that expired) owns nothing.
        status, resp = _commit(broker, "members", {0: 1}, member="m1", member_lease=lease + 1)
        assert status == 409 and resp["results"][0]["error_type"] == "NotAssigned", resp
        assert _committed(conn, "members", 0) is None
        status, resp = _commit(broker, "members", {0: 1}, member="m1", member_lease=lease)
        assert status == 200 and resp["results"][0]["member"] == "m1", resp
        # Clients of the earlier API name the member alone: the id-only fence.
        status, resp = _commit(broker, "members", {0: 2}, member="m2")
        assert status == 409 and resp["results"][0]["error_type"] == "NotAssigned", resp
        status, resp = _commit(broker, "members", {0: 2}, member="m1")
        assert status == 200, resp
        status, view = broker.request("GET", "/offsets?group=members&topic=t")
        assert view["members"] == ["m1"] and {p["owner"] for p in view["partitions"]} == {"m1"}


@pytest.mark.parametrize(("body", "field"), [
    ({"offsets": [{"topic": "t", "partition": 0, "offset": 1}]}, "group"),
    ({"group": "a/b", "offsets": [{"topic": "t", "partition": 0, "offset": 1}]}, "group"),
    ({"group": "g", "offsets": []}, "offsets"),
    ({"group": "g", "offsets": [{"topic": "t", "partition": 0}]}, "offsets[0].offset"),
    ({"group": "g", "offsets": [{"topic": "t", "partition": 0, "offset": -1}]}, "offsets[0].offset"),
    ({"group": "g", "offsets": [{"topic": "t", "partition": 0, "offset": "1"}]}, "offsets[0].offset"),
    ({"group": "g", "offsets": [{"topic": "_groups", "partition": 0, "offset": 1}]}, "offsets[0].topic"),
    ({"group": "g", "offsets": [{"topic": "t", "partition": 0, "offset": 1, "x": 1}]}, "offsets[0].x"),
    ({"group": "g", "offsets": [{"topic": "t", "partition": 0, "offset": 1}], "reset": 1}, "reset"),
    ({"group": "g", "offsets": [{"topic": "t", "partition": 0, "offset": 1}], "epoch": 0}, "epoch"),
    ({"group": "g", "offsets": [{"topic": "t", "partition": 0, "offset": 1}], "member": ""}, "member"),
    ({"group": "g", "offsets": [{"topic": "t", "partition": 0, "offset": 1}], "member_lease": 5}, "member"),
    ({"group": "g", "offsets": [{"topic": "t", "partition": 0, "offset": 1}], "member": "m",
      "member_lease": 0}, "member_lease"),
    ({"group": "g", "offsets": [{"topic": "t", "partition": 0, "offset": 1}], "extra": 1}, "extra"),
])
def test_malformed_commit_is_400_with_field(
    shared_broker: BrokerProcess, shared_conn: Connection, body: dict[str, Any], field: str
) -> None:
    assert _produce(shared_broker, 0, ["a", "b"])[0] == 200
    status, resp = shared_broker.post("/commit", body)
    assert status == 400 and resp["field"] == field and resp["error"], resp
    assert GroupOffsets(shared_conn, "g").all() == []


@pytest.mark.parametrize(("body", "field"), [
    ({"topic_partitions": [{"topic": "t", "partition": 0}]}, "topic_partitions[0].fetch_offset"),
    ({"group": "g", "auto_offset_reset": "middle", "topic_partitions": [{"topic": "t", "partition": 0}]},
     "auto_offset_reset"),
    ({"auto_offset_reset": "latest", "topic_partitions": [{"topic": "t", "partition": 0, "fetch_offset": 0}]},
     "auto_offset_reset"),
    ({"group": "", "topic_partitions": [{"topic": "t", "partition": 0}]}, "group"),
])
def test_malformed_group_consume_is_400(shared_broker: BrokerProcess, body: dict[str, Any], field: str) -> None:
    status, resp = shared_broker.post("/consume", body)
    assert status == 400 and resp["field"] == field, resp


def test_group_consume_reports_unplaceable_partitions(broker: BrokerProcess) -> None:
    assert _produce(broker, 0, ["a"])[0] == 200
    status, resp = broker.post("/consume", {"group": "g", "max_wait_ms": 0, "topic_partitions": [
        {"topic": "t", "partition": 0}, {"topic": "missing", "partition": 0}, {"topic": "t", "partition": 7}]})
    assert status == 409
    ok, unknown, beyond = resp["topic_partitions"]
    assert [r["value"] for r in ok["records"]] == ["a"]
    assert (unknown["error_type"], beyond["error_type"]) == ("UnknownTopic", "UnknownPartition")


def test_idempotent_retry_returns_original_offsets_across_restart(config: LlogConfig, conn: Connection) -> None:
    idem = {"producer_id": "app-1", "sequence": 0}
    with broker_process(config) as a:
        assert _produce(a, 3, ["other"])[0] == 200
        status, first = _produce(a, 3, ["p0", "p1"], **idem)
        assert status == 200, first
        original = {k: first["results"][0][k] for k in ("start_offset", "end_offset", "count", "index_key")}
        assert (original["start_offset"], original["end_offset"]) == (1, 2)
        status, again = _produce(a, 3, ["p0", "p1"], **idem)
        assert status == 200
        assert {k: again["results"][0][k] for k in original} == original
    with broker_process(config) as b:  # a new process: the dedup state lives in etcd
        status, again = _produce(b, 3, ["p0", "p1"], **idem)
        assert status == 200
        assert {k: again["results"][0][k] for k in original} == original

        status, resp = _produce(b, 3, ["p5"], producer_id="app-1", sequence=5)
        assert status == 409
        assert resp["results"][0]["error_type"] == "SequenceError" and "expected 1" in resp["results"][0]["error"]
        status, resp = _produce(b, 3, ["p2"], producer_id="app-1", sequence=1)
        assert status == 200 and resp["results"][0]["start_offset"] == 3
    assert _scan(conn, 3) == ["other", "p0", "p1", "p2"]


def _send_and_drop_reply(b: BrokerProcess, body: dict[str, Any]) -> None:
    """A produce whose reply is lost: the request is sent whole, the connection closed
    unread. Whether it committed is unknown to the client, as after a timeout."""
    c = http.client.HTTPConnection(b.host, b.port, timeout=120)
    try:
        c.request("POST", "/produce", body=json.dumps(body), headers={"content-type": "application/json"})
    finally:
        c.close()


def test_retries_after_lost_replies_append_each_record_once(config: LlogConfig, conn: Connection) -> None:
    batches = 60
    expected: dict[int, list[str]] = {p: [] for p in range(4)}
    with broker_process(config) as b:
        for seq in range(batches):
            p = seq % 4
            recs = [f"s{seq}-{i}" for i in range(1 + seq % 3)]
            body = {"topic_partitions": [
                {"topic": "t", "partition": p, "records": recs, "producer_id": f"lossy-{p}", "sequence": seq // 4}]}
            _send_and_drop_reply(b, body)
            status, resp = b.post("/produce", body)  # the retry, maybe racing the original
            assert status == 200, resp
            res = resp["results"][0]
            assert (res["end_offset"] - res["start_offset"] + 1, res["start_offset"]) == (
                len(recs), len(expected[p]))
            expected[p].extend(recs)
    for p in range(4):
        assert _scan(conn, p) == expected[p]


def _validate(doc: dict[str, Any], instance: Any, schema: dict[str, Any]) -> None:
    jsonschema.Draft202012Validator(standalone_schema(doc, schema)).validate(instance)


def test_openapi_document_describes_the_group_routes(broker: BrokerProcess) -> None:
    status, doc = broker.request("GET", "/openapi.json")
    assert status == 200
    paths = doc["paths"]

    def check(method: str, path: str, body: Any = None) -> None:
        route = paths[path.split("?", 1)[0]][method.lower()]
        if body is not None:
            _validate(doc, body, route["requestBody"]["content"]["application/json"]["schema"])
        status, resp = broker.request(method, path, body)
        documented = route["responses"][str(status)]
        _validate(doc, resp, documented["content"]["application/json"]["schema"])

    assert _produce(broker, 0, ["a", "b"], producer_id="doc", sequence=0)[0] == 200
    check("POST", "/consume", {"group": "d", "auto_offset_reset": "earliest",
                               "topic_partitions": [{"topic": "t", "partition": 0}], "max_wait_ms": 0})
    check("POST", "/commit", {"group": "d", "offsets": [{"topic": "t", "partition": 0, "offset": 2}]})
    check("POST", "/commit", {"group": "d", "offsets": [{"topic": "t", "partition": 1, "offset": 9}], "reset": True})
    check("POST", "/commit", {"group": "d", "offsets": [{"topic": "t", "partition": 0, "offset": 2}], "epoch": 3,
                              "member": "m", "member_lease": 7})
    check("GET", "/offsets?group=d&topic=t")
    check("GET", "/offsets?group=d&topic=missing")
    check("GET", "/offsets?group=a/b")
    params = {p["name"]: p["required"] for p in paths["/offsets"]["get"]["parameters"]}
    assert params == {"group": True, "topic": False}
    # A body the document rejects is one the broker rejects.
    bad = {"group": "d", "offsets": [{"topic": "t", "partition": 0, "offset": 1}], "reset": "yes"}
    with pytest.raises(jsonschema.ValidationError):
        _validate(doc, bad, paths["/commit"]["post"]["requestBody"]["content"]["application/json"]["schema"])
    assert broker.post("/commit", bad)[0] == 400
