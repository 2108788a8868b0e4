"""S3 clients over the process's botocore data loader (llog/store/s3.py): S3's models
parsed once per process, and, with ``warm_data_loader``, once before a fork for every
process forked after it (a broker's workers, the suite's forkserver)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import botocore.credentials
import pytest
from botocore.config import Config
from botocore.loaders import JSONFileLoader

from llog.store import s3


@pytest.fixture
def parsed(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The botocore data files parsed from now on, on a fresh loader (the process's
    own is put back afterwards)."""
    paths: list[str] = []
    real = JSONFileLoader.load_file

    def counting(self: JSONFileLoader, file_path: str) -> Any:
        paths.append(file_path)
        return real(self, file_path)

    monkeypatch.setattr(JSONFileLoader, "load_file", counting)
    s3._data_loader.cache_clear()
    yield paths
    s3._data_loader.cache_clear()


def test_a_client_after_warm_data_loader_parses_nothing(parsed: list[str]) -> None:
    s3.s3_client("http://127.0.0.1:9", "us-east-1", Config())
    assert any("s3" in p for p in parsed), parsed  # a fresh loader parses S3's model
    s3._data_loader.cache_clear()
    parsed.clear()
    s3.warm_data_loader()
    assert any("s3" in p for p in parsed), parsed
    parsed.clear()
    s3.s3_client("http://127.0.0.1:9", "eu-west-1", Config(retries={"mode": "standard"}))
    assert parsed == []
    # A child forked after the warm-up makes its client on the parent's parsed models.
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            s3.s3_client(None, None, Config())
            code = 0 if not parsed else 2
        finally:
            os._exit(code)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


def test_warm_data_loader_asks_no_credential_provider(monkeypatch: pytest.MonkeyPatch, parsed: list[str]) -> None:
    """It runs in a broker's parent, which connects to nothing: the standard chain
    could ask the instance metadata service and wait for it."""

    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("warm_data_loader looked for credentials")

    monkeypatch.setattr(botocore.credentials, "create_credential_resolver", refuse)
    s3.warm_data_loader()
    assert parsed
