"""The broker's OpenAPI document is a valid OpenAPI 3 document and names every route."""

from __future__ import annotations

from openapi_spec_validator import validate

from llog.broker.app import ROUTES
from llog.broker.schemas import openapi_document


def test_openapi_document_is_valid_and_complete() -> None:
    doc = openapi_document()
    validate(doc)
    assert set(doc["paths"]) == set(ROUTES)
