"""The writer's group check: its column-wise fast path must accept, reject and
normalize exactly like the per-record check it short-cuts (pure code, no servers)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llog.codec import batch
from llog.errors import InvalidRecord, RecordTooLarge
from llog.records import Record
from llog.writer import check_records, normalize_record

LIMIT = 64

timestamps = st.one_of(st.none(), st.integers(0, 2**63 - 1))
plain = st.builds(
    Record,
    value=st.binary(max_size=40),
    key=st.one_of(st.none(), st.binary(max_size=30)),
    timestamp=timestamps,
)
anything = st.one_of(
    plain,
    st.binary(max_size=40),
    st.builds(bytearray, st.binary(max_size=8)),
    st.builds(Record, value=st.binary(max_size=8), headers=st.just((("h", b"1"),))),
    st.builds(Record, value=st.binary(max_size=8), timestamp=st.sampled_from([-1, 2**63, True])),
    st.builds(Record, value=st.text(max_size=4)),  # type: ignore[arg-type]
    st.builds(Record, value=st.builds(bytearray, st.binary(max_size=8))),  # type: ignore[arg-type]
    st.just("not a record"),
)


def _per_record(records: list[Any]) -> tuple[tuple[Record, ...], batch.RecordColumns] | type[Exception]:
    try:
        recs = tuple(normalize_record("t", 0, r, LIMIT) for r in records)
    except (InvalidRecord, RecordTooLarge) as exc:
        return type(exc)
    return recs, batch.columns_of(recs)


def _checked(records: list[Any]) -> tuple[tuple[Record, ...], batch.RecordColumns] | type[Exception]:
    try:
        recs, cols, lengths = check_records("t", 0, records, LIMIT)
    except (InvalidRecord, RecordTooLarge) as exc:
        return type(exc)
    if lengths is not None:
        # The lengths handed to the encoder are the columns' own: same bytes either way.
        _, keys, values, _ = cols
        assert lengths == ([len(v) for v in values], [0 if k is None else len(k) for k in keys])
        assert batch.encode_columns(cols, 7, lengths) == batch.encode_columns(cols, 7)
    return recs, cols


@settings(max_examples=400, deadline=None)
@given(st.lists(plain, min_size=1, max_size=20))
def test_plain_records_take_the_column_path_and_match(records: list[Record]) -> None:
    assert _checked(records) == _per_record(records)


def test_the_column_path_measures_lengths_the_encoder_reuses() -> None:
    records = [Record(b"abc", key=b"k1"), Record(b"", key=None), Record(b"defg", key=b"")]
    assert check_records("t", 0, records, LIMIT)[2] == ([3, 0, 4], [2, 0, 0])
    assert check_records("t", 0, [b"raw bytes"], LIMIT)[2] is None  # per-record path


@settings(max_examples=400, deadline=None)
@given(st.lists(anything, min_size=1, max_size=12))
def test_any_mix_is_accepted_or_refused_like_one_by_one(records: list[Any]) -> None:
    assert _checked(records) == _per_record(records)


def test_the_size_limit_counts_value_and_key_of_one_record() -> None:
    # Large value and large key in different records: within the limit each.
    ok = [Record(b"v" * 60), Record(b"", key=b"k" * 60)]
    assert check_records("t", 0, ok, LIMIT)[0] == tuple(ok)
    with pytest.raises(RecordTooLarge):
        check_records("t", 0, [Record(b"v" * 40, key=b"k" * 40)], LIMIT)
