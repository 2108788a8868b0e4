"""Client quotas' pure parts (llog/quotas/): which entity's quota applies to a client,
in Kafka's order, and the sampled rate and throttle time of Kafka's ClientQuotaManager."""

from __future__ import annotations

import pickle

import pytest

from llog.quotas.entities import (
    ANONYMOUS,
    CONSUMER_BYTE_RATE,
    DEFAULT,
    PRODUCER_BYTE_RATE,
    QuotaEntity,
    precedence,
    resolve,
)
from llog.quotas.rate import SampledRate

pytestmark = pytest.mark.fast


def test_the_most_specific_entity_that_sets_a_kind_wins() -> None:
    quotas = {
        QuotaEntity(None, DEFAULT): {PRODUCER_BYTE_RATE: 1.0, CONSUMER_BYTE_RATE: 1.0},
        QuotaEntity(None, "etl"): {PRODUCER_BYTE_RATE: 2.0},
        QuotaEntity(DEFAULT, None): {PRODUCER_BYTE_RATE: 3.0},
        QuotaEntity("alice", None): {PRODUCER_BYTE_RATE: 4.0},
        QuotaEntity("alice", "etl"): {CONSUMER_BYTE_RATE: 5.0},
    }
    assert resolve(quotas, "alice", "etl", PRODUCER_BYTE_RATE) == (QuotaEntity("alice", None), 4.0)
    assert resolve(quotas, "alice", "etl", CONSUMER_BYTE_RATE) == (QuotaEntity("alice", "etl"), 5.0)
    assert resolve(quotas, "bob", "etl", PRODUCER_BYTE_RATE) == (QuotaEntity(DEFAULT, None), 3.0)
    assert resolve(quotas, "bob", "etl", CONSUMER_BYTE_RATE) == (QuotaEntity(None, DEFAULT), 1.0)
    del quotas[QuotaEntity(DEFAULT, None)]
    assert resolve(quotas, "bob", "etl", PRODUCER_BYTE_RATE) == (QuotaEntity(None, "etl"), 2.0)
    assert resolve({}, "bob", "etl", PRODUCER_BYTE_RATE) is None


def test_precedence_is_kafkas_and_an_unauthenticated_client_is_anonymous() -> None:
    order = precedence(None, "c")
    assert order == (
        QuotaEntity(ANONYMOUS, "c"), QuotaEntity(ANONYMOUS, DEFAULT), QuotaEntity(ANONYMOUS, None),
        QuotaEntity(DEFAULT, "c"), QuotaEntity(DEFAULT, DEFAULT), QuotaEntity(DEFAULT, None),
        QuotaEntity(None, "c"), QuotaEntity(None, DEFAULT),
    )
    assert len(set(order)) == 8
    with pytest.raises(ValueError, match="names a user"):
        QuotaEntity(None, None)
    assert pickle.loads(pickle.dumps(QuotaEntity(DEFAULT, "c"))).user is DEFAULT
    assert str(QuotaEntity("alice", DEFAULT)) == "user 'alice', the default client id"


def test_a_first_burst_is_measured_over_one_window_not_ten() -> None:
    r = SampledRate()
    r.record(1_000, now=100.0)
    assert r.span(100.0) == 1.0 and r.rate(100.0) == 1_000.0
    assert r.throttle_s(1_000, 100.0) == 0.0  # one second's worth of the quota passes
    # 3,000 bytes against 1,000/s within the first half second: 3,000/s over the 1 s
    # floor, and the wait brings the 3,000 bytes' span to 3 s. (Kafka measures them over
    # 10 s: 300/s, no wait; its first burst is ten seconds' worth.)
    r.record(2_000, now=100.5)
    assert r.throttle_s(1_000, 100.5) == pytest.approx(2.5)
    assert r.throttle_s(1_000, 103.0) == 0.0  # the wait over: within the quota again


