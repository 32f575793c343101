"""The example plugin in examples/policy_plugin, loaded through its entry point, with a real client."""

from __future__ import annotations

import brokkr_example_policy
from confluent_kafka import KafkaError, Producer


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
