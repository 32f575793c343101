"""The transaction coordinator on a 3-broker cluster: __transaction_state is created
replicated; partitions led by other brokers get their markers through WriteTxnMarkers and
verify their transactional batches with AddPartitionsToTxn v4 to the coordinator; when the
coordinator's broker stops, the new leader of the id's partition takes the id over and the
producer carries on."""

from __future__ import annotations

import pytest
from brokkr.plugins.transactions import transaction_coordinator_of
from brokkr.plugins.transactions.coordinator import TRANSACTION_STATE_TOPIC

from tests.cluster.test_replication import DEADLINE, bootstrap, create, wait_for

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402

SETTINGS = {"transaction_state_log_num_partitions": 3, "transaction_state_log_replication_factor": 3}


def stable_everywhere(brokers, name: str, partitions: int) -> bool:
    """Whether each partition's leader has its last stable offset at its high watermark."""
    for b in brokers:
        for index in range(partitions):
            p = b.broker.partition(name, index)
            if p is not None and p.is_leader and b.call(lambda p=p: p.last_stable_offset != p.high_watermark):
                return False
    return True


def read_committed(brokers, name: str, count: int) -> list[bytes]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap(brokers), "group.id": f"reader-{name}", "isolation.level": "read_committed"}
    )
    consumer.assign([TopicPartition(name, i, 0) for i in range(6)])
    got: list[bytes] = []
    wait_for(
        "committed records",
        lambda: got.extend(m.value() for m in consumer.consume(50, 0.5) if not m.error()) or len(got) >= count,
        DEADLINE,
    )
    extra = [m.value() for m in consumer.consume(50, 1.0) if not m.error()]
    consumer.close()
    return got + extra


def coordinator_broker(brokers, txn_id: str):
    for b in brokers:
        txns = transaction_coordinator_of(b.broker)
        if b.broker.topics.get(TRANSACTION_STATE_TOPIC) is not None and not txns.check_coordinator(txn_id):
            return b
    return None


def test_transactions_across_brokers_and_a_coordinator_failover(brokkr_cluster):
    brokers = brokkr_cluster(3, **SETTINGS)
    create(brokers, "ct", 6, 2)
    producer = Producer({"bootstrap.servers": bootstrap(brokers), "transactional.id": "cluster-txn"})
    producer.init_transactions(DEADLINE)
    coordinator = wait_for("the coordinator", lambda: coordinator_broker(brokers, "cluster-txn"))
    assert len(brokers[0].broker.topics[TRANSACTION_STATE_TOPIC].partitions) == 3
    committed = []
    for n in range(4):
        producer.begin_transaction()
        values = [b"%d-%d" % (n, i) for i in range(12)]
        for i, v in enumerate(values):
            producer.produce("ct", v, partition=i % 6)
        if n % 2 == 0:
            producer.commit_transaction(DEADLINE)
            committed += values
        else:
            producer.abort_transaction(DEADLINE)
    wait_for("markers on every leader", lambda: stable_everywhere(brokers, "ct", 6))
    assert sorted(read_committed(brokers, "ct", len(committed))) == sorted(committed)

    # The coordinator's broker goes: a follower of the id's partition becomes its leader,
    # loads the id, and the producer's next transaction goes there.
    coordinator.stop()
    rest = [b for b in brokers if b is not coordinator]
    wait_for("a new coordinator", lambda: coordinator_broker(rest, "cluster-txn"))
    producer.begin_transaction()
    for i in range(6):
        producer.produce("ct", b"after-%d" % i, partition=i)
    producer.commit_transaction(DEADLINE)
    committed += [b"after-%d" % i for i in range(6)]
    wait_for("markers on every leader", lambda: stable_everywhere(rest, "ct", 6))
    assert sorted(read_committed(rest, "ct", len(committed))) == sorted(committed)
