"""Step W1 of the commit protocol (protocol/README.md §8.1): one shared WAL blob built
from checked groups (one body per group, ``bytes-batch-v1`` or, for Kafka record
batches, ``kafka-batch-v2``, packed into an ``LLS1`` blob) and each group's pending
value, first in memory (:class:`EncodedBlob`), then PUT (:class:`StagedBlob`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from llog.codec import batch, blob, kafka_body
from llog.codec.etcd_values.partition import Pending
from llog.errors import InvalidInput
from llog.state.session import Session
from llog.write.validation import PreparedGroup


@dataclass(frozen=True)
class EncodedBlob:
    """A shared blob built in memory and not yet PUT (:meth:`Writer.encode_shared`):
    its groups, their pending values (offsets still zero) and the blob's bytes."""

    groups: tuple[PreparedGroup, ...]
    pendings: tuple[Pending, ...]
    data: bytes
    #: The session the blob is keyed under, whose key its commit compares.
    session: Session
    #: CRC-32 of ``data`` when the codec could combine it from the bodies' CRCs,
    #: handed to the store so it need not hash the body again.
    crc32: int | None

    @property
    def data_key(self) -> str:
        return self.pendings[0].data_key


@dataclass(frozen=True)
class StagedBlob:
    """A shared blob that is PUT but not committed: its groups and, per group, the
    pending value (offsets still zero) its commit will fill in."""

    groups: tuple[PreparedGroup, ...]
    pendings: tuple[Pending, ...]
    #: The blob as PUT; :meth:`body` slices one group's encoded records out of it.
    data: bytes
    session: Session

    @property
    def data_key(self) -> str:
        return self.pendings[0].data_key

    def body(self, i: int) -> memoryview:
        p = self.pendings[i]
        return memoryview(self.data)[p.byte_offset : p.byte_offset + p.byte_length]


def pack_groups(prepared: Sequence[PreparedGroup], created: int, max_blob_bytes: int) -> blob.PackedBlob:
    """Encode each group's body and pack them into one blob created at ``created``;
    refuse a blob over ``max_blob_bytes``."""
    bodies = [
        blob.BlobBody(g.topic, g.partition, g.count, kafka_body.encode_body(g.kafka), kafka_body.ENCODING)
        if g.kafka is not None else
        blob.BlobBody(g.topic, g.partition, g.count, batch.encode_columns(g.columns, g.stamp, g.lengths))
        for g in prepared
    ]
    # Each partition's bodies side by side (a stable sort: a partition's keep their
    # order; spec §6), so a reader of one partition fetches one short range, not one
    # that spans every other partition's bodies in between. ``parts`` back in group order.
    order = sorted(range(len(bodies)), key=lambda i: (bodies[i].topic, bodies[i].partition))
    laid = blob.pack([bodies[i] for i in order], created)
    parts = list(laid.parts)
    for pos, i in enumerate(order):
        parts[i] = laid.parts[pos]
    packed = replace(laid, parts=tuple(parts))
    if len(packed.data) > max_blob_bytes:
        raise InvalidInput(
            f"shared blob of {len(packed.data)} bytes exceeds max_blob_bytes {max_blob_bytes}; split the call"
        )
    return packed


def with_digests(prepared: Sequence[PreparedGroup], packed: blob.PackedBlob) -> tuple[PreparedGroup, ...]:
    """The groups, each idempotent one's producer sequence given its body's content
    digest (spec §8.7), by which a retry is told from another batch."""
    view = memoryview(packed.data)
    out = []
    for g, part in zip(prepared, packed.parts, strict=True):
        if g.producer is not None:
            body = view[part.body_offset : part.body_offset + part.body_length]
            codec = kafka_body if g.kafka is not None else batch
            g = replace(g, producer=replace(g.producer, digest=codec.content_digest(body)))
        out.append(g)
    return tuple(out)


def pendings_of(
    prepared: Sequence[PreparedGroup], packed: blob.PackedBlob, blob_id: str, data_key: str, created: int
) -> tuple[Pending, ...]:
    """Each group's pending value in blob ``blob_id`` at ``data_key``: its append id
    and slice, offsets still zero (its commit fills them in)."""
    return tuple(
        Pending(
            append_id=f"{blob_id}:{i}",
            start_offset=0,
            end_offset=0,
            msg_count=g.count,
            data_key=data_key,
            byte_offset=part.body_offset,
            byte_length=part.body_length,
            created_at_ms=created,
            max_timestamp=g.max_timestamp,
        )
        for i, (g, part) in enumerate(zip(prepared, packed.parts, strict=True))
    )
