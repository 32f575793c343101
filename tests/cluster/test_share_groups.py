"""Share groups on a 3-broker cluster (KIP-932): ``__share_group_state`` replicated, the
share partition's state written to the share coordinator on another broker (the
inter-broker state requests) and, when the share coordinator's broker stops, taken over by
the new leader of its partition: no accepted record is delivered again, none is lost."""

from __future__ import annotations

import time

import pytest
from brokkr.plugins.groups import coordinator_of
from brokkr.plugins.share import share_coordinator_of, share_manager_of
from brokkr.plugins.share.coordinator import SHARE_STATE_TOPIC

from tests.cluster.test_replication import DEADLINE, bootstrap, create, wait_for
from tests.test_group_tool import table
from tests.test_share_consumer import set_group
from tests.test_tools import brokkr

ck = pytest.importorskip("confluent_kafka")
if not hasattr(ck, "ShareConsumer"):
    pytest.skip("confluent-kafka without ShareConsumer", allow_module_level=True)
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

SETTINGS = {
    "share_coordinator_state_topic_num_partitions": 1,
    "share_coordinator_state_topic_replication_factor": 3,
    "offsets_topic_num_partitions": 1,
    "offsets_topic_replication_factor": 3,
    "group_share_min_record_lock_duration_ms": 1000,
    "group_share_record_lock_duration_ms": 1000,
}


def share_coordinator(brokers):
    """The broker leading ``__share_group_state``'s partition, once it has loaded it."""
    for b in brokers:
        coordinator = share_coordinator_of(b.broker)
        if SHARE_STATE_TOPIC in b.broker.topics and coordinator.owned.get(0, (False,))[0]:
            return b
    return None


def share_consumer(address: str, topic: str = "st") -> ShareConsumer:
    c = ShareConsumer(
        {"bootstrap.servers": address, "group.id": "g", "share.acknowledgement.mode": "explicit", "log_level": 3}
    )
    c.subscribe([topic])
    return c


def consume(c: ShareConsumer, want: int, timeout: float, ack) -> list:
    got = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < want and time.monotonic() < deadline:
            for m in c.poll(0.5) or []:
                if m.error() is None:
                    got.append((m.offset(), m.delivery_count()))
                    c.acknowledge(m, ack(m))
        c.commit_sync(10)
    finally:
        c.close()
    return got


def share_partition_loaded(brokers) -> bool:
    """Whether the data partition's leader has the group's share partition (it starts at the latest offset)."""
    return any(sp.loaded for b in brokers for sp in list(share_manager_of(b.broker).partitions.values()))


def test_state_survives_the_share_coordinators_failover(brokkr_cluster):
    brokers = brokkr_cluster(3, **SETTINGS)
    create(brokers, "st", 1, 3)
    address = bootstrap(brokers)
    c = share_consumer(address)  # the share partition starts at the latest offset: 0, before any record
    wait_for("the share partition", lambda: not c.poll(0.2) and share_partition_loaded(brokers))
    producer = Producer({"bootstrap.servers": address, "log_level": 3})
    for i in range(10):
        producer.produce("st", b"v%d" % i, partition=0)
    assert producer.flush(DEADLINE) == 0

    # the first five accepted, the rest released: state on the share coordinator
    first = consume(c, 10, DEADLINE, lambda m: AcknowledgeType.ACCEPT if m.offset() < 5 else AcknowledgeType.RELEASE)
    assert sorted(first) == [(i, 1) for i in range(10)]
    coordinator = wait_for("the share coordinator", lambda: share_coordinator(brokers))
    assert len(coordinator.broker.topics[SHARE_STATE_TOPIC].partitions) == 1
    coordinator.stop()
    rest = [b for b in brokers if b is not coordinator]
    wait_for("a new share coordinator", lambda: share_coordinator(rest))
    again = consume(share_consumer(bootstrap(rest)), 5, DEADLINE, lambda m: AcknowledgeType.ACCEPT)
    assert sorted(again) == [(i, 2) for i in range(5, 10)], "none accepted delivered again, none lost"


