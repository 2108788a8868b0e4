"""Keyed partition choice: the same key lands on the same partition everywhere.

The hash is Kafka's default partitioner (murmur2, seed ``0x9747b28c``, sign bit
cleared, modulo the partition count), so a key routes to the same partition number
in llog as it would in a Kafka topic with the same partition count. It is part of the
protocol (``protocol/README.md``) and never changes between versions.
"""

from __future__ import annotations

from llog.errors import InvalidInput

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 over ``data`` as a signed 32-bit int (``Utils.murmur2``)."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    whole = length - (length % 4)
    for i in range(0, whole, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    rest = length % 4
    if rest == 3:
        h ^= data[whole + 2] << 16
    if rest >= 2:
        h ^= data[whole + 1] << 8
    if rest >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes | str, partitions: int) -> int:
    """The partition for ``key`` in a topic of ``partitions`` partitions."""
    if partitions <= 0:
        raise InvalidInput(f"partition count must be positive, got {partitions}")
    raw = key.encode() if isinstance(key, str) else bytes(key)
    return (murmur2(raw) & 0x7FFFFFFF) % partitions
