"""A topic deleted on a 3-broker cluster loses its committed offsets (Kafka's
GroupCoordinatorService.onPartitionsDeleted on every broker): the deletion is made by the
controller, which librdkafka's DeleteTopics goes to, and the group's coordinator, another
broker, deletes the group's offsets of the topic when it applies the deletion."""

from __future__ import annotations

import pytest
from brokkr.plugins.coordinator_partitions import partition_for
from brokkr.plugins.groups import OFFSETS_TOPIC, coordinator_of

from tests.cluster.test_replication import DEADLINE, bootstrap, create, leaders, wait_for
from tests.test_offsets_deleted_topics import commit, committed

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient  # noqa: E402

PARTITIONS = 3


def test_a_deleted_topics_offsets_are_deleted_by_a_coordinator_that_did_not_delete_it(brokkr_cluster):
    brokers = brokkr_cluster(3, offsets_topic_num_partitions=PARTITIONS, offsets_topic_replication_factor=3)
    create(brokers, "t", 2, 3)
    address = bootstrap(brokers)
    commit(address, "probe", {("t", 0): 1})  # creates __consumer_offsets
    placed = wait_for(f"leaders of {OFFSETS_TOPIC}", lambda: leaders(brokers, OFFSETS_TOPIC, PARTITIONS))
    admin = AdminClient({"bootstrap.servers": address, "log_level": 3})
    controller = admin.list_topics(timeout=10).controller_id
    group = next(f"g{i}" for i in range(100) if placed[partition_for(f"g{i}", PARTITIONS)][0] != controller)
    coordinator = next(b for b in brokers if b.broker.node_id == placed[partition_for(group, PARTITIONS)][0])
    assert coordinator.broker.node_id != controller

    commit(address, group, {("t", 0): 5, ("t", 1): 7})
    assert committed(address, group, [("t", 0), ("t", 1)]) == {("t", 0): 5, ("t", 1): 7}
    offsets = coordinator_of(coordinator.broker).offsets
    assert coordinator.call(lambda: set(offsets.get(group))) == {("t", 0), ("t", 1)}, "it coordinates the group"

    admin.delete_topics(["t"])["t"].result(DEADLINE)
    wait_for("the coordinator deleted t's offsets", lambda: not coordinator.call(lambda: dict(offsets.get(group))))
    assert committed(address, group, [("t", 0), ("t", 1)]) == {("t", 0): None, ("t", 1): None}
    create(brokers, "t", 2, 3)
    assert committed(address, group, [("t", 0), ("t", 1)]) == {("t", 0): None, ("t", 1): None}, "nor a recreated t"