def test_a_group_config_set_through_one_broker_reaches_every_brokers_share_partitions(brokkr_cluster):
    brokers = brokkr_cluster(3, **SETTINGS)
    leaders = create(brokers, "ear", 3, 1)
    assert len({leader for leader, _, _ in leaders.values()}) == 3, "each broker leads one partition"
    producer = Producer({"bootstrap.servers": bootstrap(brokers), "log_level": 3})
    for i in range(9):  # before the group exists: only share.auto.offset.reset=earliest delivers them
        producer.produce("ear", b"v%d" % i, partition=i % 3)
    assert producer.flush(DEADLINE) == 0
    set_group(brokers[0].bootstrap_servers, "g", share_auto_offset_reset="earliest")

    def seen():
        return [b.broker.group_configs.typed("g", "share.auto.offset.reset") for b in brokers]

    wait_for("the setting on every broker", lambda: seen() == ["earliest"] * 3)
    c = share_consumer(bootstrap(brokers), "ear")
    got = consume(c, 9, DEADLINE, lambda m: AcknowledgeType.ACCEPT)
    assert sorted(got) == sorted((i // 3, 1) for i in range(9)), "every partition's records, from offset 0"


def earliest(brokers, address: str) -> None:
    """Group g's share partitions start at the earliest offset, on every broker."""
    set_group(address, "g", share_auto_offset_reset="earliest")
    wait_for(
        "the setting on every broker",
        lambda: all(b.broker.group_configs.typed("g", "share.auto.offset.reset") == "earliest" for b in brokers),
    )


def test_lag_is_described_for_partitions_other_brokers_lead(brokkr_cluster):
    """KIP-1226's lag (DescribeShareGroupOffsets v1): the end offset each partition's leader
    answers (ListOffsets, as Kafka's group coordinator asks it), less the share partition's
    start offset and the records delivered past it; the group's coordinator leads one of the
    three partitions, not the other two. ``brokkr share-groups --describe``, as a user runs it."""
    brokers = brokkr_cluster(3, **SETTINGS)
    leaders = create(brokers, "lag", 3, 1)
    assert len({leader for leader, _, _ in leaders.values()}) == 3, "each broker leads one partition"
    address = bootstrap(brokers)
    earliest(brokers, address)
    producer = Producer({"bootstrap.servers": address, "log_level": 3})

    def produce(counts):
        for p, n in enumerate(counts):
            for i in range(n):
                producer.produce("lag", b"v%d" % i, partition=p)
        assert producer.flush(DEADLINE) == 0

    produce([1, 2, 3])
    got = consume(share_consumer(address, "lag"), 6, DEADLINE, lambda m: AcknowledgeType.ACCEPT)
    assert len(got) == 6
    produce([1, 2, 3])  # not delivered yet: the lag

    def started():
        """The rows once every start offset is past the accepted records (None before)."""
        out = brokkr("share-groups", "--bootstrap-server", address, "--describe", "--group", "g")
        rows = table(out.stdout)[1:] if out.returncode == 0 else []
        return rows if [row[3] for row in rows] == ["1", "2", "3"] else None

    rows = wait_for("the start offsets past the accepted records", started)
    expected = [["g", "lag", str(p), str(p + 1), str(p + 1)] for p in range(3)]
    assert rows == expected, "START-OFFSET and LAG of every partition, whichever broker leads it"


def test_a_topic_the_cluster_deletes_leaves_no_share_state(brokkr_cluster):
    """A topic deleted through one broker: the share coordinator (wherever it runs) deletes
    its share partitions' state, the group's coordinator forgets it in the group's share-state
    metadata (an empty group: no heartbeat does it), every data broker drops its share
    partitions."""
    brokers = brokkr_cluster(3, **SETTINGS)
    create(brokers, "gone", 3, 1)
    address = bootstrap(brokers)
    earliest(brokers, address)
    producer = Producer({"bootstrap.servers": address, "log_level": 3})
    for p in range(3):
        producer.produce("gone", b"v", partition=p)
    assert producer.flush(DEADLINE) == 0
    assert len(consume(share_consumer(address, "gone"), 3, DEADLINE, lambda m: AcknowledgeType.ACCEPT)) == 3
    topic_id = brokers[0].broker.topics["gone"].topic_id
    states = share_coordinator_of(wait_for("the share coordinator", lambda: share_coordinator(brokers)).broker)

    def held_state():
        return {key for key in list(states.states.get(0, {})) if key[1] == topic_id}

    def group():
        return next(g for b in brokers if (g := coordinator_of(b.broker).groups.get("g")) is not None)

    assert held_state() == {("g", topic_id, p) for p in range(3)}
    assert topic_id in group().initialized
    admin = AdminClient({"bootstrap.servers": brokers[2].bootstrap_servers, "log_level": 3})
    admin.delete_topics(["gone"])["gone"].result(DEADLINE)
    wait_for("its share state deleted", lambda: not held_state())
    wait_for("the group forgot it", lambda: topic_id not in group().initialized)
    wait_for(
        "every broker's share partitions of it dropped",
        lambda: not any(k[1] == topic_id for b in brokers for k in list(share_manager_of(b.broker).partitions)),
    )
