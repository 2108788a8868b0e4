"""The broker's OpenAPI document is a valid OpenAPI 3 document, names every route, and
agrees with the produce parser on the shapes a record may take."""

from __future__ import annotations

import json

import pytest
from openapi_schema_validator import OAS30Validator
from openapi_spec_validator import validate

from llog.broker.app import ROUTES
from llog.broker.schemas import InvalidRequest, openapi_document, parse_produce


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
    schema = openapi_document()["paths"]["/produce"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert OAS30Validator(schema).is_valid(body) == valid
    if valid:
        parse_produce(json.dumps(body).encode())
    else:
        with pytest.raises(InvalidRequest):
            parse_produce(json.dumps(body).encode())
