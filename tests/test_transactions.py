"""The transaction coordinator with real clients: confluent-kafka and kafka-python
transactional producers commit and abort across partitions and topics, the coordinator's
state as DescribeTransactions/ListTransactions show it, markers end the transaction on
every partition (the last stable offset reaches the high watermark), read_committed
consumers of confluent-kafka, kafka-python and aiokafka see committed records exactly once
and aborted ones never, zombie fencing, FindCoordinator for transactional ids."""

from __future__ import annotations

import asyncio
import time

import pytest
from brokkr.core.errors import ErrorCode
from brokkr.plugins.coordinator_partitions import partition_for
from brokkr.plugins.transactions import transaction_coordinator_of
from brokkr.plugins.transactions.coordinator import TRANSACTION_STATE_TOPIC

from tests.txn_coordinator import FAST, describe, find_coordinator, list_transactions, ready, stable, wait_state

confluent_kafka = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")
aiokafka = pytest.importorskip("aiokafka")


@pytest.fixture
def broker(brokkr_broker_factory):
    b = brokkr_broker_factory(FAST)
    for name in ("a", "b"):
        b.call(b.broker.create_topic, name)
    return b


def confluent_producer(broker, txn_id: str, **config):
    return confluent_kafka.Producer(
        {"bootstrap.servers": broker.bootstrap_servers, "transactional.id": txn_id, **config}
    )


@pytest.mark.parametrize("version", [1, 3, 4, 6])
def test_find_coordinator_creates_the_state_topic_and_names_its_leader(brokkr_broker, version):
    first = find_coordinator(brokkr_broker, "my-txn", version)
    assert (first.error_code, first.node_id) == (ErrorCode.COORDINATOR_NOT_AVAILABLE, -1)
    brokkr_broker.call(transaction_coordinator_of(brokkr_broker.broker).wait_loaded)  # created in the background
    topic = brokkr_broker.broker.topics[TRANSACTION_STATE_TOPIC]
    assert len(topic.partitions) == 50 and topic.config["cleanup.policy"] == ["compact"]
    answer = find_coordinator(brokkr_broker, "my-txn", version)
    host, port = brokkr_broker.bootstrap_servers.split(":")
    assert (answer.error_code, answer.node_id, answer.host, answer.port) == (0, 0, host, int(port))


def test_find_coordinator_without_the_transactions_plugin_is_not_available(brokkr_broker_factory):
    b = brokkr_broker_factory({"brokkr.plugins.disabled": "brokkr.plugins.transactions"})
    for _ in range(2):
        assert find_coordinator(b, "t").error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert TRANSACTION_STATE_TOPIC not in b.broker.topics


def test_a_transactional_id_belongs_to_the_partition_kafka_computes():
    # the fixture's "default_" lives in __transaction_state-44, as the Kafka broker that wrote it computed
    assert partition_for("default_", 50) == 44


def test_confluent_commit_and_abort_across_partitions_and_topics(broker):
    ready(broker)
    p = confluent_producer(broker, "cf-txn")
    p.init_transactions(10)
    p.begin_transaction()
    for i in range(30):
        p.produce("a", b"commit-%d" % i, partition=i % 3)
    p.produce("b", b"commit-b", partition=1)
    p.commit_transaction(10)
    d = wait_state(broker, "cf-txn", "CompleteCommit")
    assert (d.error_code, d.producer_epoch, d.transaction_timeout_ms, d.topics) == (0, 0, 60000, [])
    for t, i in [("a", 0), ("a", 1), ("a", 2), ("b", 1)]:
        lso, hw = stable(broker, t, i)
        assert lso == hw > 0  # the COMMIT marker ended the transaction there

    p.begin_transaction()
    for i in range(6):
        p.produce("a", b"abort-%d" % i, partition=i % 3)
    p.produce("b", b"abort-b", partition=2)
    p.flush(10)
    (ongoing,) = describe(broker, "cf-txn")
    assert ongoing.transaction_state == "Ongoing"
    assert {(t.topic, tuple(t.partitions)) for t in ongoing.topics} == {("a", (0, 1, 2)), ("b", (2,))}
    assert stable(broker, "b", 2) == (0, 1)  # the open transaction holds the LSO back
    p.abort_transaction(10)
    wait_state(broker, "cf-txn", "CompleteAbort")
    lso, hw = stable(broker, "b", 2)
    assert lso == hw == 2  # the aborted record and the ABORT marker


def test_kafka_python_commit_and_abort(broker):
    ready(broker)
    p = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap_servers, transactional_id="kp-txn")
    try:
        p.init_transactions()
        p.begin_transaction()
        for i in range(10):
            p.send("a", b"commit-%d" % i, partition=i % 3)
        p.send("b", b"x", partition=0)
        p.commit_transaction()
        d = wait_state(broker, "kp-txn", "CompleteCommit")
        assert d.producer_epoch == 0
        p.begin_transaction()
        p.send("b", b"aborted", partition=0)
        p.flush()
        p.abort_transaction()
        wait_state(broker, "kp-txn", "CompleteAbort")
    finally:
        p.close()
    assert stable(broker, "b", 0) == (4, 4)  # record, COMMIT, record, ABORT


