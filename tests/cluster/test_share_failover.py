"""Share groups through a SIGKILL of the share coordinator's broker: three ``brokkr serve``
processes on ZooKeeper, ``__share_group_state`` with one partition on all three (Kafka's
replication factor 3, min.insync.replicas 2). A ShareConsumer accepts half of ten records
and releases the rest; the broker leading the state partition is SIGKILLed; a new
ShareConsumer of the group gets exactly the released records, each on its second delivery:
no accepted record delivered again, none lost."""

from __future__ import annotations

import time

import pytest

from tests.cluster.test_failures import Node
from tests.waiting import wait_for

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

DEADLINE = 60.0


def leader(admin: AdminClient, topic: str) -> int | None:
    try:
        partition = admin.list_topics(topic, timeout=5).topics[topic].partitions.get(0)
    except Exception:
        return None
    return partition.leader if partition is not None and partition.leader >= 0 else None


def consume(address: str, want: int, ack, then_nothing: bool = False) -> list[tuple[int, int]]:
    """(offset, delivery count) of ``want`` records of group g, each acknowledged with
    ack(offset); with ``then_nothing``, also what a further poll brings (nothing, if none
    was lost or is left over)."""
    c = ShareConsumer({"bootstrap.servers": address, "group.id": "g", "share.acknowledgement.mode": "explicit"})
    c.subscribe(["st"])
    got: list[tuple[int, int]] = []
    deadline = time.monotonic() + DEADLINE
    try:
        while len(got) < want and time.monotonic() < deadline:
            for m in c.poll(0.5) or []:
                if m.error() is None:
                    got.append((m.offset(), m.delivery_count()))
                    c.acknowledge(m, ack(m.offset()))
        c.commit_sync(10)
        if then_nothing:
            got.extend((m.offset(), m.delivery_count()) for m in c.poll(2.0) or [] if m.error() is None)
    finally:
        c.close()
    return got


def test_a_sigkill_of_the_share_coordinators_broker_loses_and_repeats_no_acknowledgement(brokkr_zookeeper, tmp_path):
    nodes = [Node(n, brokkr_zookeeper, tmp_path) for n in (1, 2, 3)]
    for n in nodes:
        n.settings["share.coordinator.state.topic.num.partitions"] = 1
    address = ",".join(f"127.0.0.1:{n.port}" for n in nodes)
    try:
        for n in nodes:
            n.start()
        admin = AdminClient({"bootstrap.servers": address})
        wait_for("three brokers", lambda: len(admin.list_topics(timeout=5).brokers) == 3)
        admin.create_topics([NewTopic("st", 1, 3, config={"min.insync.replicas": "2"})])["st"].result(30)
        earliest = ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)
        resource = ConfigResource(ResourceType.GROUP, "g", incremental_configs=[earliest])
        for future in admin.incremental_alter_configs([resource]).values():
            future.result(30)
        producer = Producer({"bootstrap.servers": address})
        for i in range(10):
            producer.produce("st", b"v%d" % i, partition=0)
        assert producer.flush(DEADLINE) == 0

        first = consume(address, 10, lambda offset: AcknowledgeType.ACCEPT if offset < 5 else AcknowledgeType.RELEASE)
        assert sorted(first) == [(i, 1) for i in range(10)]

        coordinator = wait_for("the state partition's leader", lambda: leader(admin, "__share_group_state"))
        nodes[coordinator - 1].kill()
        wait_for(
            "a new leader of the state partition",
            lambda: leader(admin, "__share_group_state") not in (None, coordinator),
        )
        rest = ",".join(f"127.0.0.1:{n.port}" for n in nodes if n.node_id != coordinator)
        again = consume(rest, 5, lambda offset: AcknowledgeType.ACCEPT, then_nothing=True)
        assert sorted(again) == [(i, 2) for i in range(5, 10)], "none accepted delivered again, none lost"
    finally:
        for n in nodes:
            n.kill()
