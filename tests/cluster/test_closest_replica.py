"""Fetching from the closest replica (KIP-392) on a real ZooKeeper, with each broker in a
rack of its own and Kafka's RackAwareReplicaSelector: the leader sends a librdkafka
consumer naming its rack (``client.rack``) to the follower there, which serves it up to
its high watermark; and DescribeQuorum answers from the cluster's membership."""

from __future__ import annotations

from collections import defaultdict

import pytest
from brokkr.core.client import RawClient
from brokkr.core.config import RACK_AWARE_SELECTOR
from brokkr.core.errors import ErrorCode
from brokkr.core.plugins import hookimpl

from tests.cluster.test_replication import DEADLINE, bootstrap, create
from tests.waiting import wait_for
from tests.wire import FETCH, fetch_body

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402

RACKS = {1: "rack-1", 2: "rack-2", 3: "rack-3"}
CONSUMER = "near-consumer"


class FetchesServed:
    """Per broker, what its Fetch answers gave the consumer ``CONSUMER``: the bytes of
    records, and the replicas it named preferred (registered on every broker)."""

    def __init__(self) -> None:
        self.bytes: dict[int, int] = defaultdict(int)
        self.preferred: dict[int, set[int]] = defaultdict(set)

    @hookimpl
    def brokkr_request_completed(self, context, header, response, elapsed_ms, broker):
        if header.api_key != FETCH or context.client_id != CONSUMER:
            return
        for topic in response.responses:
            for p in topic.partitions:
                self.bytes[broker.node_id] += len(p.records or b"")
                if p.preferred_read_replica >= 0:
                    self.preferred[broker.node_id].add(p.preferred_read_replica)


def test_a_consumer_reads_from_the_in_sync_follower_in_its_rack(brokkr_cluster):
    served = FetchesServed()
    brokers = brokkr_cluster(3, plugins=(served,), broker_rack=RACKS, replica_selector_class=RACK_AWARE_SELECTOR)
    leader, replicas, _ = create(brokers, "near", 1, 3)[0]
    near = next(n for n in replicas if n != leader)
    producer = Producer({"bootstrap.servers": bootstrap(brokers), "acks": "all"})
    for i in range(100):
        producer.produce("near", b"%d" % i)
    assert producer.flush(DEADLINE) == 0
    follower = next(b for b in brokers if b.broker.node_id == near)
    wait_for("the follower's high watermark", lambda: follower.partition("near", 0).high_watermark == 100)

    # Before v11 a consumer names no rack, and only the leader serves it.
    with RawClient(follower.bootstrap_servers) as c:
        old = c.request(FETCH, 10, fetch_body("near")).responses[0].partitions[0]
        assert old.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap(brokers),
            "group.id": "near",
            "client.id": CONSUMER,
            "client.rack": RACKS[near],
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition("near", 0, 0)])
        values = []
        while len(values) < 100:
            msg = consumer.poll(DEADLINE)
            assert msg is not None and msg.error() is None, msg and msg.error()
            values.append(msg.value())
    finally:
        consumer.close()
    assert values == [b"%d" % i for i in range(100)]
    assert served.preferred == {leader: {near}}, "the leader names the follower in the consumer's rack"
    assert served.bytes[near] > 0 and served.bytes[leader] == 0, f"the follower served the records: {served.bytes}"


def test_describe_quorum_names_the_controller_and_the_live_brokers(brokkr_cluster):
    from kafka.admin import KafkaAdminClient

    brokers = brokkr_cluster(3)
    membership = brokers[0].broker.replicas.membership
    admin = KafkaAdminClient(bootstrap_servers=bootstrap(brokers))
    try:
        quorum = admin.describe_metadata_quorum()
    finally:
        admin.close()
    (p,) = quorum["topics"][0]["partitions"]
    assert (p["error"], p["leader_id"], p["leader_epoch"]) == (
        None,
        membership.controller_id,
        membership.controller_epoch,
    )
    assert [v["replica_id"] for v in p["current_voters"]] == [1, 2, 3] and p["observers"] == []
    leader = next(v for v in p["current_voters"] if v["replica_id"] == p["leader_id"])
    assert leader["last_caught_up_timestamp"] > 0
    assert [n["node_id"] for n in quorum["nodes"]] == [1, 2, 3]
