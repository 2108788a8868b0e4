"""llog's Kafka listener: existing Kafka clients (librdkafka, the Java client,
kafka-python, aiokafka, kcat) produce to and fetch from llog unchanged.

Leaderless, as llog is: every broker answers as the leader of every partition, so
there is no leadership to move, no replication and no ISR. The request and response
codecs are kafka-python's (generated from Apache Kafka's own message definitions);
record batches are stored as produced and served back by :mod:`llog.codec.kafka_body`.

The data flow: :mod:`listener` frames requests off each connection and answers them in
order; :mod:`apis` says which APIs and versions are served and by which handler
(:mod:`handlers`); :mod:`errors` maps llog's errors to Kafka error codes;
:mod:`registry` keeps the live brokers in etcd, for Metadata.
"""
