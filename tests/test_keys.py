"""The etcd and object key layout (pure; no servers)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llog.state.keys import OFFSET_DIGITS, KeyLayout, prefix_range_end

K = KeyLayout("root")


def test_topic_and_partition_keys() -> None:
    assert K.topic_meta("orders") == "root/orders/meta/topic"
    assert K.control("orders", 3) == "root/orders/partitions/3/meta/control"
    assert K.compaction_cursor("orders", 3) == "root/orders/partitions/3/meta/compaction-cursor"
    assert K.compaction("orders", 3) == "root/orders/partitions/3/meta/compaction"
    assert K.compactor_claim("orders", 3) == "root/orders/partitions/3/meta/compactor-claim"
    assert K.index_prefix("orders", 3) == "root/orders/partitions/3/index/"
    assert K.all_prefix() == "root/"
    assert K.topic_prefix("orders") == "root/orders/"


def test_object_keys() -> None:
    assert K.wal_blob("s1", "abc") == "root/wal-shared/s1/abc"
    assert K.wal_blob("s1", "abc").startswith(K.wal_prefix())
    assert K.compacted_blob("orders", 2, "s1", "xyz") == "root/orders/partitions/2/data/compacted/s1/xyz"
    assert K.compacted_blob("orders", 2, "s1", "xyz").startswith(K.compacted_prefix("orders", 2))
    assert K.session("s1") == "root/_sessions/s1"
    assert K.session_of(K.wal_blob("s1", "abc")) == "s1"
    assert K.session_of(K.compacted_blob("orders", 2, "s2", "xyz")) == "s2"
    # The layout before sessions: no session segment.
    assert K.session_of("root/wal-shared/abc") is None
    assert K.session_of("root/orders/partitions/2/data/compacted/xyz") is None


def test_default_root_is_llog() -> None:
    assert KeyLayout().control("t", 0) == "llog/t/partitions/0/meta/control"


def test_index_keys_are_zero_padded_to_twenty_digits() -> None:
    assert K.index("t", 0, 0) == "root/t/partitions/0/index/" + "0" * 20
    assert K.index("t", 0, 42) == "root/t/partitions/0/index/00000000000000000042"
    assert K.index("t", 0, 2**63 - 1).endswith("/09223372036854775807")
    for offset in (0, 7, 10**19, 2**64 - 1):
        suffix = K.index("t", 0, offset).rsplit("/", 1)[1]
        assert len(suffix) == OFFSET_DIGITS == 20


@given(st.integers(min_value=0, max_value=2**64 - 1))
def test_end_offset_of_inverts_index(offset: int) -> None:
    assert KeyLayout.end_offset_of(K.index("t", 5, offset)) == offset


@given(st.lists(st.integers(min_value=0, max_value=2**63 - 1), min_size=2, max_size=50, unique=True))
def test_index_key_order_is_numeric_order(offsets: list[int]) -> None:
    by_key = sorted(offsets, key=lambda o: K.index("t", 0, o).encode())
    assert by_key == sorted(offsets)


def test_index_key_order_around_digit_boundaries() -> None:
    offsets = [9, 10, 99, 100, 999, 1000, 10**18 - 1, 10**18]
    shuffled = offsets[:]
    random.Random(1).shuffle(shuffled)
    assert sorted(shuffled, key=lambda o: K.index("t", 0, o)) == offsets


def test_prefix_range_end() -> None:
    assert prefix_range_end("abc/") == "abc0"
    assert prefix_range_end("a") == "b"
    assert prefix_range_end("root/") == "root0"


@given(
    st.text(alphabet="abz09./_-", min_size=1, max_size=12),
    st.text(alphabet="abz09./_-\x7f", max_size=12),
)
def test_prefix_range_end_covers_exactly_the_prefix(prefix: str, rest: str) -> None:
    end = prefix_range_end(prefix).encode()
    key = (prefix + rest).encode()
    assert prefix.encode() <= key < end


@given(st.text(alphabet="abz09./_-", min_size=1, max_size=12), st.text(alphabet="abz09./_-", max_size=12))
def test_keys_outside_the_prefix_fall_outside_the_range(prefix: str, other: str) -> None:
    if other.startswith(prefix):
        return
    end = prefix_range_end(prefix).encode()
    assert not (prefix.encode() <= other.encode() < end)


def test_index_range_excludes_other_partitions_and_meta_keys() -> None:
    start, end = K.index_prefix("t", 1), K.index_range_end("t", 1)
    inside = [K.index("t", 1, 0), K.index("t", 1, 10**19)]
    outside = [
        K.index("t", 10, 5),
        K.index("t", 0, 5),
        K.index("t", 2, 0),
        K.control("t", 1),
        K.compaction_cursor("t", 1),
        K.index("t.x", 1, 5),
        K.index("t-x", 1, 5),
    ]
    for key in inside:
        assert start <= key < end
    for key in outside:
        assert not (start <= key < end), key


@pytest.mark.parametrize("topic", ["a", "a.b", "a-b", "ab", "a_b"])
def test_topic_prefix_range_holds_only_that_topic(topic: str) -> None:
    start = K.topic_prefix(topic)
    end = prefix_range_end(start)
    for other in ("a", "a.b", "a-b", "ab", "a_b"):
        key = K.control(other, 0)
        assert (start <= key < end) == (other == topic)
