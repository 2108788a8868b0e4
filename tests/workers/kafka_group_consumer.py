"""A Kafka consumer-group member (confluent-kafka) for the group failover test.

    python tests/workers/kafka_group_consumer.py BOOTSTRAP GROUP TOPIC OUT

Subscribes to TOPIC in GROUP and consumes until SIGTERM. Each record it reads goes to
OUT as ``R partition offset``; after every few records it commits what it read
synchronously and then writes ``C partition offset`` for each committed offset, so
the file says what was read and what was committed, in that order, even if the
process is killed with SIGKILL at any point.
"""

from __future__ import annotations

import signal
import sys

import confluent_kafka

COMMIT_EVERY = 25


def main() -> None:
    bootstrap, group, topic, out_path = sys.argv[1:5]
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
        "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
    })
    consumer.subscribe([topic])
    pending: dict[int, int] = {}
    read_since_commit = 0
    with open(out_path, "a", buffering=1) as out:  # a line per write: SIGKILL loses none written
        print("ready", flush=True)
        while not stop:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                out.write(f"R {msg.partition()} {msg.offset()}\n")
                pending[msg.partition()] = msg.offset() + 1
                read_since_commit += 1
            if pending and (msg is None or read_since_commit >= COMMIT_EVERY):
                offsets = [confluent_kafka.TopicPartition(topic, p, o) for p, o in pending.items()]
                try:
                    consumer.commit(offsets=offsets, asynchronous=False)
                except confluent_kafka.KafkaException:
                    pass  # a rebalance took the partitions: the next owner reads from the last commit
                else:
                    for p, o in pending.items():
                        out.write(f"C {p} {o}\n")
                pending.clear()
                read_since_commit = 0
        consumer.close()


if __name__ == "__main__":
    main()
