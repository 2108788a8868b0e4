"""Kafka client settings that make librdkafka-based clients (confluent-kafka,
kcat, librdkafka itself) notice a paused or dead llog broker within a few seconds
instead of librdkafka's defaults of 30 to 60 s. docs/kafka.md explains each; the Java
client's equivalents are there too."""

from __future__ import annotations

from types import MappingProxyType

#: Shared by producers and consumers.
_COMMON = {
    # A request unanswered this long closes the connection (socket.max.fails=1), and
    # librdkafka asks another broker for Metadata, where the silent one has gone.
    "socket.timeout.ms": 1500,
    # A paused process still completes TCP handshakes (the kernel does): bound the
    # setup (ApiVersions, SASL) too.
    "socket.connection.setup.timeout.ms": 3000,
    "reconnect.backoff.max.ms": 1000,
    "topic.metadata.refresh.interval.ms": 5000,
}

#: For producers (confluent_kafka.Producer).
PRODUCER = MappingProxyType({
    **_COMMON,
    # How long an unacknowledged ProduceRequest is waited for before it is retried
    # elsewhere (librdkafka: 30 s). llog acknowledges in tens of milliseconds.
    "request.timeout.ms": 1500,
})

#: For consumers (confluent_kafka.Consumer).
CONSUMER = MappingProxyType({
    **_COMMON,
    # A Fetch waits socket.timeout.ms + fetch.wait.max.ms before the consumer gives up
    # on its broker: 1.25 s here, then librdkafka's once-a-second timeout scan.
    "socket.timeout.ms": 1000,
    "fetch.wait.max.ms": 250,
    "session.timeout.ms": 6000,
    "heartbeat.interval.ms": 1000,
})
