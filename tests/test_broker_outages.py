"""Broker liveness and readiness, and what it answers while etcd or the object store
cannot be reached: 503 with ``Retry-After`` on every route (retry policies resend
those), 409 kept for real refusals. Real servers; the outages are a dead endpoint, a
closed port, and a private etcd stopped and restarted."""

from __future__ import annotations

import time
from typing import Any

import pytest

from llog.broker.readiness import Readiness
from llog.broker.statuses import RETRY_AFTER_S, error_status, request_status
from llog.config import LlogConfig
from llog.connection import Connection
from llog.errors import (
    AmbiguousCommit,
    BackPressure,
    CasConflict,
    CoordinationError,
    Fenced,
    ObjectNotFound,
    SequenceError,
    StoreError,
)
from llog.metrics import Metrics
from llog.reader import Reader
from llog.topic.admin import Topics
from llog.version import __version__
from tests.broker_harness import (  # noqa: F401 (the fixtures conn and broker)
    BrokerProcess,
    broker_on_topic_t,
    broker_process,
    conn_with_topic_t,
)
from tests.conftest import PrivateEtcd, wait_until

DEAD = "127.0.0.1:1"  # nothing listens on port 1: connections are refused at once
_PRODUCE = {"topic_partitions": [{"topic": "t", "partition": 0, "records": ["x"]}]}


def _hwm(conn: Connection, partition: int) -> int:
    with Reader(conn) as r:
        return r.high_watermark("t", partition)[1]


def _assert_unavailable(got: tuple[int, dict[str, str], Any], error_type: str) -> None:
    status, headers, body = got
    assert status == 503, body
    assert headers.get("retry-after") == str(RETRY_AFTER_S)
    types = [r["error_type"] for r in body.get("results", body.get("topic_partitions", [body]))]
    assert types and all(t == error_type for t in types), body


def test_health_reports_the_broker_and_ready_both_dependencies(broker: BrokerProcess) -> None:
    status, health = broker.request("GET", "/health")
    assert status == 200
    workers = {"worker", "workers"} if "workers" in health else set()  # llog broker --workers
    assert set(health) == {"status", "broker_id", "host", "port", "started_at_ms", "version"} | workers
    assert health["status"] == "ok" and health["broker_id"] and health["version"] == __version__
    assert (health["host"], health["port"]) == (broker.host, broker.port)
    assert 0 < health["started_at_ms"] <= time.time() * 1000

    status, ready = broker.request("GET", "/ready")
    assert status == 200, ready
    assert ready["status"] == "ready" and ready["broker_id"] == health["broker_id"]
    assert ready["checks"]["etcd"]["ok"] and ready["checks"]["object_store"]["ok"]


def test_readiness_result_is_reused_within_its_ttl(config: LlogConfig, conn: Connection) -> None:
    metrics = Metrics()
    ready = Readiness(config, conn.store, config.root_prefix, metrics, ttl_s=3600)
    try:
        def reads() -> tuple[float, float]:  # (etcd requests, S3 requests) so far
            snap = metrics.snapshot()
            etcd, s3 = (sum(float(str(x["value"])) for x in snap[name])
                        for name in ("llog_etcd_ops_total", "llog_s3_ops_total"))
            return etcd, s3

        assert ready.check()[0] and reads() == (1, 1)
        assert ready.check()[0] and reads() == (1, 1)  # cached: no second read
        ready.ttl_s = 0
        assert ready.check()[0] and reads() == (2, 2)
    finally:
        ready.close()


def test_two_brokers_have_different_ids(config: LlogConfig, conn: Connection) -> None:
    with broker_process(config) as a, broker_process(config) as b:
        assert a.request("GET", "/health")[1]["broker_id"] != b.request("GET", "/health")[1]["broker_id"]


