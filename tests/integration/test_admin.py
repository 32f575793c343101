"""Admin APIs through real AdminClients: altering topic settings and adding partitions take
effect at once and survive a restart; DescribeCluster, DescribeLogDirs,
DescribeTopicPartitions, DescribeGroups v6, DescribeQuorum and ListConfigResources answer as
Kafka does; their error paths on raw sockets."""

from __future__ import annotations

import pytest
from brokkr.core.errors import ErrorCode
from brokkr.core.protocol.frames import request_spec
from brokkr.core.testing import RawClient
from confluent_kafka.admin import (  # noqa: E402, I001
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
)
from wire import PRODUCE, batch, produce_body

from .conftest import DEFAULT_TIMEOUT, ck_admin, ck_create_topic, ck_describe_topic_configs, ck_flush, ck_producer

kafka = pytest.importorskip("kafka")
from kafka.admin import KafkaAdminClient  # noqa: E402

INCREMENTAL_ALTER_CONFIGS, ALTER_CONFIGS, CREATE_PARTITIONS, DESCRIBE_TOPIC_PARTITIONS = 44, 33, 37, 75
DESCRIBE_QUORUM, LIST_CONFIG_RESOURCES = 55, 74


def incremental(admin, topic: str, *entries: ConfigEntry) -> None:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=list(entries))
    admin.incremental_alter_configs([resource], request_timeout=10)[resource].result(timeout=DEFAULT_TIMEOUT)


def test_incremental_alter_configs_takes_effect_at_once_and_survives_a_restart(
    brokkr_broker_factory, tmp_path, topic_name
):
    log_dir = tmp_path / "data"
    broker = brokkr_broker_factory({"log.dirs": str(log_dir)})
    ck_create_topic(broker.bootstrap_servers, topic_name)
    admin = ck_admin(broker.bootstrap_servers)
    incremental(
        admin,
        topic_name,
        ConfigEntry("segment.bytes", "20000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
    )
    configs = ck_describe_topic_configs(broker.bootstrap_servers, topic_name)
    assert configs["segment.bytes"].value == "20000"
    assert configs["segment.bytes"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["cleanup.policy"].value == "delete,compact"
    assert configs["max.message.bytes"].source == ConfigSource.DEFAULT_CONFIG.value

    # The partition's log rolls at the new size, without a restart.
    producer = ck_producer(broker.bootstrap_servers, **{"batch.size": 1000})
    for i in range(40):
        producer.produce(topic_name, key=b"k%d" % i, value=b"x" * 1000)
        producer.poll(0)
    ck_flush(producer)
    assert len(broker.partition(topic_name, 0).log.segments()) > 1

    incremental(admin, topic_name, ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE))
    broker.stop()
    broker = brokkr_broker_factory({"log.dirs": str(log_dir)})
    configs = ck_describe_topic_configs(broker.bootstrap_servers, topic_name)
    assert configs["segment.bytes"].value == "20000" and configs["cleanup.policy"].value == "delete,compact"
    assert configs["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")
def test_alter_configs_errors_and_validate_only(brokkr_broker, topic_name):
    ck_create_topic(brokkr_broker.bootstrap_servers, topic_name)
    admin = ck_admin(brokkr_broker.bootstrap_servers)
    bad = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic_name,
        incremental_configs=[ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)],
    )
    with pytest.raises(Exception, match="retention.ms"):
        admin.incremental_alter_configs([bad], request_timeout=10)[bad].result(timeout=DEFAULT_TIMEOUT)
    spec = request_spec(INCREMENTAL_ALTER_CONFIGS)
    Resource, Config = spec.struct("AlterConfigsResource"), spec.struct("AlterableConfig")

    def send(resource_type, name, *configs, validate_only=False):
        body = spec.cls(resources=[Resource(resource_type=resource_type, resource_name=name, configs=list(configs))])
        body.validate_only = validate_only
        with RawClient(brokkr_broker.bootstrap_servers) as c:
            return c.request(INCREMENTAL_ALTER_CONFIGS, 1, body).responses[0]

    r = send(2, "no-such-topic", Config(name="retention.ms", config_operation=0, value="1"))
    assert r.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    r = send(2, topic_name, Config(name="no.such.setting", config_operation=0, value="1"))
    assert (r.error_code, r.error_message) == (ErrorCode.INVALID_CONFIG, "Unknown topic config name: no.such.setting")
    r = send(2, topic_name, Config(name="retention.ms", config_operation=2, value="1"))
    assert r.error_code == ErrorCode.INVALID_CONFIG and "append is not allowed" in r.error_message
    r = send(4, "", Config(name="num.partitions", config_operation=0, value="1"))
    assert r.error_code == ErrorCode.INVALID_REQUEST and "Cannot update these configs dynamically" in r.error_message
    r = send(4, "", Config(name="log.retention.ms", config_operation=0, value="soon"))
    assert r.error_code == ErrorCode.INVALID_CONFIG and "log.retention.ms" in r.error_message
    r = send(4, "", Config(name="log.retention.ms", config_operation=0, value="1234567"))
    assert r.error_code == ErrorCode.NONE and brokkr_broker.config.dynamic[""] == {"log.retention.ms": 1234567}
    assert brokkr_broker.topics[topic_name].config.source("retention.ms") == 3  # DYNAMIC_DEFAULT_BROKER_CONFIG
    r = send(4, "7", Config(name="log.retention.ms", config_operation=0, value="1"))
    assert r.error_code == ErrorCode.INVALID_REQUEST, "another broker's id"
    r = send(2, topic_name, Config(name="retention.ms", config_operation=0, value="1234"), validate_only=True)
    assert r.error_code == ErrorCode.NONE and r.error_message is None
    assert brokkr_broker.topics[topic_name].config["retention.ms"] != 1234, "validate_only changes nothing"

    # The legacy AlterConfigs replaces the whole set.
    admin.alter_configs(
        [ConfigResource(ConfigResource.Type.TOPIC, topic_name, set_config={"retention.bytes": "5000"})]
    )[ConfigResource(ConfigResource.Type.TOPIC, topic_name)].result(timeout=DEFAULT_TIMEOUT)
    assert brokkr_broker.topics[topic_name].config.override_strings() == {"retention.bytes": "5000"}