def test_old_windows_age_out_and_the_rate_falls_back() -> None:
    r = SampledRate(window_s=1.0, samples=11)
    for i in range(30):
        r.record(500, now=float(i))
    assert r.rate(29.0) == pytest.approx(11 * 500 / 10)  # the last 11 windows over their 10 s span
    assert r.throttle_s(500, 29.0) == pytest.approx(11 * 500 / 500 - 10)  # 5,500 bytes over 10 s: 1 s more
    assert r.throttle_s(0, 29.0) == 11.0  # a quota of 0: the longest wait
    assert r.rate(29.0 + 12) == 0.0  # nothing recorded for longer than the windows reach


def test_a_meter_measures_by_the_entity_whose_quota_applies_and_shares_it_among_brokers() -> None:
    from llog.quotas.entities import DEFAULT, QuotaEntity
    from llog.quotas.meter import MAX_THROTTLE_S, QuotaMeter

    quotas = {QuotaEntity("alice", None): {PRODUCER_BYTE_RATE: 1000.0},
              QuotaEntity(None, DEFAULT): {PRODUCER_BYTE_RATE: 500.0}}
    brokers = {None: 2, "a": 1}
    meter = QuotaMeter(lambda u, c, k: resolve(quotas, u, c, k), lambda z: brokers[z])
    # alice's client ids share her rate; her share on this broker is 1,000 / 2 brokers.
    assert meter.record("alice", "one", PRODUCER_BYTE_RATE, 400, now=0.0) == 0.0  # 400/s over 1 s
    assert meter.record("alice", "two", PRODUCER_BYTE_RATE, 200, now=0.5) == pytest.approx(600 / 500 - 0.5)
    # Each other client id is measured apart, against the default client id's quota.
    assert meter.record("bob", "x", PRODUCER_BYTE_RATE, 200, now=0.5) == 0.0  # 200/s against 250/s
    assert meter.record("bob", "y", PRODUCER_BYTE_RATE, 200, now=0.5) == 0.0
    assert meter.record("bob", "x", PRODUCER_BYTE_RATE, 100, now=0.6) == pytest.approx(300 / 250 - 0.1)
    # In zone a, one broker serves the client: the whole quota here.
    assert meter.record("carol", "z", PRODUCER_BYTE_RATE, 400, now=0.0, zone="a") == 0.0
    assert meter.record("dave", "z", CONSUMER_BYTE_RATE, 10**9, now=0.0) == 0.0  # no consumer quota set
    assert meter.record("erin", "w", PRODUCER_BYTE_RATE, 10**9, now=0.0) == MAX_THROTTLE_S


def test_a_kafka_client_is_held_to_the_share_of_the_partitions_a_broker_leads() -> None:
    from llog.kafka.registry import BrokerNode
    from llog.kafka.zones import leader_of, leader_share

    nodes = [BrokerNode(i, "h", 9092) for i in (1, 2, 3)]
    led = {i: sum(leader_of(nodes, "t", p).node_id == i for p in range(30)) for i in (1, 2, 3)}
    assert sum(led.values()) == 30
    shares = {i: leader_share(nodes, i, [("t", 30)]) for i in (1, 2, 3)}
    # Each broker's share is its part of the partitions, never under a third: a client
    # spreading its records evenly over them reaches its whole quota, whichever leads more.
    assert shares == {i: max(led[i] / 30, 1 / 3) for i in (1, 2, 3)}
    assert min(shares[i] / (led[i] / 30) for i in (1, 2, 3) if led[i]) >= 1.0
    # Several topics weigh by their partitions; a topic not known yet counts nothing.
    assert leader_share(nodes, 1, [("t", 30), ("u", 10)]) == pytest.approx(
        max((led[1] + sum(leader_of(nodes, "u", p).node_id == 1 for p in range(10))) / 40, 1 / 3))
    assert leader_share(nodes, 1, []) == pytest.approx(1 / 3)
    assert leader_share(nodes, 9, [("t", 30)]) == pytest.approx(1 / 3)  # not among them: the even share
