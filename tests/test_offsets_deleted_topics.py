"""A deleted topic's committed offsets go with it (Kafka's OffsetMetadataManager
.onPartitionsDeleted): every group coordinated here loses its offsets of the topic's
partitions, as tombstones in ``__consumer_offsets`` (a restart does not bring them back),
and its pending transactional offsets of them (a later COMMIT applies none); a topic
recreated under the same name has none; other topics keep theirs. A real librdkafka
Consumer, transactional Producer and AdminClient."""

from __future__ import annotations

import pytest
from brokkr.plugins.coordinator_partitions import TOMBSTONES_PER_BATCH, tombstone_batches
from brokkr.plugins.groups import coordinator_of

from tests.waiting import wait_for

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import OFFSET_INVALID, Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

TIMEOUT = 10


def consumer(address: str, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": address, "group.id": group, "enable.auto.commit": False, "log_level": 3})


def commit(address: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    c = consumer(address, group)
    try:
        c.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False)
    finally:
        c.close()


def committed(address: str, group: str, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int | None]:
    """What OffsetFetch answers for the group: None where it has no offset."""
    c = consumer(address, group)
    try:
        found = c.committed([TopicPartition(t, p) for t, p in partitions], timeout=TIMEOUT)
    finally:
        c.close()
    assert all(tp.error is None for tp in found), found
    return {(tp.topic, tp.partition): None if tp.offset == OFFSET_INVALID else tp.offset for tp in found}


def test_a_deleted_topics_offsets_are_deleted_for_every_group_and_stay_deleted(brokkr_broker_factory, tmp_path):
    settings = {"group.initial.rebalance.delay.ms": 0, "log.dirs": str(tmp_path / "data")}
    b = brokkr_broker_factory(settings)
    address = b.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": address, "log_level": 3})
    admin.create_topics([NewTopic("t", 2), NewTopic("kept", 1)])["t"].result(TIMEOUT)
    commit(address, "g", {("t", 0): 5, ("t", 1): 7, ("kept", 0): 3})
    commit(address, "h", {("t", 1): 2})
    wanted = [("t", 0), ("t", 1), ("kept", 0)]
    assert committed(address, "g", wanted) == {("t", 0): 5, ("t", 1): 7, ("kept", 0): 3}

    offsets = coordinator_of(b.broker).offsets

    def held() -> set:
        return b.call(lambda: {(g, tp) for g, o in offsets.by_group.items() for tp in o if tp[0] == "t"})

    admin.delete_topics(["t"])["t"].result(TIMEOUT)
    wait_for("t's offsets deleted", lambda: not held(), timeout=5)
    none = {("t", 0): None, ("t", 1): None, ("kept", 0): 3}
    assert committed(address, "g", wanted) == none
    assert committed(address, "h", [("t", 1)]) == {("t", 1): None}

    admin.create_topics([NewTopic("t", 2)])["t"].result(TIMEOUT)
    assert committed(address, "g", wanted) == none, "a recreated t has none of the old offsets"

    b.stop()
    restarted = brokkr_broker_factory(settings)
    restarted.call(coordinator_of(restarted.broker).wait_loaded)
    assert committed(restarted.bootstrap_servers, "g", wanted) == none, "the tombstones were written"
    assert committed(restarted.bootstrap_servers, "h", [("t", 1)]) == {("t", 1): None}


def test_a_deleted_topics_pending_transactional_offsets_are_not_applied_by_the_commit(brokkr_broker_factory):
    b = brokkr_broker_factory({"group.initial.rebalance.delay.ms": 0, "transaction.state.log.num.partitions": 1})
    address = b.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": address, "log_level": 3})
    admin.create_topics([NewTopic("t", 1)])["t"].result(TIMEOUT)
    producer = Producer({"bootstrap.servers": address, "transactional.id": "tx", "log_level": 3})
    producer.init_transactions(TIMEOUT)
    producer.begin_transaction()
    group = consumer(address, "g")
    try:
        producer.send_offsets_to_transaction([TopicPartition("t", 0, 9)], group.consumer_group_metadata(), TIMEOUT)
    finally:
        group.close()
    offsets = coordinator_of(b.broker).offsets
    assert b.call(lambda: offsets.pending_partitions("g")) == {("t", 0)}

    admin.delete_topics(["t"])["t"].result(TIMEOUT)
    wait_for("t's pending offset deleted", lambda: not b.call(lambda: offsets.pending_partitions("g")), timeout=5)
    producer.commit_transaction(TIMEOUT)
    admin.create_topics([NewTopic("t", 1)])["t"].result(TIMEOUT)
    assert committed(address, "g", [("t", 0)]) == {("t", 0): None}, "the COMMIT applied no offset of the old t"


def test_tombstones_are_written_in_bounded_batches():
    many = [(b"k%d" % i, None) for i in range(2 * TOMBSTONES_PER_BATCH + 1)]
    assert [len(batch) for batch in tombstone_batches(many)] == [TOMBSTONES_PER_BATCH, TOMBSTONES_PER_BATCH, 1]
    long_keys = [(b"x" * 100_000, None)] * 5
    assert [len(batch) for batch in tombstone_batches(long_keys)] == [2, 2, 1], "at most 256 KiB of keys a batch"
    assert [t for batch in tombstone_batches(many) for t in batch] == many, "all of them, in order"