def test_create_partitions_from_both_admin_clients_and_producers_see_them(brokkr_broker_factory, tmp_path, topic_name):
    log_dir = tmp_path / "data"
    broker = brokkr_broker_factory({"log.dirs": str(log_dir)})
    ck_create_topic(broker.bootstrap_servers, topic_name)
    admin = ck_admin(broker.bootstrap_servers)
    admin.create_partitions([NewPartitions(topic_name, 3)])[topic_name].result(timeout=DEFAULT_TIMEOUT)
    producer = ck_producer(broker.bootstrap_servers, **{"topic.metadata.refresh.interval.ms": 500})
    producer.produce(topic_name, b"to-2", partition=2)
    ck_flush(producer)
    assert broker.partition(topic_name, 2).log.log_end_offset == 1

    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    try:
        from kafka.admin import NewPartitions as KpNewPartitions

        kp.create_partitions({topic_name: KpNewPartitions(total_count=5)})
    finally:
        kp.close()
    assert len(broker.topics[topic_name].partitions) == 5
    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    try:
        from kafka.admin import ConfigResource as KpConfigResource
        from kafka.admin import ConfigResourceType

        kp.alter_configs([KpConfigResource(ConfigResourceType.TOPIC, topic_name, configs={"retention.ms": "1234"})])
    finally:
        kp.close()
    assert broker.topics[topic_name].config["retention.ms"] == 1234, "kafka-python's AdminClient alters configs too"
    future = admin.create_partitions([NewPartitions(topic_name, 4)])[topic_name]
    with pytest.raises(Exception, match="higher than the requested 4"):
        future.result(timeout=DEFAULT_TIMEOUT)
    broker.stop()
    broker = brokkr_broker_factory({"log.dirs": str(log_dir)})
    assert len(broker.topics[topic_name].partitions) == 5
    assert broker.partition(topic_name, 2).log.log_end_offset == 1


