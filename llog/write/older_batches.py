"""A Kafka producer's retry of a batch older than its window (protocol/README.md §8.7,
"Older batches").

Any broker appends to any partition, so a Kafka client can send a batch to one broker,
lose sight of it (the broker froze after committing it), move the partition to another
broker and send many more batches there before it retries the first: the retry then
falls behind the five batches the producer state remembers. Kafka cannot get there
(one leader sees every batch in order); llog must not answer it as out of order, which
tells the application that records in the log failed. Such a batch is committed if it
is anywhere: a producer's sequences are accepted on a partition only in order, and the
records between it and the window are that producer's too. Its stored bytes say
whether the retry is the same batch: ``kafka-batch-v2`` bodies keep the client's batch
as sent, producer id, epoch and sequence in its header, so a short walk back through
the partition's newest index entries finds it and its content digest decides.
"""

from __future__ import annotations

import logging

from llog.codec.batch import BatchFormatError
from llog.codec.etcd_values.producers import ProducerState, SequencedBatch
from llog.codec.kafka_body import HEAD_SIZE, batches_of, content_digest, first_producer
from llog.connection import Connection
from llog.errors import ObjectNotFound, SequenceReused
from llog.state.control import decode_index
from llog.write.commit_plan import RECORD_COUNTED_PREFIX
from llog.write.validation import ProducerSequence

log = logging.getLogger(__name__)

_WRAP = 2**31  # Kafka's sequences wrap to 0
#: Index entries read from etcd per round trip of the walk.
_PAGE = 256
#: Bodies whose head one verdict reads at most: candidates are only the entries of the
#: retry's record count, and one producer's batch is usually among the first.
MAX_HEAD_READS = 64


def behind(sequence: int, n: int, state: ProducerState) -> int | None:
    """The last offset a batch of ``n`` records at ``sequence`` can end at if it comes
    before the producer's window in ``state`` (the records between it and the window's
    oldest batch are the producer's too); ``None`` if it does not come before it."""
    oldest = state.window()[0]
    gap = (oldest.sequence - sequence) % _WRAP
    if not n <= gap < _WRAP // 2:
        return None
    return oldest.start_offset - 1 - (gap - n)


def find_older_batch(
    conn: Connection, topic: str, partition: int, producer: ProducerSequence, state: ProducerState, n: int
) -> SequencedBatch | SequenceReused | None:
    """The committed batch a Kafka producer's retry of ``n`` records repeats, when it is
    older than the window of ``state`` (read from etcd this commit): the batch, if the
    stored one has the retry's digest; :class:`SequenceReused` if other records were
    stored under its sequence; ``None`` when it cannot be found (never committed here,
    compacted or removed, or further back than the walk goes): then the out-of-order
    answer stands."""
    lookback = conn.config.producer_lookback_entries
    if not producer.id.startswith(RECORD_COUNTED_PREFIX) or producer.epoch != state.epoch or lookback == 0:
        return None
    hi = behind(producer.sequence, n, state)
    if hi is None or hi < 0:
        return None
    try:
        found = _walk(conn, topic, partition, producer, n, hi, lookback)
    except (ObjectNotFound, BatchFormatError) as exc:  # vacuumed since the index read, or damaged
        log.info("producer %r's sequence %d on %s/%d not looked up: %s", producer.id, producer.sequence, topic,
                 partition, exc)
        found = None
    outcome = "not_found" if found is None else "retry" if isinstance(found, SequencedBatch) else "reused"
    conn.metrics.older_batch_lookups.labels(outcome).inc()
    return found


def _walk(
    conn: Connection, topic: str, partition: int, producer: ProducerSequence, n: int, hi: int, lookback: int
) -> SequencedBatch | SequenceReused | None:
    """The partition's index entries ending at or below ``hi``, newest first, searched
    for the producer's batch at its sequence."""
    pid = int(producer.id[len(RECORD_COUNTED_PREFIX):])
    keys = conn.keys
    start_key, end_key = keys.index(topic, partition, 0), keys.index(topic, partition, hi + 1)
    walked = heads = 0
    while walked < lookback:
        kvs = conn.etcd.range(start_key, end_key, limit=min(_PAGE, lookback - walked), last_first=True)
        for kv in kvs:
            walked += 1
            entry = decode_index(kv.key, kv.value)
            if entry.kind != "WAL":
                return None  # compaction works from the start: everything further back is compacted
            if entry.msg_count != n:
                continue
            if heads == MAX_HEAD_READS:
                return None
            heads += 1
            head = conn.store.get_range(entry.data_key, entry.byte_offset, min(HEAD_SIZE, entry.byte_length))
            found = first_producer(head)
            if found is None or found[0] != pid or found[1] != producer.epoch:
                continue
            end = keys.end_offset_of(kv.key)
            back = (producer.sequence - found[2]) % _WRAP
            if back == 0:
                body = conn.store.get_range(entry.data_key, entry.byte_offset, entry.byte_length)
                batches_of(body)  # verified: a damaged body tells nothing of what was stored
                if content_digest(body) == producer.digest:
                    log.info("producer %r resent sequence %d to %s/%d, committed at %d..%d before its window",
                             producer.id, producer.sequence, topic, partition, end - n + 1, end)
                    return SequencedBatch(producer.sequence, end - n + 1, end, producer.digest)
                return SequenceReused(topic, partition, producer.id, producer.sequence, end - n + 1, end)
            if back < _WRAP // 2:
                return None  # past the producer's batches from before this sequence
        if len(kvs) < _PAGE:
            return None
        end_key = kvs[-1].key
    return None
