"""The example plugins in examples/, loaded through their entry points, with real clients."""

from __future__ import annotations

import gzip
import logging
import time

import brokkr_example_policy
import brokkr_fair_quota
import brokkr_tenant_authorizer
import pytest
from brokkr.core.broker import Broker
from brokkr.core.compression import COMPRESSION_TYPE_IDS
from brokkr.core.errors import ConfigError, ErrorCode
from brokkr.core.log import Capability
from brokkr.core.protocol.frames import request_spec
from brokkr.core.protocol.records import build_batch, encode_record
from brokkr.core.storage_contract import StorageContract
from brokkr.core.testing import RawClient
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from txn_wire import UNVERIFIED, build_log
from wire import PRODUCE, compressed_batch, produce_body


def produce(bootstrap: str, topic: str, n: int, key: bytes | None = None) -> list:
    errors = []
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 5000})
    for i in range(n):
        producer.produce(topic, value=b"v%d" % i, key=key, on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(10) == 0
    return errors


def test_the_example_plugin_loads_from_its_entry_point_and_enforces_its_policy(brokkr_broker_factory):
    broker = brokkr_broker_factory({"example.readonly.prefixes": "audit.,_"})
    assert broker.broker.pm.get_plugin("example-policy") is brokkr_example_policy
    assert produce(broker.bootstrap_servers, "orders", 5) == [None] * 5
    assert brokkr_example_policy.counter(broker.broker).appended["orders"] == 5
    other = brokkr_broker_factory()
    assert brokkr_example_policy.counter(other.broker).appended["orders"] == 0, "two brokers share nothing"
    denied = produce(broker.bootstrap_servers, "audit.events", 1)
    assert denied[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_the_example_validator_refuses_a_batch_with_a_keyless_record_and_says_why(brokkr_broker_factory, caplog):
    """A batch to a keyed topic with any keyless record is refused whole (INVALID_RECORD,
    nothing stored), with one KIP-467 record error per keyless record (Produce v8+), a
    compressed batch too; the broker logs the refusal, once a minute per partition."""
    caplog.set_level(logging.INFO, logger="brokkr.produce")
    broker = brokkr_broker_factory()
    assert produce(broker.bootstrap_servers, "keyed.orders", 3, key=b"k") == [None] * 3
    [refused] = produce(broker.bootstrap_servers, "keyed.orders", 1)
    assert refused.code() == KafkaError.INVALID_RECORD
    records = b"".join(encode_record(i, 0, key, b"v") for i, key in enumerate([b"a", None, b"c", None]))
    with RawClient(broker.bootstrap_servers) as c:
        body = produce_body("keyed.orders", compressed_batch(gzip.compress(records), 4, COMPRESSION_TYPE_IDS["gzip"]))
        [answer] = c.request(PRODUCE, 9, body).responses[0].partition_responses
    assert answer.error_code == ErrorCode.INVALID_RECORD
    errors = [(e.batch_index, e.batch_index_error_message) for e in answer.record_errors]
    assert errors == [(1, "Record without a key in keyed.orders-0"), (3, "Record without a key in keyed.orders-0")]
    assert answer.error_message.startswith("One or more records have been rejected due to 2 record errors in total")
    assert broker.broker.partition("keyed.orders", 0).high_watermark == 3, "nothing of a refused batch is stored"
    [logged] = [r for r in caplog.records if r.name == "brokkr.produce"]  # the second refusal only counted
    assert logged.levelno == logging.WARNING and logged.getMessage().startswith(
        "produce to keyed.orders-0 refused with INVALID_RECORD (client rdkafka at 127.0.0.1, principal User:ANONYMOUS): "
        "One or more records have been rejected due to 1 record errors in total"
    )
    broker.broker.refusals.clock = lambda: time.monotonic() + 61  # a minute on: logged again, with the count
    produce(broker.bootstrap_servers, "keyed.orders", 1)
    assert "produce to keyed.orders-0 refused with INVALID_RECORD (1 more since the last line)" in caplog.text


def test_the_example_plugin_can_be_disabled_by_name(brokkr_broker_factory):
    broker = brokkr_broker_factory({"brokkr.plugins.disabled": "example-policy"})
    assert broker.broker.pm.get_plugin("example-policy") is None
    assert produce(broker.bootstrap_servers, "audit.events", 1) == [None]


class TestSqliteStorageExample(StorageContract):
    """examples/sqlite_storage, a third-party backend, passes the shipped storage contract
    (the tests of the capabilities it declares included)."""

    storage_name = "sqlite"


def test_the_sqlite_example_declares_its_capabilities_and_a_cluster_refuses_it(tmp_path):
    broker = Broker({"brokkr.storage": "sqlite", "log.dirs": str(tmp_path)})
    broker.open_storage().close()
    assert broker.storage_capabilities.declared == Capability.PRODUCER_SNAPSHOTS
    clustered = Broker({"brokkr.storage": "sqlite", "log.dirs": str(tmp_path), "zookeeper.connect": "127.0.0.1:1"})
    refused = r"a cluster \(zookeeper.connect\) needs the storage capability LEADER_EPOCHS .*, which "
    with pytest.raises(ConfigError, match=refused + r"brokkr.storage=sqlite \(SqliteStorage\) does not declare"):
        clustered.open_storage()


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


def test_a_storage_without_a_txn_index_still_knows_its_aborted_transactions_after_a_restart(
    brokkr_broker_factory, tmp_path
):
    """The sqlite example keeps no .txnindex: the broker keeps the aborted transactions in
    memory and rebuilds them by replaying the whole log at start (the snapshot written at
    the clean stop would otherwise hide them)."""
    config = {"brokkr.storage": "sqlite", "log.dirs": str(tmp_path), "log.segment.bytes": "200", **UNVERIFIED}
    broker = brokkr_broker_factory(config)
    broker.call(broker.broker.create_topic, "rc")
    build_log(broker)
    before = broker.broker.partition("rc", 0).aborted.aborted_txns(0, 99)
    assert len(before) == 2
    broker.stop()
    again = brokkr_broker_factory(config)
    partition = again.broker.partition("rc", 0)
    assert partition.aborted.aborted_txns(0, 99) == before and partition.last_stable_offset == 12


TENANTS = {"acme": "acme-secret", "globex": "globex-secret", "ops": "ops-secret"}


def tenant_conf(broker, user: str) -> dict:
    return {
        "bootstrap.servers": broker.bootstrap_servers,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": TENANTS[user],
        "message.timeout.ms": 5000,
        "log_level": 3,
    }


def test_the_tenant_authorizer_confines_each_tenant_to_its_prefix(brokkr_broker_factory):
    users = " ".join(f'user_{u}="{p}"' for u, p in TENANTS.items())
    broker = brokkr_broker_factory(
        {
            "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
                f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};"
            ),
            "tenant.names": "acme,globex",
            "brokkr.plugins.disabled": "example-policy",
        }
    )
    assert broker.broker.pm.get_plugin("tenant-authorizer") is brokkr_tenant_authorizer

    def produce_as(user, topic):
        producer = Producer(tenant_conf(broker, user))
        errors = []
        producer.produce(topic, b"v", on_delivery=lambda err, msg: errors.append(err))
        assert producer.flush(10) == 0
        return errors[0]

    assert produce_as("acme", "acme.orders") is None  # auto-created: CREATE on its own prefix
    assert produce_as("globex", "globex.orders") is None
    assert produce_as("acme", "globex.orders").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert produce_as("ops", "globex.orders") is None  # not a tenant: the next authorizer (allow-all) decides
    visible = AdminClient(tenant_conf(broker, "acme")).list_topics(timeout=10).topics
    assert set(visible) == {"acme.orders"}


def test_the_fair_quota_example_throttles_a_client_id_prefix(brokkr_broker_factory):
    broker = brokkr_broker_factory({"fair.quota.rates": "batch-:20000"})
    assert broker.broker.pm.get_plugin("fair-quota") is brokkr_fair_quota
    broker.call(broker.broker.create_topic, "t")
    spec = request_spec(0)

    def produce_body(size):
        records = build_batch([(None, b"x" * size)], timestamp=int(time.time() * 1000))
        partition = spec.struct("PartitionProduceData")(index=0, records=records)
        return spec.cls(
            acks=1, timeout_ms=5000, topic_data=[spec.struct("TopicProduceData")(name="t", partition_data=[partition])]
        )

    with RawClient(broker.bootstrap_servers, client_id="batch-7") as c:
        first = c.request(0, 9, produce_body(10_000))  # within the bucket's one second of burst
        second = c.request(0, 9, produce_body(30_000))  # 20 kB overdrawn at 20 kB/s: about a second
    assert first.throttle_time_ms == 0
    assert 900 <= second.throttle_time_ms <= 1100
    with RawClient(broker.bootstrap_servers, client_id="interactive") as c:
        assert c.request(0, 9, produce_body(100_000)).throttle_time_ms == 0
