"""Transactional offset commits (TxnOffsetCommit): a consume-transform-produce loop with
``send_offsets_to_transaction``; the group's committed offsets are the transaction's right
after it commits and unchanged after an abort; OffsetFetch with require_stable answers
UNSTABLE_OFFSET_COMMIT while the transaction is open; pending offsets survive a restart."""

from __future__ import annotations

import time

import pytest
from brokkr.core.errors import ErrorCode
from brokkr.core.protocol.frames import request_spec
from brokkr.core.testing import RawClient
from brokkr.plugins.groups import coordinator_of

from tests.txn_coordinator import FAST, ready, stable, wait_state

confluent_kafka = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")
OFFSET_FETCH = 9


@pytest.fixture
def broker(brokkr_broker_factory, tmp_path):
    b = brokkr_broker_factory({**FAST, "log.dirs": str(tmp_path / "data")})
    for name in ("in", "out"):
        b.call(b.broker.create_topic, name)
    ready(b)
    p = confluent_kafka.Producer({"bootstrap.servers": b.bootstrap_servers})
    for i in range(30):
        p.produce("in", b"%d" % i, partition=i % 3)
    p.flush(10)
    return b


def offset_fetch(broker, group: str, partitions, require_stable: bool):
    spec = request_spec(OFFSET_FETCH)
    body = spec.cls(
        group_id=group,
        topics=[spec.struct("OffsetFetchRequestTopic")(name="in", partition_indexes=list(partitions))],
        require_stable=require_stable,
    )
    with RawClient(broker.bootstrap_servers) as c:
        response = c.request(OFFSET_FETCH, 7, body)
    return {p.partition_index: (p.committed_offset, p.error_code) for t in response.topics for p in t.partitions}


def consume(consumer, n: int, timeout: float = 15.0):
    got = []
    deadline = time.time() + timeout
    while len(got) < n and time.time() < deadline:
        m = consumer.poll(0.2)
        if m is not None and not m.error():
            got.append(m)
    return got


def test_consume_transform_produce_commits_offsets_with_the_transaction(broker):
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": "ctp",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe(["in"])
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap_servers, "transactional.id": "ctp-1"})
    producer.init_transactions(10)
    try:
        # 1st transaction: transform 12 records and commit them with their offsets
        batch = consume(consumer, 12)
        assert len(batch) == 12
        producer.begin_transaction()
        for m in batch:
            producer.produce("out", m.value() + b"!", partition=m.partition())
        positions = consumer.position(consumer.assignment())
        producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 10)
        producer.flush(10)
        moved = {tp.partition: tp.offset for tp in positions if tp.offset >= 0}
        unstable = offset_fetch(broker, "ctp", moved, require_stable=True)
        assert all(code == ErrorCode.UNSTABLE_OFFSET_COMMIT for _, code in unstable.values())
        assert all(o == -1 for o, _ in offset_fetch(broker, "ctp", moved, require_stable=False).values())
        producer.commit_transaction(10)
        wait_state(broker, "ctp-1", "CompleteCommit")
        committed = {tp.partition: tp.offset for tp in consumer.committed(consumer.assignment(), 10)}
        assert {p: o for p, o in committed.items() if p in moved} == moved
        assert offset_fetch(broker, "ctp", moved, require_stable=True) == {p: (o, 0) for p, o in moved.items()}

        # 2nd transaction: aborted; the group's offsets stay where the 1st left them
        more = consume(consumer, 6)
        producer.begin_transaction()
        for m in more:
            producer.produce("out", m.value() + b"?", partition=m.partition())
        producer.send_offsets_to_transaction(
            consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 10
        )
        producer.abort_transaction(10)
        wait_state(broker, "ctp-1", "CompleteAbort")
        after = {tp.partition: tp.offset for tp in consumer.committed(consumer.assignment(), 10)}
        assert after == committed
        assert broker.call(lambda: coordinator_of(broker.broker).offsets.pending) == {}
    finally:
        consumer.close()
    for partition in range(3):
        lso, hw = stable(broker, "out", partition)
        assert lso == hw
    reader = kafka.KafkaConsumer(
        "out",
        bootstrap_servers=broker.bootstrap_servers,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        consumer_timeout_ms=3000,
    )
    out = sorted(m.value for m in reader)
    reader.close()
    assert out == sorted(m.value() + b"!" for m in batch)


def test_pending_offsets_load_after_a_restart_and_complete(brokkr_broker_factory, tmp_path):
    config = {**FAST, "log.dirs": str(tmp_path / "data")}
    b = brokkr_broker_factory(config)
    b.call(b.broker.create_topic, "in")
    ready(b)
    producer = confluent_kafka.Producer({"bootstrap.servers": b.bootstrap_servers, "transactional.id": "restart"})
    producer.init_transactions(10)
    producer.begin_transaction()
    producer.produce("in", b"x", partition=0)
    meta = confluent_kafka.Consumer({"bootstrap.servers": b.bootstrap_servers, "group.id": "g-restart"})
    producer.send_offsets_to_transaction(
        [confluent_kafka.TopicPartition("in", 0, 42)], meta.consumer_group_metadata(), 10
    )
    meta.close()
    producer.flush(10)
    b.stop()  # the transaction is still open: its offsets are pending in the log
    again = brokkr_broker_factory(config)
    ready(again, "restart")
    again.call(coordinator_of(again.broker).wait_loaded)
    assert offset_fetch(again, "g-restart", [0], True) == {0: (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT)}
    # the restarted coordinator still has the transaction open; a new producer aborts it
    successor = confluent_kafka.Producer({"bootstrap.servers": again.bootstrap_servers, "transactional.id": "restart"})
    successor.init_transactions(20)
    assert offset_fetch(again, "g-restart", [0], True) == {0: (-1, 0)}
    successor.begin_transaction()
    meta = confluent_kafka.Consumer({"bootstrap.servers": again.bootstrap_servers, "group.id": "g-restart"})
    successor.send_offsets_to_transaction(
        [confluent_kafka.TopicPartition("in", 0, 7)], meta.consumer_group_metadata(), 10
    )
    meta.close()
    successor.commit_transaction(10)
    wait_state(again, "restart", "CompleteCommit")
    assert offset_fetch(again, "g-restart", [0], True) == {0: (7, 0)}