def test_create_partitions_error_paths(brokkr_broker, topic_name):
    ck_create_topic(brokkr_broker.bootstrap_servers, topic_name)
    spec = request_spec(CREATE_PARTITIONS)
    Topic, Assignment = spec.struct("CreatePartitionsTopic"), spec.struct("CreatePartitionsAssignment")

    def send(*topics, validate_only=False):
        for t in topics:
            t.assignments = t.assignments or None  # null unless given, as clients send it
        with RawClient(brokkr_broker.bootstrap_servers) as c:
            body = spec.cls(topics=list(topics), timeout_ms=5000, validate_only=validate_only)
            return {r.name: r for r in c.request(CREATE_PARTITIONS, 3, body).results}

    r = send(Topic(name="missing", count=2))["missing"]
    assert r.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    r = send(Topic(name=topic_name, count=1))[topic_name]
    assert (r.error_code, r.error_message) == (ErrorCode.INVALID_PARTITIONS, "Topic already has 1 partitions.")
    r = send(Topic(name=topic_name, count=3, assignments=[Assignment(broker_ids=[0])]))[topic_name]
    assert r.error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT and "by 2 but 1 assignments" in r.error_message
    r = send(Topic(name=topic_name, count=2, assignments=[Assignment(broker_ids=[7])]))[topic_name]
    assert r.error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT and "broker 7" in r.error_message
    r = send(Topic(name=topic_name, count=2), Topic(name=topic_name, count=3))[topic_name]
    assert r.error_code == ErrorCode.INVALID_REQUEST
    r = send(Topic(name=topic_name, count=2), validate_only=True)[topic_name]
    assert r.error_code == ErrorCode.NONE and len(brokkr_broker.topics[topic_name].partitions) == 1


def test_describe_cluster_log_dirs_and_topic_partitions(brokkr_broker_factory, tmp_path, topic_name):
    broker = brokkr_broker_factory({"log.dirs": str(tmp_path / "data")})
    ck_create_topic(broker.bootstrap_servers, topic_name, partitions=3)
    producer = ck_producer(broker.bootstrap_servers)
    producer.produce(topic_name, b"x" * 500, partition=1)
    ck_flush(producer)

    admin = ck_admin(broker.bootstrap_servers)  # kept alive while its future runs
    cluster = admin.describe_cluster(include_authorized_operations=True).result(timeout=10)
    assert cluster.cluster_id == broker.cluster_id and cluster.controller.id == broker.node_id
    assert [n.id for n in cluster.nodes] == [broker.node_id] and cluster.authorized_operations

    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    try:
        dirs = kp.describe_log_dirs()
    finally:
        kp.close()
    text = repr(dirs)
    assert str(tmp_path / "data") in text and topic_name in text

    spec = request_spec(DESCRIBE_TOPIC_PARTITIONS)
    with RawClient(broker.bootstrap_servers) as c:
        body = spec.cls(topics=[spec.struct("TopicRequest")(name=topic_name)], response_partition_limit=2)
        first = c.request(DESCRIBE_TOPIC_PARTITIONS, 0, body)
        assert [p.partition_index for p in first.topics[0].partitions] == [0, 1]
        assert (first.next_cursor.topic_name, first.next_cursor.partition_index) == (topic_name, 2)
        body.cursor = spec.struct("Cursor")(topic_name=topic_name, partition_index=2)
        rest = c.request(DESCRIBE_TOPIC_PARTITIONS, 0, body)
        assert [p.partition_index for p in rest.topics[0].partitions] == [2] and rest.next_cursor is None
        body = spec.cls(topics=[spec.struct("TopicRequest")(name="missing")])
        assert (
            c.request(DESCRIBE_TOPIC_PARTITIONS, 0, body).topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        )


