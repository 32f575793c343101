"""The group coordinator on raw sockets: FindCoordinator v0-6, the coordinator partition
of a group as Kafka computes it, ``__consumer_offsets`` and the load-in-progress seam."""

from __future__ import annotations

import time

import pytest
from authorizers import Deny
from brokkr.core.authorization import AclOperation, ResourceType
from brokkr.core.errors import ErrorCode
from brokkr.core.protocol.frames import request_spec
from brokkr.core.testing import RawClient
from brokkr.plugins.groups import coordinator_of
from brokkr.plugins.groups.coordinator import OFFSETS_TOPIC, partition_for

FIND_COORDINATOR = 10
FindCoordinatorRequest = request_spec(FIND_COORDINATOR).cls


@pytest.mark.parametrize(
    "group, partition",
    # String.hashCode and Utils.abs as a JVM computes them (jshell); the fourth hashes to
    # Integer.MIN_VALUE, which Utils.abs maps to 0; the third has a surrogate pair.
    [
        ("test-group", 12),
        ("my-group", 12),
        ("\u00e9t\u00e9-\U0001f600", 26),
        ("polygenelubricants", 0),
        ("console-consumer-1", 24),
    ],
)
def test_a_group_belongs_to_the_partition_kafka_computes(group, partition):
    assert partition_for(group, 50) == partition


def offsets_topic_created(broker) -> None:
    """The first group lookup creates __consumer_offsets and answers COORDINATOR_NOT_AVAILABLE,
    as Kafka does; return once its partitions have loaded."""
    assert OFFSETS_TOPIC not in broker.broker.topics
    with RawClient(broker.bootstrap_servers) as c:
        first = c.request(FIND_COORDINATOR, 3, FindCoordinatorRequest(key="g", key_type=0))
    assert (first.error_code, first.node_id) == (ErrorCode.COORDINATOR_NOT_AVAILABLE, -1)
    broker.call(coordinator_of(broker.broker).wait_loaded)


@pytest.mark.parametrize("version", range(0, 4))
def test_find_coordinator_names_this_broker_for_a_group(brokkr_broker, version):
    offsets_topic_created(brokkr_broker)
    with RawClient(brokkr_broker.bootstrap_servers) as c:
        response = c.request(FIND_COORDINATOR, version, FindCoordinatorRequest(key="g", key_type=0))
    host, port = brokkr_broker.bootstrap_servers.split(":")
    assert (response.error_code, response.node_id, response.host, response.port) == (
        0,
        brokkr_broker.broker.node_id,
        host,
        int(port),
    )


@pytest.mark.parametrize("version", [4, 5, 6])
def test_find_coordinator_answers_each_key_of_a_batch(brokkr_broker, version):
    offsets_topic_created(brokkr_broker)
    with RawClient(brokkr_broker.bootstrap_servers) as c:
        groups = c.request(FIND_COORDINATOR, version, FindCoordinatorRequest(key_type=0, coordinator_keys=["a", "b"]))
        txns = c.request(FIND_COORDINATOR, version, FindCoordinatorRequest(key_type=1, coordinator_keys=["t"]))
        other = c.request(FIND_COORDINATOR, version, FindCoordinatorRequest(key_type=7, coordinator_keys=["x"]))
    port = int(brokkr_broker.bootstrap_servers.split(":")[1])
    assert [(k.key, k.error_code, k.port) for k in groups.coordinators] == [("a", 0, port), ("b", 0, port)]
    assert [(k.key, k.error_code, k.node_id) for k in txns.coordinators] == [
        ("t", ErrorCode.COORDINATOR_NOT_AVAILABLE, -1)
    ]
    assert [k.error_code for k in other.coordinators] == [ErrorCode.INVALID_REQUEST]


def deny_group(a) -> bool:
    """Denies DESCRIBE on group "secret"."""
    return (
        a.resource_type == ResourceType.GROUP and a.resource_name == "secret" and a.operation == AclOperation.DESCRIBE
    )


def test_find_coordinator_needs_describe_on_the_group(brokkr_broker_factory):
    broker = brokkr_broker_factory(plugins=(Deny(deny_group),))
    with RawClient(broker.bootstrap_servers) as c:
        denied = c.request(FIND_COORDINATOR, 3, FindCoordinatorRequest(key="secret", key_type=0))
    assert denied.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert OFFSETS_TOPIC not in broker.broker.topics  # a denied lookup creates nothing
    offsets_topic_created(broker)
    with RawClient(broker.bootstrap_servers) as c:
        v3 = c.request(FIND_COORDINATOR, 3, FindCoordinatorRequest(key="secret", key_type=0))
        v4 = c.request(FIND_COORDINATOR, 4, FindCoordinatorRequest(key_type=0, coordinator_keys=["secret", "open"]))
    assert v3.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED and v3.node_id == -1
    assert [k.error_code for k in v4.coordinators] == [ErrorCode.GROUP_AUTHORIZATION_FAILED, 0]


