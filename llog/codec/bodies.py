"""A record body of any encoding, told apart by its magic: ``bytes-batch-v1``
(``LLB1``, :mod:`llog.codec.batch`), ``kafka-batch-v2`` (``LLK1``,
:mod:`llog.codec.kafka_body`) or, for a compacted range, ``parquet-v1`` (``PAR1``,
:mod:`llog.codec.parquet_body`). Every reader decodes through :func:`decode`."""

from __future__ import annotations

from llog.codec import batch, kafka_body, parquet_body
from llog.codec.batch import Batch, BatchFormatError
from llog.codec.kafka_body import KafkaBody

ENCODINGS = (batch.ENCODING, kafka_body.ENCODING)

#: A body as a reader holds it: decoded, or Kafka batches not decoded yet.
Body = Batch | KafkaBody


def decode(body: bytes | bytearray | memoryview, *, verify: bool = True) -> Batch:
    """The body's records; :class:`BatchFormatError` on anything that does not decode."""
    magic = bytes(body[:4])
    if magic == kafka_body.MAGIC:
        return kafka_body.decode(body if not isinstance(body, bytearray) else bytes(body), verify=verify)
    if magic == parquet_body.MAGIC:
        return parquet_body.decode(body)  # Parquet checks its own pages (CRCs are optional there)
    return batch.decode(body, verify=verify)


def decode_from(body: bytes | bytearray | memoryview, skip_rows: int) -> tuple[Batch, int]:
    """``(records, the row they start at)``: a Parquet file's row groups from the one
    holding ``skip_rows`` (the body may hold only those), any other body whole from row 0."""
    if skip_rows and bytes(body[:4]) == parquet_body.MAGIC:
        return parquet_body.decode_from(body, skip_rows)
    return decode(body), 0


def open_body(body: bytes | memoryview, *, verify: bool = True) -> Body:
    """:func:`decode`, except that Kafka batches are only checked (header and CRC) and
    decoded when their records are first asked for (:class:`KafkaBody`)."""
    if bytes(body[:4]) == kafka_body.MAGIC:
        return KafkaBody(body, verify=verify)
    return decode(body, verify=verify)


__all__ = ["ENCODINGS", "BatchFormatError", "Body", "KafkaBody", "decode", "decode_from", "open_body"]