def test_record_rules_follow_altered_timestamp_settings_at_once(brokkr_broker, topic_name):
    """The timestamp rules a batch is checked by are read once per change of the topic's
    settings (RecordRules.settings): every change reaches the next batch."""
    ck_create_topic(brokkr_broker.bootstrap_servers, topic_name)
    admin = ck_admin(brokkr_broker.bootstrap_servers)

    def produced():
        with RawClient(brokkr_broker.bootstrap_servers) as c:
            [t] = c.request(PRODUCE, 9, produce_body(topic_name, batch(timestamp=1_000))).responses
        return t.partition_responses[0]

    first = produced()  # CreateTime, with no bound on the past
    assert first.error_code == ErrorCode.NONE and first.log_append_time_ms == -1
    stamp = ConfigEntry("message.timestamp.type", "LogAppendTime", incremental_operation=AlterConfigOpType.SET)
    incremental(admin, topic_name, stamp)
    stamped = produced()
    assert stamped.error_code == ErrorCode.NONE and stamped.log_append_time_ms > 1_000
    unstamp = ConfigEntry("message.timestamp.type", None, incremental_operation=AlterConfigOpType.DELETE)
    bound = ConfigEntry("message.timestamp.before.max.ms", "3600000", incremental_operation=AlterConfigOpType.SET)
    incremental(admin, topic_name, unstamp, bound)
    refused = produced()  # CreateTime again, and a timestamp of 1970 is now too old
    assert refused.error_code == ErrorCode.INVALID_TIMESTAMP


def test_a_successful_create_topics_answers_a_null_error_message(brokkr_broker):
    spec = request_spec(19)
    topic = spec.struct("CreatableTopic")(name="fresh", num_partitions=1, replication_factor=1)
    with RawClient(brokkr_broker.bootstrap_servers) as c:
        [result] = c.request(19, 7, spec.cls(topics=[topic], timeout_ms=5000)).topics
    assert result.error_code == ErrorCode.NONE and result.error_message is None


