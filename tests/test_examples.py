"""The example plugins in examples/, loaded through their entry points, with real clients."""

from __future__ import annotations

import time

import brokkr_example_policy
from brokkr.core.storage_contract import StorageContract
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition


def produce(bootstrap: str, topic: str, n: int) -> list:
    errors = []
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 5000})
    for i in range(n):
        producer.produce(topic, value=b"v%d" % i, on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(10) == 0
    return errors


def test_the_example_plugin_loads_from_its_entry_point_and_enforces_its_policy(brokkr_broker_factory):
    broker = brokkr_broker_factory({"example.readonly.prefixes": "audit.,_"})
    assert broker.broker.pm.get_plugin("example-policy") is brokkr_example_policy
    before = brokkr_example_policy.appended["orders"]
    assert produce(broker.bootstrap_servers, "orders", 5) == [None] * 5
    assert brokkr_example_policy.appended["orders"] == before + 5
    denied = produce(broker.bootstrap_servers, "audit.events", 1)
    assert denied[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_the_example_plugin_can_be_disabled_by_name(brokkr_broker_factory):
    broker = brokkr_broker_factory({"brokkr.plugins.disabled": "example-policy"})
    assert broker.broker.pm.get_plugin("example-policy") is None
    assert produce(broker.bootstrap_servers, "audit.events", 1) == [None]


class TestSqliteStorageExample(StorageContract):
    """examples/sqlite_storage, a third-party backend, passes the shipped storage contract."""

    storage_name = "sqlite"


def test_the_sqlite_example_serves_real_clients_across_a_restart(brokkr_broker_factory, tmp_path):
    config = {"brokkr.storage": "sqlite", "log.dirs": str(tmp_path), "log.segment.bytes": "200"}
    broker = brokkr_broker_factory(config)
    assert produce(broker.bootstrap_servers, "orders", 20) == [None] * 20
    broker.stop()
    assert (tmp_path / "brokkr.sqlite3").exists()
    broker = brokkr_broker_factory(config)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "g", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition("orders", 0, 0)])
        values = []
        deadline = time.monotonic() + 15
        while len(values) < 20 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                values.append(msg.value())
        assert values == [b"v%d" % i for i in range(20)]
    finally:
        consumer.close()