def test_list_transactions_filters_by_state_producer_and_duration(broker):
    ready(broker)
    done = confluent_producer(broker, "done")
    done.init_transactions(10)
    done.begin_transaction()
    done.produce("a", b"v", partition=0)
    done.commit_transaction(10)
    open_ = confluent_producer(broker, "open")
    open_.init_transactions(10)
    open_.begin_transaction()
    open_.produce("a", b"v", partition=1)
    open_.flush(10)
    wait_state(broker, "done", "CompleteCommit")
    everything = list_transactions(broker)
    assert everything.error_code == 0
    assert {(t.transactional_id, t.transaction_state) for t in everything.transaction_states} == {
        ("done", "CompleteCommit"),
        ("open", "Ongoing"),
    }
    only_open = list_transactions(broker, states=["Ongoing", "NoSuchState"])
    assert [t.transactional_id for t in only_open.transaction_states] == ["open"]
    assert only_open.unknown_state_filters == ["NoSuchState"]
    (d,) = describe(broker, "open")
    by_pid = list_transactions(broker, producer_ids=[d.producer_id])
    assert [t.transactional_id for t in by_pid.transaction_states] == ["open"]
    assert list_transactions(broker, duration=3_600_000).transaction_states == []
    assert [t.transactional_id for t in list_transactions(broker, duration=0).transaction_states] == ["done", "open"]
    open_.abort_transaction(10)


def test_an_older_producer_with_the_same_transactional_id_is_fenced(broker):
    ready(broker)
    zombie = confluent_producer(broker, "fenced-id")
    zombie.init_transactions(10)
    zombie.begin_transaction()
    zombie.produce("a", b"zombie", partition=0)
    zombie.flush(10)
    successor = confluent_producer(broker, "fenced-id")
    successor.init_transactions(20)  # aborts the zombie's open transaction, bumping the epoch
    d = wait_state(broker, "fenced-id", "Empty")
    assert d.producer_epoch == 2  # 0: zombie, 1: the fencing abort, 2: the successor
    lso, hw = stable(broker, "a", 0)
    assert lso == hw == 2  # the zombie's record and the ABORT marker
    successor.begin_transaction()
    successor.produce("a", b"successor", partition=0)
    successor.commit_transaction(10)
    with pytest.raises(confluent_kafka.KafkaException) as fenced:
        zombie.produce("a", b"late", partition=0)
        zombie.commit_transaction(10)
    assert fenced.value.args[0].fatal() or fenced.value.args[0].code() in (
        confluent_kafka.KafkaError._FENCED,
        confluent_kafka.KafkaError.PRODUCER_FENCED,
        confluent_kafka.KafkaError.INVALID_PRODUCER_EPOCH,
    )
    assert stable(broker, "a", 0)[0] == stable(broker, "a", 0)[1]


def test_kafka_python_zombie_is_fenced(broker):
    ready(broker)
    zombie = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap_servers, transactional_id="kp-fenced")
    successor = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap_servers, transactional_id="kp-fenced")
    try:
        zombie.init_transactions()
        successor.init_transactions()
        zombie.begin_transaction()
        with pytest.raises(kafka.errors.KafkaError):
            zombie.send("a", b"late", partition=0).get(timeout=10)
            zombie.commit_transaction()
    finally:
        zombie.close(timeout=2)
        successor.close(timeout=2)
    assert describe(broker, "kp-fenced")[0].producer_epoch == 1


def committed_and_aborted(broker):
    """Three committed and two aborted transactions of confluent-kafka and kafka-python
    producers, interleaved over topics a and b; the values committed."""
    cf = confluent_producer(broker, "rc-cf")
    kp = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap_servers, transactional_id="rc-kp")
    committed = []
    try:
        cf.init_transactions(10)
        kp.init_transactions()
        for n in range(5):
            keep = n % 2 == 0
            values = [b"%s-%d-%d" % (b"keep" if keep else b"drop", n, i) for i in range(20)]
            cf.begin_transaction()
            kp.begin_transaction()
            for i, v in enumerate(values):
                if i % 2:
                    cf.produce("a" if i % 4 == 1 else "b", b"cf-" + v, partition=i % 3)
                else:
                    kp.send("a" if i % 4 == 0 else "b", b"kp-" + v, partition=i % 3)
            cf.flush(10)
            kp.flush()
            if keep:
                cf.commit_transaction(10)
                kp.commit_transaction()
                committed += [(b"cf-" if i % 2 else b"kp-") + v for i, v in enumerate(values)]
            else:
                cf.abort_transaction(10)
                kp.abort_transaction()
    finally:
        kp.close()
    return committed


def test_read_committed_consumers_see_committed_records_once_and_never_aborted_ones(broker):
    ready(broker)
    committed = committed_and_aborted(broker)
    for t in ("a", "b"):
        for i in range(3):
            lso, hw = stable(broker, t, i)
            assert lso == hw
    expected = sorted(committed)

    c = confluent_kafka.Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": "rc-cf",
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    c.subscribe(["a", "b"])
    got = []
    deadline = time.time() + 20
    while time.time() < deadline and len(got) < len(expected):
        m = c.poll(0.2)
        if m is not None and not m.error():
            got.append(m.value())
    c.poll(0.5)
    c.close()
    assert sorted(got) == expected

    k = kafka.KafkaConsumer(
        "a",
        "b",
        bootstrap_servers=broker.bootstrap_servers,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        consumer_timeout_ms=3000,
    )
    assert sorted(m.value for m in k) == expected
    k.close()

    async def aio():
        consumer = aiokafka.AIOKafkaConsumer(
            "a",
            "b",
            bootstrap_servers=broker.bootstrap_servers,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
        )
        await consumer.start()
        values = []
        try:
            while len(values) < len(expected):
                batch = await consumer.getmany(timeout_ms=3000)
                if not batch:
                    break
                values += [m.value for ms in batch.values() for m in ms]
            values += [m.value for ms in (await consumer.getmany(timeout_ms=500)).values() for m in ms]
        finally:
            await consumer.stop()
        return values

    assert sorted(asyncio.run(aio())) == expected
