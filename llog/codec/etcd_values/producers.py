"""An idempotent producer's state on a partition (``partitions/{p}/producers/{id}``,
spec §8.7): its last batches (:class:`ProducerState`, :class:`SequencedBatch`)."""

from __future__ import annotations

from dataclasses import dataclass

from llog.codec.etcd_values.maps import MetaFormatError, field_of, pack, unpack


@dataclass(frozen=True)
class SequencedBatch:
    """One of an idempotent producer's recent batches on a partition (spec §8.7): its
    first sequence, offsets and content digest (``None``: written before digests)."""

    sequence: int
    start_offset: int
    end_offset: int
    digest: int | None

    @property
    def msg_count(self) -> int:
        return self.end_offset - self.start_offset + 1

    def to_array(self) -> list[int | None]:
        return [self.sequence, self.start_offset, self.end_offset, self.digest]

    @classmethod
    def from_array(cls, a: object) -> SequencedBatch:
        if not isinstance(a, list) or len(a) != 4:
            raise MetaFormatError("a recent batch is not an array of 4 fields")
        seq, start, end, digest = a
        if any(not isinstance(v, int) or isinstance(v, bool) for v in (seq, start, end)) or not (
            digest is None or (isinstance(digest, int) and not isinstance(digest, bool))
        ):
            raise MetaFormatError("a recent batch has a field of the wrong type")
        if seq < 0 or start < 0 or end < start:
            raise MetaFormatError("a recent batch has a negative sequence or an empty range")
        return cls(seq, start, end, digest)


#: Batches an idempotent producer's state remembers per partition, as Kafka does
#: (``max.in.flight.requests.per.connection`` ≤ 5 keeps a retry inside the window).
PRODUCER_WINDOW = 5


@dataclass(frozen=True)
class ProducerState:
    """``partitions/{p}/producers/{producer_id}``: the last batches an idempotent
    producer committed to the partition, written in the same transaction as the commit.
    A retry of any of them (same epoch, sequence, record count and content digest)
    gets its offsets back instead of appending again."""

    sequence: int
    start_offset: int
    end_offset: int
    append_id: str
    data_key: str
    updated_at_ms: int
    #: The producer's epoch: a batch of an older one is fenced.
    epoch: int = 0
    #: The last batch's content digest (``None``: written before digests existed).
    digest: int | None = None
    #: Up to ``PRODUCER_WINDOW - 1`` batches before the last, oldest first.
    recent: tuple[SequencedBatch, ...] = ()

    @property
    def msg_count(self) -> int:
        return self.end_offset - self.start_offset + 1

    @property
    def last(self) -> SequencedBatch:
        return SequencedBatch(self.sequence, self.start_offset, self.end_offset, self.digest)

    def window(self) -> tuple[SequencedBatch, ...]:
        """The remembered batches, oldest first, the last one included."""
        return (*self.recent, self.last)

    def encode(self) -> bytes:
        return pack(
            {
                "sequence": self.sequence,
                "start_offset": self.start_offset,
                "end_offset": self.end_offset,
                "append_id": self.append_id,
                "data_key": self.data_key,
                "updated_at_ms": self.updated_at_ms,
                "epoch": self.epoch,
                "digest": self.digest,
                "recent": [b.to_array() for b in self.recent],
            }
        )

    @classmethod
    def decode(cls, raw: bytes) -> ProducerState:
        m = unpack(raw)
        epoch = m.get("epoch", 0)
        digest = m.get("digest")
        recent = m.get("recent") or []
        if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
            raise MetaFormatError("producer state's epoch is not an int >= 0")
        if digest is not None and (not isinstance(digest, int) or isinstance(digest, bool)):
            raise MetaFormatError("producer state's digest is neither null nor an int")
        if not isinstance(recent, list) or len(recent) >= PRODUCER_WINDOW:
            raise MetaFormatError(f"producer state's recent batches are not an array of < {PRODUCER_WINDOW}")
        s = cls(
            sequence=field_of(m, "sequence", int),
            start_offset=field_of(m, "start_offset", int),
            end_offset=field_of(m, "end_offset", int),
            append_id=field_of(m, "append_id", str),
            data_key=field_of(m, "data_key", str),
            updated_at_ms=field_of(m, "updated_at_ms", int),
            epoch=epoch,
            digest=digest,
            recent=tuple(SequencedBatch.from_array(b) for b in recent),
        )
        if s.sequence < 0 or s.start_offset < 0 or s.end_offset < s.start_offset:
            raise MetaFormatError("producer state has a negative sequence or an empty range")
        return s
