"""A Kafka client that closes its connection before its answers come loses only the
answers (issue 55): what it sent is still done, as after a paused broker resumes and
reads requests whose client has long given up. Raw requests on a socket, on the
suite's real etcd and S3 servers."""

from __future__ import annotations

import socket

import pytest

from llog.config import LlogConfig
from llog.connection import Connection
from llog.reader import Reader
from tests.broker_harness import conn_with_topic_t  # noqa: F401 (the fixture conn, with topic t)
from tests.conftest import wait_until
from tests.kafka_crafted import plain_batch
from tests.test_kafka import kafka_broker

kafka = pytest.importorskip("kafka")


def _produce_frame(correlation_id: int, partition: int, values: list[bytes], acks: int) -> bytes:
    from kafka.protocol.producer import ProduceRequest

    P = ProduceRequest[9]
    req = P(transactional_id=None, acks=acks, timeout_ms=30000, topic_data=[P.TopicProduceData(
        name="t", partition_data=[P.TopicProduceData.PartitionProduceData(index=partition,
                                                                          records=plain_batch(values))])])
    req.with_header(correlation_id=correlation_id, client_id="gone")
    return bytes(req.encode(header=True, framed=True))


@pytest.mark.parametrize("acks", [1, -1])
def test_a_produce_whose_client_left_is_committed_and_counted(
    config: LlogConfig, conn: Connection, capfd: pytest.CaptureFixture[str], acks: int
) -> None:
    """Eight Produce requests sent in one write and the socket closed at once: the
    broker reads them after the client left, the first answer awaited as the
    connection closes and the rest queued behind it. Every record is stored and
    counted in llog_produce_records_total, and no answer is dropped unawaited."""
    sent = {p: [f"p{p}-r{i}".encode() for i in range(3 + p)] for p in range(4)}
    frames = [_produce_frame(n, n % 4, sent[n % 4], acks) for n in range(8)]
    total = 2 * sum(map(len, sent.values()))
    reader = Reader(conn)
    with kafka_broker(config) as kb:
        host, port = kb.bootstrap.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=30) as s:
            s.sendall(b"".join(frames))
        wait_until(lambda: sum(reader.high_watermark("t", p)[1] for p in sent) == total, 60, "every record stored")
        wait_until(lambda: kb.http.metric("llog_produce_records_total") == total, 60, "every record counted")
    for p, values in sent.items():
        assert [r.value for r in reader.scan("t", p, 0)] == values * 2
    # The broker has stopped: whatever it would warn of is in its stderr by now.
    assert "was never awaited" not in capfd.readouterr().err
