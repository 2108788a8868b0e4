"""Checking produced record batches off the event loop.

A batch is stored only after every record in it has been decompressed (within
``kafka_max_batch_inflated_bytes``) and parsed (:func:`~llog.codec.kafka_body.check_batches`):
work that grows with what a client sends, not with what it pays for. So it runs on a
few threads of its own, never on the event loop that answers every other client,
``/health`` and group heartbeats; and each connection has at most one batch being
checked at a time (the listener reads a connection's next request only once its
produce has been handed on), so one client's batches queue behind each other, not in
front of everyone's. A request's partitions are checked in one hop; a request of few
uncompressed records, which costs less than the hop to a thread, in place.
"""

from __future__ import annotations

import asyncio
import struct
from concurrent.futures import ThreadPoolExecutor

from llog.codec.kafka_body import BATCH_HEADER_SIZE, BatchLimits, KafkaBatchError, check_batches
from llog.config import LlogConfig
from llog.records import KafkaBatches

#: A request whose batches are uncompressed and hold this many records in all is
#: checked on the event loop: under half a millisecond column by column, about two
#: record by record, less than the hop to a thread costs the loop and the request.
INLINE_RECORDS = 2048
_COMPRESSION_AT = 22  # the low byte of a batch's attributes
_LENGTH = struct.Struct(">i")


class BatchChecker:
    """Checks one partition's produce data against the broker's limits; :meth:`close`
    stops its threads."""

    def __init__(self, config: LlogConfig) -> None:
        self.limits = BatchLimits(
            max_batch_bytes=config.max_record_bytes,
            max_record_bytes=config.max_record_bytes,
            max_inflated_bytes=inflate_cap(config),
            max_records=config.kafka_max_batch_records,
            single_batch=True,
        )
        self._pool = ThreadPoolExecutor(config.kafka_check_threads, thread_name_prefix="llog-kafka-check")

    async def check_all(self, datas: list[bytes]) -> list[KafkaBatches | KafkaBatchError]:
        """Each partition's data of one produce request checked (:func:`check_batches`):
        its batches, or the error that refuses them; in place when every one is small
        and uncompressed, else all of them in one hop to a check thread."""
        if sum(_inline_records(d) for d in datas) <= INLINE_RECORDS:
            return self._check_each(datas)
        return await asyncio.get_running_loop().run_in_executor(self._pool, self._check_each, datas)

    def _check_each(self, datas: list[bytes]) -> list[KafkaBatches | KafkaBatchError]:
        out: list[KafkaBatches | KafkaBatchError] = []
        for data in datas:
            try:
                out.append(check_batches(data, self.limits))
            except KafkaBatchError as exc:
                # Kept until the answer is built: without its traceback and context,
                # whose frames hold the request's data and up to a cap of inflated
                # records (a reference cycle only a full collection would free).
                exc.__traceback__ = exc.__context__ = exc.__cause__ = None
                out.append(exc)
        return out

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def _inline_records(data: bytes) -> int:
    """The records ``data``'s uncompressed batches claim in their headers (no more
    than the check will walk); past :data:`INLINE_RECORDS` for compressed or unframed
    data, which goes to a thread."""
    pos, total = 0, 0
    while pos < len(data):
        if len(data) - pos < BATCH_HEADER_SIZE or data[pos + _COMPRESSION_AT] & 0x07:
            return INLINE_RECORDS + 1
        total += max(0, _LENGTH.unpack_from(data, pos + 57)[0])
        pos += 12 + max(_LENGTH.unpack_from(data, pos + 8)[0], 49)
    return total


def inflate_cap(config: LlogConfig) -> int:
    """What a produced batch's records may inflate to (``kafka_max_batch_inflated_bytes``,
    by default four times ``max_record_bytes``)."""
    if config.kafka_max_batch_inflated_bytes is not None:
        return config.kafka_max_batch_inflated_bytes
    return 4 * config.max_record_bytes