def test_consumer_offsets_is_created_compacted_on_first_lookup(brokkr_broker_factory):
    broker = brokkr_broker_factory({"offsets.topic.num.partitions": 7, "offsets.topic.segment.bytes": 1048576})
    offsets_topic_created(broker)
    topic = broker.broker.topics[OFFSETS_TOPIC]
    assert len(topic.partitions) == 7
    assert topic.config["cleanup.policy"] == ["compact"]
    assert topic.config["segment.bytes"] == 1048576
    with RawClient(broker.bootstrap_servers) as c:
        metadata = c.request(3, 12, request_spec(3).cls(topics=None, allow_auto_topic_creation=False))
    assert [t.is_internal for t in metadata.topics if t.name == OFFSETS_TOPIC] == [True]
    groups = coordinator_of(broker.broker)
    assert groups.partition_for("test-group") == partition_for("test-group", 7)
    assert broker.call(lambda: dict(groups.owned)) == {i: (True, 0) for i in range(7)}


def test_the_partition_count_of_an_existing_offsets_topic_wins(brokkr_broker_factory, tmp_path):
    first = brokkr_broker_factory({"offsets.topic.num.partitions": 3, "log.dirs": str(tmp_path)})
    offsets_topic_created(first)
    first.stop()
    again = brokkr_broker_factory({"offsets.topic.num.partitions": 50, "log.dirs": str(tmp_path)})
    groups = coordinator_of(again.broker)
    again.call(groups.wait_loaded)  # taken over at start-up, since the topic exists
    assert groups.num_partitions == 3 and set(groups.owned) == {0, 1, 2}


def test_groups_of_a_loading_partition_answer_load_in_progress_then_resign(brokkr_broker):
    offsets_topic_created(brokkr_broker)
    groups = coordinator_of(brokkr_broker.broker)
    index = groups.partition_for("g")

    def take_over_again():
        groups.resigned(index)
        assert groups.check_coordinator("g") == ErrorCode.NOT_COORDINATOR
        groups.became_leader(index, 5)
        return groups.check_coordinator("g")

    assert groups.check_coordinator("g") == ErrorCode.NONE
    assert brokkr_broker.call(take_over_again) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    brokkr_broker.call(groups.wait_loaded)
    assert groups.check_coordinator("g") == ErrorCode.NONE and groups.owned[index][1] == 5


def test_a_new_leader_serves_its_log_to_the_end_once_that_end_is_committed(brokkr_broker):
    """A new leader's high watermark may lag writes acknowledged under the old leader (a
    follower learns it a fetch later): the coordinator loads the log to its end and serves
    only once the high watermark has reached it, never a state without those writes."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    admin = pytest.importorskip("confluent_kafka.admin")
    offsets_topic_created(brokkr_broker)
    groups = coordinator_of(brokkr_broker.broker)
    index = groups.partition_for("g")
    client = admin.AdminClient({"bootstrap.servers": brokkr_broker.bootstrap_servers})
    client.create_topics([admin.NewTopic("t", 1)])["t"].result(30)
    consumer = confluent_kafka.Consumer({"bootstrap.servers": brokkr_broker.bootstrap_servers, "group.id": "g"})
    try:
        consumer.commit(offsets=[confluent_kafka.TopicPartition("t", 0, 42)], asynchronous=False)
    finally:
        consumer.close()
    partition = brokkr_broker.broker.partition(OFFSETS_TOPIC, index)
    end = partition.log.log_end_offset

    def take_over_with_a_lagging_high_watermark():
        groups.resigned(index)
        partition.lower_high_watermark(partition.log.log_start_offset)
        groups.became_leader(index, 5)

    brokkr_broker.call(take_over_with_a_lagging_high_watermark)
    time.sleep(0.5)
    assert groups.check_coordinator("g") == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    brokkr_broker.call(lambda: brokkr_broker.broker.advance_high_watermark(partition, end))
    brokkr_broker.call(groups.wait_loaded)
    assert groups.check_coordinator("g") == ErrorCode.NONE
    assert groups.offsets.by_group["g"][("t", 0)].offset == 42
