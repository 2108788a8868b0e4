"""atheris target: a partition's produce data through the broker's batch check.

Invariants, for any bytes: :func:`~llog.codec.kafka_body.check_batches` either refuses
them with a :class:`~llog.codec.kafka_body.KafkaBatchError` or accepts them, and then
the stored body decodes for every reader with the count the check gave, every record
within the record limit, and its content digest computes. Anything else (another
exception, a hang past ``-timeout``, memory past ``-rss_limit_mb``) is a finding.

Run: ``python -m tests.fuzz.kafka_batches -max_total_time=60 CORPUS_DIR [SEEDS_DIR]``
(tests/test_fuzz.py runs it with a budget and its seeds).
"""

from __future__ import annotations

import sys

import atheris
from crc32c import crc32c

with atheris.instrument_imports():
    from llog.codec import kafka_body, kafka_inflate, kafka_records  # noqa: F401
    from llog.codec.kafka_body import BatchLimits, KafkaBatchError, check_batches

LIMITS = BatchLimits(max_batch_bytes=1 << 20, max_record_bytes=1 << 16, max_inflated_bytes=1 << 20,
                     max_records=100_000, single_batch=True)


def resign(data: bytes) -> bytes:
    """``data`` with every batch's CRC-32C computed again, so mutations reach the
    records instead of stopping at the checksum."""
    out, pos = bytearray(data), 0
    while len(out) - pos >= 61:
        end = min(len(out), pos + 12 + max(int.from_bytes(out[pos + 8:pos + 12], "big", signed=True), 49))
        out[pos + 17:pos + 21] = crc32c(bytes(out[pos + 21:end])).to_bytes(4, "big")
        pos = end
    return bytes(out)


def one_input(raw: bytes) -> None:
    if not raw:
        return
    # The first byte chooses: the rest as it is (CRC and all), or signed again.
    data = resign(raw[1:]) if raw[0] & 1 else raw[1:]
    try:
        checked = check_batches(data, LIMITS)
    except KafkaBatchError:
        return
    body = kafka_body.encode_body(checked).tobytes()
    decoded = kafka_body.decode(body)
    assert len(decoded) == checked.count, (len(decoded), checked.count)
    for _ts, key, value, headers in decoded.rows():
        size = len(value or b"") + len(key or b"") + sum(len(k.encode()) + len(v) for k, v in headers)
        assert size <= LIMITS.max_record_bytes  # type: ignore[operator]
    kafka_body.content_digest(body)


if __name__ == "__main__":
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
