"""Kafka settings brokkr takes only where it does what they say: each share-group and
share-coordinator setting that names something brokkr does one way (one event loop, no
write batching, its own persister, assignments computed at once) is taken at that value
and refused at start, with why, at any other; never taken and ignored."""

from __future__ import annotations

import pytest
from brokkr.core.config import BrokerConfig
from brokkr.core.errors import ConfigError
from brokkr.core.protocol.records import CODEC_MASK, iter_batches_untrusted
from brokkr.core.testing import RawClient
from brokkr.plugins.groups import brokkr_config_definitions as group_config_definitions
from brokkr.plugins.groups.coordinator import OFFSETS_TOPIC
from brokkr.plugins.share.coordinator import SHARE_STATE_TOPIC

from tests.test_share_consumer import FAST as SHARE_FAST
from tests.test_share_consumer import poll_until, produce, set_group, share_consumer
from tests.test_share_group_membership import FAST, describe, find_coordinator, heartbeat, member_id
from tests.test_tools import brokkr
from tests.waiting import wait_for

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import AcknowledgeType, Consumer, TopicPartition  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)

GROUP_DEFS = group_config_definitions()
#: A value Kafka takes that brokkr refuses, and why.
REFUSED = [
    ("share.coordinator.threads", "4", "brokkr takes only 1: the share coordinator runs on the broker's one event loop"),
    ("share.coordinator.append.linger.ms", "10", "brokkr takes only -1 or 0: the share coordinator appends each write at once"),
    ("share.coordinator.cached.buffer.max.bytes", "2097152", "brokkr takes only 1048588"),
    ("group.share.persister.class.name", "org.apache.kafka.server.share.persister.NoOpStatePersister", "share state is kept by the share coordinator"),
    ("group.share.enable", "false", "share groups are always served (brokkr.plugins.disabled=brokkr.plugins.share turns them off)"),
    ("share.fetch.purgatory.purge.interval.requests", "100", "a completed ShareFetch leaves brokkr's purgatory at once"),
    ("group.share.assignment.interval.ms", "1000", "brokkr takes only 0: a group's target assignment is computed at once"),
    ("group.share.min.assignment.interval.ms", "100", "brokkr takes only 0"),
    ("group.share.assignor.offload.enable", "true", "brokkr takes only false: a group's assignor runs in the heartbeat"),
    ("group.consumer.assignment.interval.ms", "1000", "brokkr takes only 0: a group's target assignment is computed at once"),
    ("group.consumer.min.assignment.interval.ms", "100", "brokkr takes only 0"),
    ("group.consumer.assignor.offload.enable", "true", "brokkr takes only false: a group's assignor runs in the heartbeat"),
]  # fmt: skip
#: Values that describe what brokkr does, and so are taken.
TAKEN = {
    "share.coordinator.threads": "1",
    "share.coordinator.append.linger.ms": "0",
    "group.share.enable": "true",
    "group.share.persister.class.name": "org.apache.kafka.server.share.persister.DefaultStatePersister",
    "group.share.assignment.interval.ms": "0",
    "group.share.max.assignment.interval.ms": "20000",
    "group.share.assignors": "simple",
    "group.share.assignor.offload.enable": "false",
    "group.consumer.assignment.interval.ms": "0",
}


@pytest.mark.parametrize(("name", "value", "why"), REFUSED, ids=[r[0] for r in REFUSED])
def test_a_setting_brokkr_does_not_do_is_refused_with_why(name, value, why):
    with pytest.raises(ConfigError) as refused:
        BrokerConfig({name: value}, GROUP_DEFS)  # with the group coordinator's definitions, as a Broker has
    assert f"invalid value {value!r} for configuration {name}: " in str(refused.value)
    assert why in str(refused.value)


def test_brokkr_serve_refuses_one_at_start_with_the_message(tmp_path):
    args = ("serve", "--override", "listeners=PLAINTEXT://127.0.0.1:0", "--override", f"log.dirs={tmp_path}")
    refused = brokkr(*args, "--override", "share.coordinator.threads=4")
    assert refused.returncode != 0
    assert (
        "invalid value '4' for configuration share.coordinator.threads: brokkr takes only 1: "
        "the share coordinator runs on the broker's one event loop"
    ) in refused.stderr


def test_the_values_brokkr_does_are_taken_described_and_true(brokkr_broker_factory):
    b = brokkr_broker_factory({**FAST, **TAKEN})
    admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
    resource = ConfigResource(ResourceType.BROKER, str(b.broker.node_id))
    configs = next(iter(admin.describe_configs([resource]).values())).result()
    for name, value in TAKEN.items():
        assert (configs[name].value, configs[name].source) == (value, ConfigSource.STATIC_BROKER_CONFIG.value), name
    for name, value in [
        ("group.share.min.assignment.interval.ms", "0"),
        ("share.coordinator.cached.buffer.max.bytes", "1048588"),
        ("group.share.initialize.retry.interval.ms", "30000"),
    ]:
        assert (configs[name].value, configs[name].source) == (value, ConfigSource.DEFAULT_CONFIG.value), name

    # An assignment interval of 0 is what happens: the heartbeat that joins a member assigns.
    b.call(b.broker.create_topic, "q", 2)
    with RawClient(b.bootstrap_servers) as client:
        find_coordinator(client, "g")
        joined = heartbeat(client, "g", member_id(), 0, ["q"])
        assert joined.error_code == 0
        group = describe(client, "g")
        assert group.assignment_epoch == group.group_epoch == joined.member_epoch