def test_etcd_unreachable_is_503_with_retry_after_on_every_route(config: LlogConfig, conn: Connection) -> None:
    with broker_process(config, LLOG_ETCD_ENDPOINTS=DEAD, LLOG_ETCD_TIMEOUT_S="1") as b:
        assert b.request("GET", "/health")[0] == 200  # alive, only not ready
        status, headers, ready = b.exchange("GET", "/ready")
        assert status == 503 and headers["retry-after"] == str(RETRY_AFTER_S)
        assert ready["status"] == "unavailable"
        assert not ready["checks"]["etcd"]["ok"] and DEAD in ready["checks"]["etcd"]["error"]
        assert ready["checks"]["object_store"]["ok"]

        _assert_unavailable(b.exchange("POST", "/produce", _PRODUCE), "CoordinationError")
        _assert_unavailable(b.exchange("POST", "/consume", {
            "topic_partitions": [{"topic": "t", "partition": 0, "fetch_offset": 0}], "max_wait_ms": 0,
        }), "CoordinationError")
        _assert_unavailable(b.exchange("POST", "/consume", {
            "group": "g", "topic_partitions": [{"topic": "t", "partition": 0}], "max_wait_ms": 0,
        }), "CoordinationError")
        _assert_unavailable(b.exchange("POST", "/commit", {
            "group": "g", "offsets": [{"topic": "t", "partition": 0, "offset": 0}],
        }), "CoordinationError")
        _assert_unavailable(b.exchange("POST", "/commit", {
            "group": "g", "epoch": 1, "offsets": [{"topic": "t", "partition": 0, "offset": 0}],
        }), "CoordinationError")
        _assert_unavailable(b.exchange("GET", "/offsets?group=g"), "CoordinationError")
        _assert_unavailable(b.exchange("GET", "/brokers"), "CoordinationError")
    assert _hwm(conn, 0) == 0


def test_object_store_unreachable_is_503_and_nothing_is_committed(config: LlogConfig, conn: Connection) -> None:
    env = {"LLOG_S3_ENDPOINT_URL": f"http://{DEAD}", "LLOG_S3_MAX_ATTEMPTS": "1"}
    with broker_process(config, **env) as b:
        status, ready = b.request("GET", "/ready")
        assert status == 503 and ready["status"] == "unavailable"
        assert ready["checks"]["etcd"]["ok"] and not ready["checks"]["object_store"]["ok"]
        _assert_unavailable(b.exchange("POST", "/produce", _PRODUCE), "StoreError")
    assert _hwm(conn, 0) == 0


def test_etcd_stopped_then_restarted(config: LlogConfig, private_etcd: PrivateEtcd) -> None:
    cfg = private_etcd.config(config)
    with Connection(cfg) as c:
        Topics(c).create("t", 1)
    with broker_process(cfg, LLOG_ETCD_TIMEOUT_S="1") as b:
        assert b.post("/produce", _PRODUCE)[0] == 200
        assert b.request("GET", "/ready")[0] == 200

        private_etcd.server.stop()
        wait_until(lambda: b.request("GET", "/ready")[0] == 503, 30, "/ready to see etcd stopped")
        status, headers, body = b.exchange("POST", "/produce", _PRODUCE)
        # The commit was refused before it reached etcd, or its outcome is unknown:
        # either way a status retry policies act on, never a 409.
        assert status in (503, 504), body
        assert body["results"][0]["error_type"] in ("CoordinationError", "AmbiguousCommit")
        assert ("retry-after" in headers) == (status == 503)

        private_etcd.restart()
        wait_until(lambda: b.request("GET", "/ready")[0] == 200, 60, "/ready to see etcd back")
        wait_until(lambda: b.post("/produce", _PRODUCE)[0] == 200, 60, "produce to succeed again")


def test_conflicts_stay_409(broker: BrokerProcess, conn: Connection) -> None:
    Topics(conn).fence("t", 3)
    status, headers, body = broker.exchange("POST", "/produce", {"topic_partitions": [
        {"topic": "t", "partition": 3, "records": ["x"]}]})
    assert status == 409 and body["results"][0]["error_type"] == "Fenced"
    assert "retry-after" not in headers


@pytest.mark.parametrize(("errors", "total", "status"), [
    ([], 2, 200),
    ([CoordinationError("etcd down")], 1, 503),
    ([StoreError("S3 down"), BackPressure("full")], 2, 503),
    ([AmbiguousCommit("unknown"), CoordinationError("etcd down")], 2, 504),
    ([CoordinationError("etcd down")], 2, 409),  # the other partition was appended: no blind resend
    ([CoordinationError("etcd down"), Fenced("t", 0)], 2, 409),
    ([SequenceError("t", 0, "p", 1, 3)], 1, 409),
    ([ObjectNotFound("k")], 1, 409),
    ([CasConflict("x", 5)], 1, 409),
])
def test_request_status(errors: list[Any], total: int, status: int) -> None:
    assert request_status(errors, total) == status


def test_ambiguous_commit_is_not_a_plain_outage() -> None:
    assert error_status(AmbiguousCommit("unknown")) == 504
    assert error_status(CoordinationError("down")) == 503
