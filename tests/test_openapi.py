"""The broker's OpenAPI document is a valid OpenAPI 3 document, names every route with
the statuses every route shares, and agrees with the parsers on the shapes a body may
take (schemathesis checks the rest against a live broker: tests/test_fuzz.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate

from llog.broker.app import ROUTES
from llog.broker.openapi import openapi_document, standalone_schema
from llog.broker.routes import ENDPOINTS
from llog.broker.schemas import InvalidRequest, parse_commit, parse_consume, parse_produce


def test_openapi_document_is_valid_and_complete() -> None:
    doc = openapi_document()
    validate(doc)
    assert set(doc["paths"]) == set(ROUTES)


_RECORDS_CORPUS: list[tuple[object, bool]] = [
    ("v", True),
    ({"base64": "AAE="}, True),
    ({"value": "v"}, True),
    ({"value": {"base64": "AAE="}, "key": "k", "headers": [["h", "x"], ["b", {"base64": "AAE="}]]}, True),
    ({"value": "v", "key": None, "headers": []}, True),
    ({"key": "k"}, False),
    ({"value": "v", "timestamp": 1}, False),
    ({"value": 1}, False),
    ({"value": "v", "key": 7}, False),
    ({"value": "v", "headers": {"h": "x"}}, False),
    ({"value": "v", "headers": [["h"]]}, False),
    ({"value": "v", "headers": [["h", "x", "y"]]}, False),
    ({"value": "v", "headers": [["h", 1]]}, False),
    ({"base64": "AAE=", "value": "v"}, False),
    (3, False),
    (None, False),
]


@pytest.mark.parametrize(("record", "valid"), _RECORDS_CORPUS)
def test_produce_parser_and_schema_agree_on_records(record: object, valid: bool) -> None:
    body = {"topic_partitions": [{"topic": "t", "partition": 0, "records": [record]}]}
    assert _validator("/produce").is_valid(body) == valid
    if valid:
        parse_produce(json.dumps(body).encode())
    else:
        with pytest.raises(InvalidRequest):
            parse_produce(json.dumps(body).encode())


def _tp(**extra: object) -> dict[str, object]:
    return {"topic": "t", "partition": 0, **extra}


# (path, body, valid): whole request bodies, valid or not, for every JSON route.
_BODIES: list[tuple[str, object, bool]] = [
    ("/produce", {"topic_partitions": [_tp(records=["v"])]}, True),
    ("/produce", {"topic_partitions": [_tp(records=["v"], producer_id="p-1", sequence=0)]}, True),
    ("/produce", {"topic_partitions": [_tp(records=["v"]), _tp(partition=3, records=[{"value": "w"}])]}, True),
    ("/produce", {}, False),
    ("/produce", {"topic_partitions": []}, False),
    ("/produce", {"topic_partitions": [_tp(records=[])]}, False),
    ("/produce", {"topic_partitions": [_tp(records=["v"])], "extra": 1}, False),
    ("/produce", {"topic_partitions": [_tp(records=["v"], extra=1)]}, False),
    ("/produce", {"topic_partitions": [_tp(partition=-1, records=["v"])]}, False),
    ("/produce", {"topic_partitions": [_tp(partition="0", records=["v"])]}, False),
    ("/produce", {"topic_partitions": [_tp(partition=True, records=["v"])]}, False),
    ("/produce", {"topic_partitions": [_tp(partition=1.5, records=["v"])]}, False),
    ("/produce", {"topic_partitions": [{"topic": "bad name", "partition": 0, "records": ["v"]}]}, False),
    ("/produce", {"topic_partitions": [{"topic": "x" * 250, "partition": 0, "records": ["v"]}]}, False),
    ("/produce", {"topic_partitions": [{"partition": 0, "records": ["v"]}]}, False),
    ("/produce", {"topic_partitions": [_tp(records=["v"], producer_id="a b", sequence=0)]}, False),
    ("/produce", {"topic_partitions": [_tp(records=["v"], producer_id="p", sequence=-1)]}, False),
    ("/produce", {"topic_partitions": [_tp(records=[{"base64": "not base64!"}])]}, False),
    ("/produce", {"topic_partitions": "t"}, False),
    ("/produce", [], False),
    ("/consume", {"topic_partitions": [_tp(fetch_offset=0)]}, True),
    ("/consume", {"topic_partitions": [_tp(fetch_offset=5, partition_max_bytes=1)], "max_wait_ms": 0,
                  "min_bytes": 0, "max_bytes": 1}, True),
    ("/consume", {"topic_partitions": [_tp()], "group": "g", "auto_offset_reset": "latest"}, True),
    ("/consume", {"topic_partitions": [_tp(fetch_offset=-1)]}, False),
    ("/consume", {"topic_partitions": [_tp(fetch_offset=0, partition_max_bytes=0)]}, False),
    ("/consume", {"topic_partitions": [_tp(fetch_offset=0)], "max_wait_ms": 60_001}, False),
    ("/consume", {"topic_partitions": [_tp(fetch_offset=0)], "max_bytes": 0}, False),
    ("/consume", {"topic_partitions": [_tp(fetch_offset=0)], "group": "g", "auto_offset_reset": "middle"}, False),
    ("/consume", {"topic_partitions": [_tp(fetch_offset=0)], "group": "no spaces"}, False),
    ("/consume", {"topic_partitions": [_tp(fetch_offset=0)], "wait": 1}, False),
    ("/consume", {"topic_partitions": [_tp(fetch_offset="0")]}, False),
    ("/commit", {"group": "g", "offsets": [_tp(offset=3)]}, True),
    ("/commit", {"group": "g", "offsets": [_tp(offset=0)], "reset": True, "epoch": 2, "member": "m",
                 "member_lease": 7}, True),
    ("/commit", {"group": "g", "offsets": []}, False),
    ("/commit", {"offsets": [_tp(offset=3)]}, False),
    ("/commit", {"group": "g", "offsets": [_tp()]}, False),
    ("/commit", {"group": "g", "offsets": [_tp(offset=-3)]}, False),
    ("/commit", {"group": "g", "offsets": [_tp(offset=3)], "reset": "yes"}, False),
    ("/commit", {"group": "g", "offsets": [_tp(offset=3)], "epoch": 0}, False),
    ("/commit", {"group": "g", "offsets": [_tp(offset=3)], "member": ""}, False),
    ("/commit", {"group": "g", "offsets": [_tp(offset=3)], "member": "m" * 257}, False),
    ("/commit", {"group": "g", "offsets": [_tp(offset=3)], "member_lease": 0, "member": "m"}, False),
    # Whole numbers written with a fraction or an exponent are JSON Schema integers.
    ("/produce", {"topic_partitions": [_tp(partition=1.0, records=["v"], producer_id="p", sequence=2e0)]}, True),
    ("/consume", {"topic_partitions": [_tp(fetch_offset=5.0)], "max_wait_ms": 0.0}, True),
    ("/commit", {"group": "g", "offsets": [_tp(offset=3e2)], "epoch": 1.0}, True),
    ("/commit", {"group": "g", "offsets": [_tp(offset=3.5)]}, False),
    ("/commit", {"group": "g", "offsets": [_tp(offset=1e19)]}, False),
    ("/commit", {"group": "g", "offsets": [_tp(offset=1e300)]}, False),
    # base64 as the pattern has it: whole groups of four, "=" only as the last pads.
    ("/produce", {"topic_partitions": [_tp(records=[{"base64": ""}, {"base64": "AAE="}, {"base64": "AA=="}])]},
     True),
    ("/produce", {"topic_partitions": [_tp(records=[{"base64": "AAAA="}])]}, False),
    ("/produce", {"topic_partitions": [_tp(records=[{"base64": "AAE"}])]}, False),
    ("/produce", {"topic_partitions": [_tp(records=[{"base64": "A=A="}])]}, False),
    # Rules between fields, stated in the schema too.
    ("/produce", {"topic_partitions": [_tp(records=["v"], producer_id="p")]}, False),  # sequence goes with it
    ("/produce", {"topic_partitions": [_tp(records=["v"], sequence=1)]}, False),
    ("/consume", {"topic_partitions": [_tp()]}, False),  # fetch_offset required without a group
    ("/consume", {"topic_partitions": [_tp(fetch_offset=0)], "auto_offset_reset": "latest"}, False),  # needs group
    ("/commit", {"group": "g", "offsets": [_tp(offset=1)], "member_lease": 5}, False),  # member required
    # An explicit null is an absent field to the parser, and to the schema's rules.
    ("/produce", {"topic_partitions": [_tp(records=["v"], producer_id="p", sequence=None)]}, False),
    ("/produce", {"topic_partitions": [_tp(records=["v"], producer_id=None, sequence=1)]}, False),
    ("/produce", {"topic_partitions": [_tp(records=["v"], producer_id=None, sequence=None, producer_epoch=1)]},
     False),
    ("/produce", {"topic_partitions": [_tp(records=["v"], producer_epoch=1)]}, False),
    ("/produce", {"topic_partitions": [_tp(records=["v"], producer_id="p", sequence=0, producer_epoch=1)]}, True),
    ("/produce", {"topic_partitions": [_tp(records=["v"], producer_id=None, sequence=None, producer_epoch=None)]},
     True),
    ("/consume", {"topic_partitions": [_tp(fetch_offset=0)], "group": None, "auto_offset_reset": "latest"}, False),
    ("/consume", {"topic_partitions": [_tp()], "group": None}, False),
    ("/consume", {"topic_partitions": [_tp(fetch_offset=None)]}, False),
    ("/consume", {"topic_partitions": [_tp(fetch_offset=None)], "group": "g"}, True),
    ("/commit", {"group": "g", "offsets": [_tp(offset=1)], "member": None, "member_lease": 5}, False),
    ("/commit", {"group": "g", "offsets": [_tp(offset=1)], "member": None, "member_lease": None}, True),
    # A partition named twice passes both: the broker refuses it per partition (409).
    ("/commit", {"group": "g", "offsets": [_tp(offset=1), _tp(offset=2)]}, True),
    # Names the pattern admits but llog reserves.
    ("/produce", {"topic_partitions": [{"topic": "wal-shared", "partition": 0, "records": ["v"]}]}, False),
    ("/consume", {"topic_partitions": [_tp(fetch_offset=0)], "group": ".."}, False),
    # Numbers past int64.
    ("/produce", {"topic_partitions": [_tp(partition=2**63, records=["v"])]}, False),
    ("/commit", {"group": "g", "offsets": [_tp(offset=2**64)]}, False),
]

def _validator(path: str) -> Draft202012Validator:
    doc = openapi_document()
    schema: dict[str, Any] = doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
    return Draft202012Validator(standalone_schema(doc, schema))


def _parser_accepts(path: str, body: object) -> bool:
    try:
        {"/produce": parse_produce, "/consume": parse_consume, "/commit": parse_commit}[path](json.dumps(body).encode())
    except InvalidRequest:
        return False
    return True


@pytest.mark.parametrize(("path", "body", "valid"), _BODIES, ids=[f"{p}-{i}" for i, (p, _, _) in enumerate(_BODIES)])
def test_each_routes_parser_and_schema_agree_on_whole_bodies(path: str, body: object, valid: bool) -> None:
    assert _validator(path).is_valid(body) == valid
    assert _parser_accepts(path, body) == valid


def test_whole_numbers_keep_every_digit() -> None:
    # Through a float, 2^53 + 1 would come out as 2^53.
    req = parse_commit(b'{"group": "g", "offsets": [{"topic": "t", "partition": 0.0, "offset": 9007199254740993.0}]}')
    assert (req.offsets[0].partition, req.offsets[0].offset) == (0, 9007199254740993)
    # The decoder stops at the first 1.0; what follows it may not be JSON at all.
    with pytest.raises(InvalidRequest, match="not valid JSON"):
        parse_commit(b'{"group": "g", "offsets": [{"topic": "t", "partition": 1.0, "offset": 1}], ]')


def test_the_statuses_every_route_shares_are_documented() -> None:
    """The answers app.py gives before any handler: 401 on every route but the public
    ones (with the WWW-Authenticate header); and those the body reader gives."""
    doc = openapi_document()
    for e in ENDPOINTS:
        op = doc["paths"][e.path][e.method.lower()]
        if e.public:
            assert op["security"] == [] and "401" not in op["responses"], e.path
            continue
        assert "security" not in op and doc["security"], e.path
        assert "WWW-Authenticate" in op["responses"]["401"]["headers"], e.path
        if "requestBody" in op:
            assert {"400", "408", "413"} <= set(op["responses"]), e.path
        for status, response in op["responses"].items():
            if status == "503":
                assert response["headers"]["Retry-After"]["required"], e.path
