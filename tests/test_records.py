"""The record types: a reader's fast-built ConsumedRecord is a ConsumedRecord like
any other (pure code, no servers)."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from llog.records import ConsumedRecord, new_consumed_record


def test_a_fast_built_record_is_an_ordinary_frozen_consumed_record() -> None:
    fast = new_consumed_record("t", 2, 7, 1_700_000_000_000, b"k", b"v", (("h", b"1"),))
    slow = ConsumedRecord("t", 2, 7, 1_700_000_000_000, b"k", b"v", (("h", b"1"),))
    assert type(fast) is ConsumedRecord
    assert fast == slow and hash(fast) == hash(slow) and repr(fast) == repr(slow)
    assert new_consumed_record("t", 2, 7, 0, None, b"v").headers == ()
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.offset = 8  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(fast)) == fast
    assert dataclasses.replace(fast, offset=8).offset == 8
    assert [f.name for f in dataclasses.fields(type(fast))] == [f.name for f in dataclasses.fields(ConsumedRecord)]
