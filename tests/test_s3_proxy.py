"""The nemesis S3 proxy: real boto3 / llog store and SDK in front, real S3 server
(moto) behind. Each fault is seen by the client as it should be, the counters match
what was injected, and the latency profiles draw what their docs state."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import urllib.request
from dataclasses import replace
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config

from llog.config import LlogConfig
from llog.connection import Connection
from llog.errors import ConfigError, LlogError, StoreError
from llog.loadtest import orchestrator
from llog.loadtest.scenario import parse_scenario
from llog.nemesis.control import NemesisControlError, proxy_state, set_faults, set_latency
from llog.nemesis.faults import DROP, ERROR_500, ERROR_503, SLOW, TIMEOUT, FaultPlan, FaultRule
from llog.nemesis.http import Framing, parse_head, read_body, request_framing, response_framing
from llog.nemesis.latency import PROFILES, LatencySampler, profile, quantile
from llog.nemesis.s3_proxy import S3Proxy, classify
from llog.reader import Reader
from llog.records import AppendGroup, Record
from llog.store.s3 import S3Store
from llog.topic.admin import Topics
from llog.writer import AppendFailure, Writer
from tests.conftest import TEST_BUCKET, ProxiedS3, Servers


def _store(url: str, prefix: str, *, retries: int = 5, read_timeout: float = 60.0) -> S3Store:
    """A store on ``url`` whose botocore client retries ``retries`` times (``max_attempts``
    counts retries: ``retries + 1`` attempts in all)."""
    client = boto3.session.Session().client(
        "s3", endpoint_url=url, region_name="us-east-1",
        config=Config(retries={"max_attempts": retries, "mode": "standard"}, read_timeout=read_timeout,
                      connect_timeout=5, s3={"addressing_style": "path"}),
    )
    return S3Store(TEST_BUCKET, prefix, client=client)


def _plan(*rules: FaultRule) -> FaultPlan:
    return FaultPlan(tuple(rules))


# -- latency profiles ----------------------------------------------------------------


@pytest.mark.parametrize("name", ["standard", "express"])
def test_profile_draws_have_the_stated_median_and_p99(name: str) -> None:
    prof = PROFILES[name]
    sampler = LatencySampler(prof, seed=42)
    draws = [sampler.draw_ms() for _ in range(50_000)]
    assert quantile(draws, 0.5) == pytest.approx(prof.median_ms, rel=0.03)
    assert quantile(draws, 0.99) == pytest.approx(prof.p99_ms, rel=0.06)
    again = LatencySampler(prof, seed=42)
    assert [again.draw_ms() for _ in range(100)] == draws[:100]  # a seed repeats the run


def test_profile_names() -> None:
    assert PROFILES["standard"].median_ms == 60 and PROFILES["standard"].p99_ms == 200
    assert PROFILES["express"].p99_ms < 10  # "single-digit millisecond"
    sampler = LatencySampler(profile("none"))
    assert sampler.draw_ms() == 0.0
    assert LatencySampler(profile("fixed:1.5")).draw_ms() == 1.5
    for bad in ("glacier", "fixed:", "fixed:-1", "fixed:x"):
        with pytest.raises(ConfigError):
            profile(bad)


def test_proxy_draws_one_delay_per_request_from_its_seed(s3_proxy: ProxiedS3, root_prefix: str) -> None:
    proxy = s3_proxy.proxy
    proxy.set_latency("express", seed=7)
    store = _store(proxy.url, root_prefix)
    for i in range(20):
        store.put(f"k{i}", b"v")
        assert store.get(f"k{i}") == b"v"
    store.close()
    expected = LatencySampler(PROFILES["express"], seed=7)
    assert proxy.sampler.draws() == [expected.draw_ms() for _ in range(40)]
    assert proxy.requests() == {"PUT": 20, "GET": 20}
    assert proxy.injected() == {}


# -- faults as the client sees them -----------------------------------------------------


def test_classify() -> None:
    assert classify("GET", "/bucket/a/b") == "GET"
    assert classify("GET", "/bucket?list-type=2&prefix=a") == "LIST"
    assert classify("PUT", "/bucket/k") == "PUT"
    assert classify("POST", "/bucket?delete") == "DELETE"
    assert classify("DELETE", "/bucket/k") == "DELETE"
    assert classify("HEAD", "/bucket/k") == "HEAD"


@pytest.mark.parametrize(("kind", "code"), [(ERROR_500, "InternalError"), (ERROR_503, "SlowDown")])
def test_5xx_is_retried_by_botocore_then_surfaces_as_store_error(
    s3_proxy: ProxiedS3, servers: Servers, root_prefix: str, kind: str, code: str
) -> None:
    proxy = s3_proxy.proxy
    store = _store(proxy.url, root_prefix, retries=10)
    direct = _store(servers.s3_endpoint, root_prefix)
    proxy.set_plan(_plan(FaultRule(kind, 0.5, ops=("PUT",))))
    for i in range(6):
        store.put(f"k{i}", f"v{i}".encode())  # every PUT ends well, after retries
    assert [direct.get(f"k{i}") for i in range(6)] == [f"v{i}".encode() for i in range(6)]
    injected = proxy.injected()[kind]
    assert injected > 0
    assert proxy.requests()["PUT"] == 6 + injected  # one extra attempt per injected error

    proxy.set_plan(_plan(FaultRule(kind, 1.0, ops=("GET",))))
    stubborn = _store(proxy.url, root_prefix, retries=2)
    with pytest.raises(StoreError, match=code) as err:
        stubborn.get("k0")
    assert f"{root_prefix}/k0" in str(err.value)
    assert proxy.injected()[kind] == injected + 3  # the first attempt and both retries refused
    for s in (store, direct, stubborn):
        s.close()


def test_head_error_has_no_body(s3_proxy: ProxiedS3, root_prefix: str) -> None:
    proxy = s3_proxy.proxy
    proxy.set_plan(_plan(FaultRule(ERROR_503, 1.0, ops=("HEAD",))))
    store = _store(proxy.url, root_prefix, retries=0)
    with pytest.raises(StoreError, match="503"):
        store.head("missing")
    store.close()
    assert proxy.injected() == {ERROR_503: 1}


def test_timeout_holds_the_request_until_the_client_gives_up(s3_proxy: ProxiedS3, root_prefix: str) -> None:
    proxy = s3_proxy.proxy
    store = _store(proxy.url, root_prefix, retries=2, read_timeout=0.5)
    store.put("k", b"v")
    proxy.set_plan(_plan(FaultRule(TIMEOUT, 1.0, ops=("GET",))))
    with pytest.raises(StoreError, match=r"[Rr]ead timeout"):
        store.get("k")
    assert proxy.injected() == {TIMEOUT: 3}
    proxy.set_plan(FaultPlan())
    assert store.get("k") == b"v"  # the held connections did not wedge the proxy
    store.close()


def test_clients_keep_their_connection_although_the_server_closes_each(
    s3_proxy: ProxiedS3, root_prefix: str
) -> None:
    """moto's server closes every connection; S3 does not, and neither does the proxy
    (a client reconnecting per request would pay what no S3 client pays)."""
    import http.client
    from urllib.parse import urlsplit

    url = urlsplit(s3_proxy.proxy.url)
    conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port)
    conn.request("PUT", f"/{TEST_BUCKET}/{root_prefix}/keep-alive", body=b"v")
    resp = conn.getresponse()
    resp.read()
    sock = conn.sock
    assert resp.status == 200 and resp.getheader("connection") is None
    conn.request("PUT", f"/{TEST_BUCKET}/{root_prefix}/keep-alive-2", body=b"w")
    resp = conn.getresponse()
    resp.read()
    assert resp.status == 200
    assert conn.sock is sock and sock is not None  # the same connection, not a new one
    conn.close()


def test_slow_response_is_delayed_then_answered(s3_proxy: ProxiedS3, root_prefix: str) -> None:
    proxy = s3_proxy.proxy
    store = _store(proxy.url, root_prefix)
    store.put("k", b"v" * 1000)
    proxy.set_plan(_plan(FaultRule(SLOW, 1.0, ops=("GET",), delay_ms=300)))
    assert store.get("k") == b"v" * 1000
    assert proxy.injected() == {SLOW: 1}
    added = proxy.metrics.registry.get_sample_value("llog_nemesis_added_latency_seconds_sum")
    assert added == pytest.approx(0.3)  # what the proxy added, not what a clock measured
    store.close()


def test_drop_mid_response_body_is_retried_then_surfaces_as_store_error(
    s3_proxy: ProxiedS3, root_prefix: str
) -> None:
    proxy = s3_proxy.proxy
    store = _store(proxy.url, root_prefix)
    data = bytes(range(256)) * 400
    store.put("k", data)
    # Half the GETs lose their connection mid-body: botocore does not retry a body read,
    # the store sends the GET again.
    proxy.set_plan(_plan(FaultRule(DROP, 0.5, ops=("GET",))))
    for _ in range(8):
        assert store.get_range("k", 0, 100_000) == data[:100_000]
        assert store.get("k") == data
    assert proxy.injected()[DROP] > 0
    # Every attempt cut off: a StoreError once the attempts are spent.
    proxy.set_plan(_plan(FaultRule(DROP, 1.0, ops=("GET",))))
    with pytest.raises(StoreError, match="range GET"):
        store.get_range("k", 0, 100_000)  # headers and half the body, then the connection closes
    proxy.set_plan(FaultPlan())
    assert store.get_range("k", 0, 256) == bytes(range(256))
    store.close()


def test_drop_mid_request_body_is_retried(s3_proxy: ProxiedS3, servers: Servers, root_prefix: str) -> None:
    proxy = s3_proxy.proxy
    store = _store(proxy.url, root_prefix, retries=10)
    direct = _store(servers.s3_endpoint, root_prefix)
    # PUTs lose their connection halfway through the body; HEAD and DELETE (no body)
    # lose it after upstream applied them, with no answer.
    proxy.set_plan(_plan(FaultRule(DROP, 0.4, ops=("PUT", "HEAD", "DELETE"))))
    payload = b"x" * 200_000
    for i in range(5):
        store.put(f"k{i}", payload)
        assert store.head(f"k{i}") is not None
    assert store.delete([f"k{i}" for i in range(4)]) == 4
    proxy.set_plan(FaultPlan())
    assert [direct.head(f"k{i}") is not None for i in range(5)] == [False] * 4 + [True]
    assert direct.get("k4") == payload
    injected = proxy.injected()[DROP]
    assert injected > 0
    reqs = proxy.requests()
    assert reqs["PUT"] + reqs["HEAD"] + reqs["DELETE"] == 5 + 5 + 1 + injected
    for s in (store, direct):
        s.close()


def test_large_put_with_expect_continue(s3_proxy: ProxiedS3, servers: Servers, root_prefix: str) -> None:
    """Bodies of 2 MiB and more go with ``Expect: 100-continue``: the proxy answers it,
    or refuses the request before the body, like S3."""
    proxy = s3_proxy.proxy
    store = _store(proxy.url, root_prefix, retries=10)
    big = bytes(range(256)) * (9 * 1024)  # 2.25 MiB
    store.put("big", big)
    proxy.set_plan(_plan(FaultRule(ERROR_503, 0.5, ops=("PUT",))))
    store.put("big2", big)
    direct = _store(servers.s3_endpoint, root_prefix)
    assert direct.get("big") == big and direct.get("big2") == big
    for s in (store, direct):
        s.close()


# -- control API -------------------------------------------------------------------------


def test_control_api_over_http(s3_proxy: ProxiedS3, root_prefix: str) -> None:
    url = s3_proxy.proxy.url
    plan = _plan(FaultRule(ERROR_500, 1.0, ops=("LIST",)), FaultRule(SLOW, 1.0, ops=("PUT",), delay_ms=1))
    state = set_faults(url, plan)
    assert FaultPlan.from_json(state["faults"]) == plan
    assert set_latency(url, "fixed:2", seed=3)["latency"]["profile"] == "fixed:2"
    store = _store(url, root_prefix, retries=0)
    store.put("k", b"v")
    with pytest.raises(StoreError, match="InternalError"):
        list(store.list("a/"))
    store.close()
    state = proxy_state(url)
    assert state["injected"] == {ERROR_500: 1, SLOW: 1}
    assert state["requests"] == {"PUT": 1, "LIST": 1}
    assert state["latency"]["draws"] == 2
    with urllib.request.urlopen(f"{url}/_nemesis/metrics") as resp:
        text = resp.read().decode()
    assert 'llog_nemesis_faults_injected_total{kind="error_500",op="LIST"} 1.0' in text
    assert 'llog_nemesis_requests_total{op="PUT"} 1.0' in text
    with pytest.raises(NemesisControlError, match="400"):
        _put_raw(url, {"rules": [{"kind": "x", "probability": 1}]})
    with pytest.raises(NemesisControlError):
        set_latency(url, "glacier")
    with pytest.raises(ConfigError):
        FaultRule(ERROR_500, 1.5)


def _put_raw(url: str, doc: Any) -> None:
    req = urllib.request.Request(f"{url}/_nemesis/faults", data=json.dumps(doc).encode(), method="PUT")
    try:
        urllib.request.urlopen(req, timeout=10).close()
    except OSError as exc:
        raise NemesisControlError(str(exc)) from exc


# -- the SDK end to end ---------------------------------------------------------------------


def test_writer_and_reader_through_faults(s3_proxy: ProxiedS3) -> None:
    """Faults at a moderate rate on every path botocore retries: every acknowledged
    record reads back, with the faults on."""
    proxy = s3_proxy.proxy
    cfg = replace(s3_proxy.config, s3_max_attempts=10)
    proxy.set_latency("express", seed=1)
    proxy.set_plan(_plan(
        FaultRule(ERROR_500, 0.08),
        FaultRule(ERROR_503, 0.08),
        FaultRule(SLOW, 0.05, delay_ms=20),
        FaultRule(DROP, 0.1),  # GETs too: the store sends a GET whose body was cut off again
    ))
    acked: dict[tuple[str, int], dict[int, bytes]] = {}
    failed = 0
    with Connection(cfg) as conn:
        Topics(conn).create("nem", 3)
        with Writer(conn) as w:
            for i in range(30):
                groups = [AppendGroup("nem", p, [Record(f"r{i}-{p}-{j}".encode()) for j in range(3)])
                          for p in range(3)]
                try:
                    outcomes = w.append_shared(groups)
                except LlogError:
                    failed += 1
                    continue
                for g, out in zip(groups, outcomes, strict=True):
                    if isinstance(out, AppendFailure):
                        failed += 1
                        continue
                    got = acked.setdefault(("nem", g.partition), {})
                    for off, rec in zip(range(out.start_offset, out.end_offset + 1), g.records, strict=True):
                        assert isinstance(rec, Record)
                        got[off] = rec.value
        with Reader(conn) as r:
            for (topic, p), want in acked.items():
                read = {rec.offset: rec.value for rec in r.scan(topic, p)}
                assert {o: read.get(o) for o in want} == want
    injected = proxy.injected()
    assert sum(len(v) for v in acked.values()) >= 3 * 3 * 25  # botocore's retries absorb nearly all
    assert set(injected) == {ERROR_500, ERROR_503, SLOW, DROP}, injected
    samples = [s for m in proxy.metrics.registry.collect() if m.name == "llog_nemesis_faults_injected"
               for s in m.samples if s.name.endswith("_total")]
    assert {k: sum(s.value for s in samples if s.labels["kind"] == k) for k in injected} == injected


def test_failed_list_is_a_store_error(s3_proxy: ProxiedS3, root_prefix: str) -> None:
    """A LIST that fails after botocore's retries raises StoreError naming the prefix
    (it raised InvalidInput: the error path checked the prefix as an object key)."""
    proxy = s3_proxy.proxy
    proxy.set_plan(_plan(FaultRule(ERROR_503, 1.0, ops=("LIST",))))
    store = _store(proxy.url, root_prefix, retries=0)
    with pytest.raises(StoreError, match=f"LIST of s3://{TEST_BUCKET}/{root_prefix}/data/"):
        list(store.list("data/"))
    store.close()


def test_dev_up_with_s3_latency_points_clients_at_the_proxy(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "llog", "dev", "up", "--s3-latency", "fixed:1", "--no-broker",
         "--dir", str(tmp_path / "stack")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        lines: list[str] = []
        while not lines or not lines[-1].startswith("# S3 proxy: "):
            line = proc.stdout.readline()
            assert line, f"dev up ended early: {proc.stderr.read() if proc.stderr else ''}"
            lines.append(line.strip())
        exports = dict(x[len("export "):].split("=", 1) for x in lines if x.startswith("export "))
        proxy_url = lines[-1].split()[3]
        assert exports["LLOG_S3_ENDPOINT_URL"] == proxy_url
        with Connection(LlogConfig.from_env(exports)) as conn:
            Topics(conn).create("devp", 1)
            with Writer(conn) as w:
                w.append("devp", 0, [b"a", b"b"])
            with Reader(conn) as r:
                assert [rec.value for rec in r.scan("devp", 0)] == [b"a", b"b"]
        state = proxy_state(proxy_url)
        assert state["latency"]["profile"] == "fixed:1"
        assert state["requests"]["PUT"] >= 1 and state["requests"]["GET"] >= 1
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    with pytest.raises(NemesisControlError):
        proxy_state(proxy_url)  # the proxy stopped with the stack


def test_scenario_s3_section() -> None:
    base = {"name": "x", "duration_s": 1, "topics": [{"name": "t", "partitions": 1}]}
    s = parse_scenario({**base, "s3": {"profile": "standard",
                                       "faults": [{"kind": "error_503", "probability": 0.1, "ops": ["put"]}]}})
    assert s.s3.enabled and s.s3.faults == (FaultRule(ERROR_503, 0.1, ops=("PUT",)),)
    assert not parse_scenario(base).s3.enabled
    with pytest.raises(ConfigError, match="glacier"):
        parse_scenario({**base, "s3": {"profile": "glacier"}})
    with pytest.raises(ConfigError, match="store"):
        parse_scenario({**base, "cluster": {"store": "file"}, "s3": {"proxy": True}})
    with pytest.raises(ConfigError, match="colour"):
        parse_scenario({**base, "s3": {"colour": 1}})


@pytest.mark.timeout(180)
def test_loadtest_through_the_proxy_reports_faults_by_kind(tmp_path: Path) -> None:
    scenario = parse_scenario({
        "name": "proxied", "duration_s": 4, "seed": 3, "topics": [{"name": "lt", "partitions": 2}],
        "cluster": {"brokers": 1, "compactor": False},
        "load": {"processes": 1, "threads": 1, "rate": 200, "owners": 1, "drain_s": 10},
        "s3": {"profile": "express", "faults": [{"kind": "error_503", "probability": 0.2, "ops": ["PUT"]}]},
    })
    run_dir, summary = orchestrator.run(scenario, tmp_path)
    v = summary["verdict"]
    assert (v["lost"], v["duplicated"]) == (0, 0) and v["all_acked_verified"] and v["acked"] > 0
    proxy = summary["s3_proxy"]
    assert proxy["injected"]["error_503"] > 0 and proxy["requests"]["PUT"] > proxy["injected"]["error_503"]
    assert proxy["latency"]["profile"] == "express" and proxy["latency"]["draws"] > 0
    assert "s3-proxy" in json.loads((run_dir / "layout.json").read_text())


def test_body_framing_copies_chunked_and_close_delimited_bodies_verbatim() -> None:
    async def body(framing: Framing, raw: bytes) -> tuple[bytes, bytes]:
        reader = asyncio.StreamReader()
        reader.feed_data(raw + b"NEXT")
        reader.feed_eof()
        got = await read_body(framing, reader)
        return got, await reader.read()

    chunked = b"5;ext=1\r\nhello\r\n3\r\n, w\r\n0\r\nx-amz-checksum-crc32: AAAAAA==\r\n\r\n"
    head = parse_head(b"PUT /b/k HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n")
    assert asyncio.run(body(request_framing(head), chunked)) == (chunked, b"NEXT")
    resp = parse_head(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n")
    assert response_framing(resp, "GET") == Framing("close")
    assert asyncio.run(body(Framing("close"), b"all of it")) == (b"all of itNEXT", b"")
    assert response_framing(parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n"), "HEAD").empty


def test_a_taken_port_is_a_clear_error(s3_proxy: ProxiedS3, servers: Servers) -> None:
    with pytest.raises(ConfigError, match="did not start"):
        S3Proxy(servers.s3_endpoint, port=s3_proxy.proxy.port).start()