def test_dynamic_broker_defaults_reach_every_topic_at_once_and_persist(brokkr_broker_factory, tmp_path, topic_name):
    log_dir = tmp_path / "data"
    broker = brokkr_broker_factory({"log.dirs": str(log_dir), "log.retention.ms": "7200000"})
    ck_create_topic(broker.bootstrap_servers, topic_name)
    ck_create_topic(broker.bootstrap_servers, topic_name + "-own", config={"retention.ms": "60000"})
    admin = ck_admin(broker.bootstrap_servers)
    resource = ConfigResource(
        ConfigResource.Type.BROKER,
        "0",  # this broker's own dynamic settings
        incremental_configs=[
            ConfigEntry("log.retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("log.segment.bytes", "20000", incremental_operation=AlterConfigOpType.SET),
        ],
    )
    admin.incremental_alter_configs([resource], request_timeout=10)[resource].result(timeout=DEFAULT_TIMEOUT)
    configs = ck_describe_topic_configs(broker.bootstrap_servers, topic_name)
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    assert ck_describe_topic_configs(broker.bootstrap_servers, topic_name + "-own")["retention.ms"].value == "60000"
    producer = ck_producer(broker.bootstrap_servers, **{"batch.size": 1000})
    for i in range(40):
        producer.produce(topic_name, key=b"k%d" % i, value=b"x" * 1000)
        producer.poll(0)
    ck_flush(producer)
    assert len(broker.partition(topic_name, 0).log.segments()) > 1, "segments roll at the new default, live"

    broker_resource = ConfigResource(ConfigResource.Type.BROKER, "0")
    described = admin.describe_configs([broker_resource], request_timeout=10)[broker_resource].result(timeout=10)
    assert described["log.retention.ms"].value == "3600000" and not described["log.retention.ms"].is_read_only
    assert described["num.partitions"].is_read_only

    broker.stop()
    broker = brokkr_broker_factory({"log.dirs": str(log_dir), "log.retention.ms": "7200000"})
    assert broker.topics[topic_name].config["retention.ms"] == 3600000, "kept across a restart, over the static value"


@pytest.mark.brokkr_config(group_initial_rebalance_delay_ms=0)
def test_kafka_python_describes_groups_at_v6(brokkr_broker, topic_name):
    """DescribeGroups v6 (KIP-1043) in its own layout: kafka-python reads a classic group's
    members, and an unknown group's GROUP_ID_NOT_FOUND with Kafka's message."""
    import time

    from kafka import KafkaConsumer

    ck_create_topic(brokkr_broker.bootstrap_servers, topic_name)
    consumer = KafkaConsumer(topic_name, bootstrap_servers=brokkr_broker.bootstrap_servers, group_id="six")
    admin = KafkaAdminClient(bootstrap_servers=brokkr_broker.bootstrap_servers)
    try:
        deadline = time.monotonic() + DEFAULT_TIMEOUT
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(timeout_ms=200)
        described = admin.describe_groups(["six", "nobody"])
    finally:
        admin.close()
        consumer.close()
    six = described["six"]
    assert (six["error"], six["group_state"], six["protocol_type"]) == (None, "Stable", "consumer")
    (member,) = six["members"]
    assert member["member_metadata"]["topics"] == [topic_name]
    assert member["member_assignment"]["assigned_partitions"][0]["topic"] == topic_name
    nobody = described["nobody"]
    assert nobody["group_state"] == "Dead" and "GroupIdNotFoundError: Group nobody not found." in nobody["error"]


def test_describe_quorum_answers_from_the_broker_alone(brokkr_broker):
    """A lone broker is its own controller: kafka-python's describe_metadata_quorum gets it
    as leader (epoch 0) and only voter; there is no metadata log, so its offsets are 0."""
    admin = KafkaAdminClient(bootstrap_servers=brokkr_broker.bootstrap_servers)
    try:
        quorum = admin.describe_metadata_quorum()
    finally:
        admin.close()
    (topic,) = quorum["topics"]
    (p,) = topic["partitions"]
    node = brokkr_broker.broker.node_id
    assert (topic["topic_name"], p["partition_index"], p["error"]) == ("__cluster_metadata", 0, None)
    assert (p["leader_id"], p["leader_epoch"], p["high_watermark"], p["observers"]) == (node, 0, 0, [])
    assert [(v["replica_id"], v["log_end_offset"]) for v in p["current_voters"]] == [(node, 0)]
    host, port = brokkr_broker.bootstrap_servers.rsplit(":", 1)
    assert [(n["node_id"], [(x["host"], x["port"]) for x in n["listeners"]]) for n in quorum["nodes"]] == [
        (node, [(host, int(port))])
    ]

    spec = request_spec(DESCRIBE_QUORUM)
    topic_data, partition_data = spec.struct("TopicData"), spec.struct("PartitionData")
    with RawClient(brokkr_broker.bootstrap_servers) as c:
        for name, index in (("__cluster_metadata", 1), ("orders", 0)):
            body = spec.cls(topics=[topic_data(topic_name=name, partitions=[partition_data(partition_index=index)])])
            (answered,) = c.request(DESCRIBE_QUORUM, 2, body).topics[0].partitions
            assert (answered.partition_index, answered.error_code) == (index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)


def test_list_config_resources_lists_topics_and_brokers(brokkr_broker, topic_name):
    """kafka-python's list_config_resources (ListConfigResources v1, KIP-1142) gets every topic
    and the broker, one type or all; v0 lists client-metrics resources only (brokkr keeps
    none) and a type Kafka 4.1 does not list answers UNSUPPORTED_VERSION."""
    ck_create_topic(brokkr_broker.bootstrap_servers, topic_name)
    admin = KafkaAdminClient(bootstrap_servers=brokkr_broker.bootstrap_servers)
    try:
        everything = admin.list_config_resources()
        topics = admin.list_config_resources(["TOPIC"])
    finally:
        admin.close()
    node = str(brokkr_broker.broker.node_id)
    assert everything == {"broker": [node], "topic": sorted(brokkr_broker.broker.topics)}
    assert topic_name in everything["topic"]
    assert topics == {"topic": everything["topic"]}

    spec = request_spec(LIST_CONFIG_RESOURCES)
    with RawClient(brokkr_broker.bootstrap_servers) as c:
        v0 = c.request(LIST_CONFIG_RESOURCES, 0, spec.cls())
        unknown = c.request(LIST_CONFIG_RESOURCES, 1, spec.cls(resource_types=[2, 64]))
    assert (v0.error_code, v0.config_resources) == (ErrorCode.NONE, [])
    assert (unknown.error_code, unknown.config_resources) == (ErrorCode.UNSUPPORTED_VERSION, [])
