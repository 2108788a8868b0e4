"""Property-based fuzz of the broker's HTTP API: at least 500 malformed (or
unservable) requests to every route, each answered with a 4xx and a reason; the broker
stays up and neither etcd nor S3 holds anything from them."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from llog.config import LlogConfig
from llog.connection import Connection
from tests.broker_harness import broker_process

MAX_BODY = 4096
EXAMPLES = 600

_json_scalar = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False), st.text(max_size=20),
)
_json = st.recursive(
    _json_scalar,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12,
)
_topic = st.one_of(st.sampled_from(["fz", "fz.a", "Fz-9_x"]), st.text(max_size=12), _json)
_partition = st.one_of(st.integers(min_value=-3, max_value=5), _json)
_record = st.one_of(
    st.text(max_size=16),
    st.fixed_dictionaries({"base64": st.one_of(st.text(max_size=12), _json)}),
    _json,
)


def _maybe_drop(d: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """``d`` with some keys removed and maybe an unknown one added."""
    keys = sorted(d)
    return st.tuples(
        st.lists(st.sampled_from(keys), unique=True, max_size=len(keys)),
        st.one_of(st.none(), st.text(min_size=1, max_size=6)),
    ).map(lambda t: {
        **{k: v for k, v in d.items() if k not in t[0]}, **({} if t[1] is None else {t[1]: 1})
    })


_produce_tp = st.builds(
    lambda topic, partition, records, pid, seq: {"topic": topic, "partition": partition, "records": records,
                                                 **pid, **seq},
    _topic, _partition, st.one_of(st.lists(_record, max_size=4), _json),
    st.one_of(st.just({}), st.fixed_dictionaries({"producer_id": st.one_of(st.text(max_size=6), _json)})),
    st.one_of(st.just({}), st.fixed_dictionaries({"sequence": _partition})),
).flatmap(_maybe_drop)
_consume_tp = st.builds(
    lambda topic, partition, offset, pmax: {"topic": topic, "partition": partition, "fetch_offset": offset, **pmax},
    _topic, _partition, _partition,
    st.one_of(st.just({}), st.fixed_dictionaries({"partition_max_bytes": _partition})),
).flatmap(_maybe_drop)
_group = st.one_of(st.sampled_from(["g", "g.1", "G-x"]), st.text(max_size=10), _json)
_commit_entry = st.builds(
    lambda topic, partition, offset: {"topic": topic, "partition": partition, "offset": offset},
    _topic, _partition, _partition,
).flatmap(_maybe_drop)
_commit = st.one_of(
    st.builds(
        lambda group, offsets, extra: {"group": group, "offsets": offsets, **extra},
        _group, st.one_of(st.lists(_commit_entry, max_size=3), _json),
        st.dictionaries(st.sampled_from(["reset", "epoch", "member"]),
                        st.one_of(st.booleans(), st.integers(min_value=-2, max_value=3), _json), max_size=3),
    ).flatmap(_maybe_drop),
    _json,
)
_query_value = st.one_of(st.sampled_from(["g", "fz", ""]), st.text(max_size=10))
_offsets_query = st.lists(
    st.tuples(st.sampled_from(["group", "topic", "x"]), _query_value), max_size=3,
).map(lambda items: "&".join(f"{quote(k)}={quote(v)}" for k, v in items))
_produce = st.one_of(
    st.builds(lambda tps: {"topic_partitions": tps}, st.one_of(st.lists(_produce_tp, max_size=3), _json)),
    _json,
)
_consume = st.one_of(
    st.builds(
        lambda tps, extra: {"topic_partitions": tps, **extra},
        st.one_of(st.lists(_consume_tp, max_size=3), _json),
        st.dictionaries(st.sampled_from(["max_wait_ms", "min_bytes", "max_bytes", "group", "auto_offset_reset"]),
                        st.one_of(st.integers(min_value=-5, max_value=50), _group,
                                  st.sampled_from(["earliest", "latest"]), _json), max_size=3),
    ),
    _json,
)


@st.composite
def _requests(draw: st.DrawFn) -> tuple[str, str, bytes]:
    kind = draw(st.sampled_from(["produce", "consume", "commit", "offsets", "bytes", "big", "path"]))
    if kind == "produce":
        return "POST", "/produce", json.dumps(draw(_produce)).encode()
    if kind == "consume":
        return "POST", "/consume", json.dumps(draw(_consume)).encode()
    if kind == "commit":
        return "POST", "/commit", json.dumps(draw(_commit)).encode()
    if kind == "offsets":
        return "GET", "/offsets?" + draw(_offsets_query), b""
    path = draw(st.sampled_from(["/produce", "/consume", "/commit"]))
    if kind == "bytes":
        return "POST", path, draw(st.binary(max_size=64))
    if kind == "big":
        return "POST", path, b'{"topic_partitions": [' + b" " * MAX_BODY + b"]}"
    method = draw(st.sampled_from(["GET", "POST", "PUT", "DELETE"]))
    return method, "/" + draw(st.text(alphabet="abcdefghij/_-", max_size=10)), draw(st.binary(max_size=16))


def test_fuzzed_requests_get_4xx_and_write_nothing(config: LlogConfig) -> None:
    # No topic exists under this test's root: even a well-formed request cannot write.
    seen: dict[int, int] = {}
    by_route: dict[str, int] = {}
    with broker_process(config, "--max-request-bytes", str(MAX_BODY)) as broker:

        @settings(max_examples=EXAMPLES, deadline=None, database=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
        @given(_requests())
        # Well-formed but unservable (no such topic): a 409 on the new route every run.
        @example(("POST", "/commit", b'{"group": "g", "offsets": [{"topic": "fz", "partition": 0, "offset": 0}]}'))
        def check(req: tuple[str, str, bytes]) -> None:
            method, path, body = req
            if path in ("/health", "/ready", "/metrics", "/metrics/prometheus", "/openapi.json") and method == "GET":
                return  # the few valid read-only routes are not malformed requests
            status, resp = broker.request(method, path, raw=body, timeout=30)
            assert isinstance(resp, dict), resp
            if status == 200 and path.startswith("/offsets?"):
                assert resp["partitions"] == [], resp  # a well-formed look at a group with no state
                return
            seen[status] = seen.get(status, 0) + 1
            route = path.split("?", 1)[0]
            by_route[route] = by_route.get(route, 0) + 1
            assert 400 <= status < 500, (req, status, resp)
            if status == 409:
                parts = resp["topic_partitions"] if path == "/consume" else resp["results"]
                failed = [p for p in parts if not p["ok"]]
                assert failed and all(p["error"] and p["error_type"] for p in failed), resp
            else:
                assert resp["error"] and resp["error_type"], resp

        check()
        assert sum(seen.values()) >= 500, seen
        assert broker.request("GET", "/health")[1]["status"] == "ok"
        assert broker.proc.poll() is None
    with Connection(config) as conn:
        root = config.root_prefix
        assert conn.etcd.count(f"{root}/", f"{root}0") == 0
        assert list(conn.store.list(f"{root}/")) == []
    assert {400, 404, 409, 413} <= set(seen), seen
    assert all(by_route.get(r, 0) >= 50 for r in ("/produce", "/consume", "/commit", "/offsets")), by_route
