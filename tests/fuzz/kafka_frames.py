"""atheris target: a Kafka request frame as the listener reads it, after the size.

The listener decodes the header and the request (kafka-python's codecs) and closes the
connection on any exception; a Produce's partition data then goes through the batch
check. Invariants, for any bytes: decoding finishes (within ``-timeout``, memory
within ``-rss_limit_mb``: a frame that claims huge arrays must not allocate them), and
the batch check raises nothing but :class:`~llog.codec.kafka_body.KafkaBatchError`.

Run: ``python -m tests.fuzz.kafka_frames -max_total_time=60 CORPUS_DIR [SEEDS_DIR]``.
"""

from __future__ import annotations

import struct
import sys

import atheris

# The parsers are instrumented, not the broker the API table imports with them.
with atheris.instrument_imports(include=["kafka.protocol", "llog.codec"]):
    import kafka.protocol.admin
    import kafka.protocol.consumer
    import kafka.protocol.metadata
    import kafka.protocol.producer
    import kafka.protocol.sasl  # noqa: F401

    from llog.codec.kafka_body import BatchLimits, KafkaBatchError, check_batches
import contextlib

from llog.kafka.apis import API_BY_KEY

LIMITS = BatchLimits(max_batch_bytes=1 << 20, max_record_bytes=1 << 16, max_inflated_bytes=1 << 20,
                     max_records=100_000, single_batch=True)


def one_input(frame: bytes) -> None:
    if len(frame) < 8:
        return
    api_key, version, _correlation_id = struct.unpack_from(">hhi", frame, 0)
    api = API_BY_KEY.get(api_key)
    if api is None or not api.min_version <= version <= api.max_version:
        return
    try:
        request = api.request.decode(frame, version=version, header=True)
    except Exception:  # the listener closes the connection: fine, if it came quickly
        return
    for topic in getattr(request, "topic_data", None) or []:
        for pd in getattr(topic, "partition_data", None) or []:
            if pd.records:
                with contextlib.suppress(KafkaBatchError):
                    check_batches(pd.records, LIMITS)


if __name__ == "__main__":
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
