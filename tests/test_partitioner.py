"""The keyed partitioner matches Kafka's murmur2 (vectors from Kafka's UtilsTest)."""

from __future__ import annotations

import pytest

from llog.errors import InvalidInput
from llog.partitioner import murmur2, partition_for_key

KAFKA_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]


@pytest.mark.parametrize(("data", "expected"), KAFKA_VECTORS)
def test_murmur2_matches_kafka(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


def test_partition_is_stable_and_in_range() -> None:
    for n in (1, 3, 16):
        for key in ("user-1", b"user-2", "", "ünïcode"):
            p = partition_for_key(key, n)
            assert 0 <= p < n
            assert p == partition_for_key(key, n)
    assert partition_for_key("foobar", 16) == (-790332482 & 0x7FFFFFFF) % 16
    assert partition_for_key("k", 8) == partition_for_key(b"k", 8)


def test_partition_count_must_be_positive() -> None:
    with pytest.raises(InvalidInput):
        partition_for_key("k", 0)