def codecs_of(broker, topic: str) -> set[int]:
    """The codecs of the batches in the topic's partition 0."""
    log = broker.broker.partition(topic, 0).log
    data = broker.call(log.read, log.log_start_offset, 1 << 20, log.log_end_offset, True)
    return {header.attributes & CODEC_MASK for header in iter_batches_untrusted(data)}


def test_share_state_is_written_with_the_codec_set_and_loads_again(brokkr_broker_factory, tmp_path):
    config = {**SHARE_FAST, "log.dirs": str(tmp_path / "d"), "share.coordinator.state.topic.compression.codec": 4}
    b = brokkr_broker_factory(config)
    b.call(b.broker.create_topic, "t")
    set_group(b.bootstrap_servers, "g", share_auto_offset_reset="earliest")
    produce(b.bootstrap_servers, "t", [b"v%d" % i for i in range(10)])
    c = share_consumer(b.bootstrap_servers, "g", explicit=True)
    try:
        got = [m for _, m in poll_until([c], 10, 20)]
        for m in got:
            c.acknowledge(m, AcknowledgeType.ACCEPT if m.offset() < 5 else AcknowledgeType.RELEASE)
        c.commit_sync(10)
    finally:
        c.close()
    key = [(b.broker.topics["t"].topic_id, 0)]
    summary = b.call(b.broker.share_state.read_summary, "g", key)
    assert list(summary.values())[0][:2] == (0, 5), "the first five accepted: the share partition starts at 5"
    assert codecs_of(b, SHARE_STATE_TOPIC) == {4}, "every batch of share state is zstd"
    b.stop()

    again = brokkr_broker_factory({**config, "share.coordinator.state.topic.compression.codec": 0})
    wait_for("the state loaded", lambda: again.call(again.broker.share_state.read_summary, "g", key) == summary)


def test_a_codec_no_plugin_provides_refuses_the_start(brokkr_broker_factory):
    settings = {
        "share.coordinator.state.topic.compression.codec": 2,
        "brokkr.plugins.disabled": "brokkr.plugins.codecs.snappy",
    }
    with pytest.raises(ConfigError, match="share.coordinator.state.topic.compression.codec=2: no codec plugin"):
        brokkr_broker_factory(settings)


def test_committed_offsets_are_written_with_the_codec_set_and_load_again(brokkr_broker_factory, tmp_path):
    config = {"log.dirs": str(tmp_path / "d"), "offsets.topic.num.partitions": 1, "offsets.topic.compression.codec": 1}
    b = brokkr_broker_factory(config)
    b.call(b.broker.create_topic, "t")
    consumer = Consumer({"bootstrap.servers": b.bootstrap_servers, "group.id": "g", "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition("t", 0, 42)], asynchronous=False)
    finally:
        consumer.close()
    assert codecs_of(b, OFFSETS_TOPIC) == {1}, "every batch of __consumer_offsets is gzip"
    b.stop()

    again = brokkr_broker_factory({**config, "offsets.topic.compression.codec": 0})
    consumer = Consumer({"bootstrap.servers": again.bootstrap_servers, "group.id": "g"})
    try:
        assert [tp.offset for tp in consumer.committed([TopicPartition("t", 0)], timeout=10)] == [42]
    finally:
        consumer.close()


def test_a_failed_share_state_initialization_is_tried_again_after_the_interval_set(brokkr_broker_factory):
    settings = {"share.coordinator.state.topic.num.partitions": 1, "group.share.initialize.retry.interval.ms": 1000}
    b = brokkr_broker_factory({**FAST, **settings})
    b.call(b.broker.create_topic, "q", 1)
    b.call(b.broker.internal_topics[SHARE_STATE_TOPIC].start_creation, b.broker)
    wait_for(SHARE_STATE_TOPIC, lambda: SHARE_STATE_TOPIC in b.broker.topics)
    admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})

    def state_max_message_bytes(value: str | None) -> None:
        op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
        entry = ConfigEntry("max.message.bytes", value, incremental_operation=op)
        resource = ConfigResource(ResourceType.TOPIC, SHARE_STATE_TOPIC, incremental_configs=[entry])
        for future in admin.incremental_alter_configs([resource]).values():
            future.result(10)

    state_max_message_bytes("10")  # every write of share state is refused: initializing q-0 fails
    with RawClient(b.bootstrap_servers) as client:
        find_coordinator(client, "g")
        member = member_id()
        joined = heartbeat(client, "g", member, 0, ["q"])
        assert joined.error_code == 0 and joined.assignment.topic_partitions == [], "q-0 has no share state"
        state_max_message_bytes(None)
        epoch = joined.member_epoch

        def assigned():
            nonlocal epoch
            answer = heartbeat(client, "g", member, epoch)
            epoch = answer.member_epoch
            return answer.assignment is not None and answer.assignment.topic_partitions

        # Kafka's default would try again 30 s after the failure; this group, a second after.
        wait_for("q-0 initialized again and assigned", assigned, timeout=10)
