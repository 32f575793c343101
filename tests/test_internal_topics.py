"""Internal topics (``__consumer_offsets``, ``__transaction_state``) belong to their
coordinators: a client can neither append to them nor delete their records
(INVALID_TOPIC_EXCEPTION, as Kafka's ReplicaManager answers) nor create them (INVALID_REQUEST); Metadata's auto-creation and a
coordinator's first use create them with their own settings; a creation cut short by a
full disk leaves no half topic behind; their directories found without a catalog entry
are adopted with their own settings, never a foreign topic's."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time

import pytest
from brokkr.core.broker import Broker
from brokkr.core.errors import ConfigError, ErrorCode
from brokkr.core.protocol.frames import request_spec
from brokkr.core.protocol.records import build_batch
from brokkr.core.testing import RawClient
from brokkr.plugins.groups import coordinator_of
from brokkr.plugins.groups.coordinator import OFFSETS_TOPIC, partition_for
from brokkr.plugins.groups.offsets import OffsetAndMetadata, offset_key, offset_value
from brokkr.plugins.storage.segment import files
from brokkr.plugins.transactions.coordinator import TRANSACTION_STATE_TOPIC
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from serve import Served
from test_full_disk import fill, small_disk  # noqa: F401 (small_disk: the fixture)
from txn_coordinator import ready
from wire import METADATA, PRODUCE, metadata_body, produce_body

FIND_COORDINATOR = 10
#: Small internal topics, so that creating them takes milliseconds.
SMALL = {
    "offsets.topic.num.partitions": 3,
    "transaction.state.log.num.partitions": 3,
    "group.initial.rebalance.delay.ms": 0,
}
SEGMENT_BYTES = str(100 * 1024 * 1024)  # offsets.topic.segment.bytes' default


def commit(bootstrap: str, group: str, offset: int) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition("t", 0, offset)], asynchronous=False)
    finally:
        consumer.close()


def committed(bootstrap: str, group: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        [tp] = consumer.committed([TopicPartition("t", 0)], timeout=15)
        return tp.offset
    finally:
        consumer.close()


def topic_settings(bootstrap: str, topic: str) -> tuple[int, dict[str, str]]:
    """A topic's partition count and settings, as an admin client sees them."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    partitions = len(admin.list_topics(topic, timeout=10).topics[topic].partitions)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(timeout=10)
    return partitions, {name: entry.value for name, entry in entries.items()}


def forged_commit(group: str, offset: int) -> tuple[bytes, bytes]:
    """An OffsetCommit record of ``group`` for t-0, as the coordinator would write it."""
    value = OffsetAndMetadata(offset, -1, "", int(time.time() * 1000))
    return offset_key(group, "t", 0), offset_value(value)


def test_a_forged_offset_commit_is_refused_and_the_committed_offset_survives_a_restart(brokkr_broker_factory, tmp_path):
    settings = {**SMALL, "log.dirs": str(tmp_path / "data")}
    b = brokkr_broker_factory(settings)
    b.call(b.broker.create_topic, "t", 1)
    commit(b.bootstrap_servers, "victim", 5)
    ready(b)  # __transaction_state exists too
    index = partition_for("victim", 3)
    ends = {t: b.broker.partition(t, index).log.log_end_offset for t in (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC)}
    key, value = forged_commit("victim", 999999)

    failures = []
    producer = Producer({"bootstrap.servers": b.bootstrap_servers, "retries": 0})
    producer.produce(OFFSETS_TOPIC, value, key, partition=index, on_delivery=lambda err, msg: failures.append(err))
    assert producer.flush(15) == 0
    del producer  # its connections go with it, before the broker does
    assert [err and err.code() for err in failures] == [KafkaError.TOPIC_EXCEPTION]
    with RawClient(b.bootstrap_servers) as c:  # and on the wire, to both internal topics
        for topic in (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC):
            [answer] = c.request(
                PRODUCE, 9, produce_body(topic, build_batch([(key, value)]), partition=index)
            ).responses
            assert answer.partition_responses[0].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
            assert answer.partition_responses[0].base_offset == -1
    assert {t: b.broker.partition(t, index).log.log_end_offset for t in ends} == ends, "nothing was stored"
    assert committed(b.bootstrap_servers, "victim") == 5
    admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
    [deleting] = admin.delete_records([TopicPartition(OFFSETS_TOPIC, index, 1)], request_timeout=10).values()
    with pytest.raises(KafkaException) as refused:  # Kafka: "Cannot delete records of internal topic"
        deleting.result(timeout=15)
    assert refused.value.args[0].code() == KafkaError.TOPIC_EXCEPTION
    assert b.broker.partition(OFFSETS_TOPIC, index).log.log_start_offset == 0

    b.stop()
    restarted = brokkr_broker_factory(settings)
    restarted.call(coordinator_of(restarted.broker).wait_loaded)
    assert committed(restarted.bootstrap_servers, "victim") == 5


def test_a_client_cannot_create_an_internal_topic_and_groups_still_work(brokkr_broker_factory):
    b = brokkr_broker_factory(SMALL)
    b.call(b.broker.create_topic, "t", 1)
    admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
    for topic in (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC):
        future = admin.create_topics([NewTopic(topic, 1, 1)])[topic]
        with pytest.raises(KafkaException) as refused:
            future.result(timeout=10)
        assert refused.value.args[0].code() == KafkaError.INVALID_REQUEST
        assert f"Creation of internal topic {topic} is prohibited." in refused.value.args[0].str()
        assert topic not in b.broker.topics

    commit(b.bootstrap_servers, "g", 7)  # the first lookup creates __consumer_offsets, its own way
    assert committed(b.bootstrap_servers, "g") == 7
    partitions, configs = topic_settings(b.bootstrap_servers, OFFSETS_TOPIC)
    assert partitions == 3 and configs["cleanup.policy"] == "compact"


def test_metadata_auto_creates_an_internal_topic_with_its_own_settings(brokkr_broker_factory):
    b = brokkr_broker_factory(SMALL)
    with RawClient(b.bootstrap_servers) as c:
        [first] = c.request(METADATA, 12, metadata_body(OFFSETS_TOPIC)).topics
        assert (first.error_code, first.is_internal) == (ErrorCode.LEADER_NOT_AVAILABLE, True)
        b.call(coordinator_of(b.broker).wait_loaded)
        [then] = c.request(METADATA, 12, metadata_body(OFFSETS_TOPIC)).topics
    assert (then.error_code, then.is_internal, len(then.partitions)) == (0, True, 3)
    partitions, configs = topic_settings(b.bootstrap_servers, OFFSETS_TOPIC)
    assert configs["cleanup.policy"] == "compact" and configs["segment.bytes"] == SEGMENT_BYTES
    b.call(b.broker.create_topic, "t", 1)
    commit(b.bootstrap_servers, "g", 3)  # the coordinator owns what Metadata created
    assert committed(b.bootstrap_servers, "g") == 3


def test_a_full_disk_at_the_first_group_lookup_leaves_no_half_offsets_topic(small_disk, tmp_path):  # noqa: F811
    args = ["--override=listeners=PLAINTEXT://127.0.0.1:0", f"--override=log.dirs={small_disk / 'data'}"]
    args += [f"--override={k}={v}" for k, v in SMALL.items()]
    served = Served(*args, cwd=tmp_path)
    try:
        fill(small_disk)
        with RawClient(served.address) as c:
            lookups = []
            for _ in range(5):  # each lookup tries the creation again
                answer = c.request(FIND_COORDINATOR, 3, request_spec(FIND_COORDINATOR).cls(key="g", key_type=0))
                lookups.append(answer.error_code)
                time.sleep(0.1)
        served.proc.send_signal(signal.SIGTERM)
        served.proc.wait(timeout=20)  # 1: its last checkpoint could not be written
    finally:
        if served.proc.poll() is None:
            served.kill()

    os.unlink(small_disk / "filler")
    restarted = Served(*args, cwd=tmp_path)
    try:
        admin = AdminClient({"bootstrap.servers": restarted.address})
        admin.create_topics([NewTopic("t", 1, 1)])["t"].result(timeout=10)
        commit(restarted.address, "g", 11)  # __consumer_offsets is created now, in full
        assert committed(restarted.address, "g") == 11
        partitions, configs = topic_settings(restarted.address, OFFSETS_TOPIC)
        assert partitions == 3
        assert configs["cleanup.policy"] == "compact" and configs["segment.bytes"] == SEGMENT_BYTES
        assert configs["retention.ms"] != "-1"
    finally:
        restarted.proc.send_signal(signal.SIGTERM)
        assert restarted.proc.wait(timeout=20) == 0
    assert set(lookups) == {ErrorCode.COORDINATOR_NOT_AVAILABLE}, "no coordinator on a topic not recorded"
    assert "Traceback" not in served.output()


def test_unlisted_internal_topic_directories_are_adopted_with_their_own_settings(brokkr_broker_factory, tmp_path):
    data = tmp_path / "data"
    settings = {**SMALL, "log.dirs": str(data)}
    b = brokkr_broker_factory(settings)
    b.call(b.broker.create_topic, "t", 1)
    commit(b.bootstrap_servers, "g", 9)
    b.stop()
    # As a copy of some of a broker's partitions (or an older brokkr's creation cut short)
    # leaves them: the catalog does not list the topic, and one partition is missing.
    catalog = json.loads((data / files.CATALOG).read_text())
    catalog["topics"] = [t for t in catalog["topics"] if t["name"] != OFFSETS_TOPIC]
    (data / files.CATALOG).write_text(json.dumps(catalog))
    empty = next(i for i in range(3) if i != partition_for("g", 3))
    shutil.rmtree(data / f"{OFFSETS_TOPIC}-{empty}")

    restarted = brokkr_broker_factory(settings)
    restarted.call(coordinator_of(restarted.broker).wait_loaded)
    assert committed(restarted.bootstrap_servers, "g") == 9
    partitions, configs = topic_settings(restarted.bootstrap_servers, OFFSETS_TOPIC)
    assert partitions == 3
    assert configs["cleanup.policy"] == "compact" and configs["segment.bytes"] == SEGMENT_BYTES
    assert configs["retention.ms"] != "-1"


@pytest.mark.parametrize(
    "setting",
    [
        "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor",
        "brokkr.schema.registry.kafkastore.topic.replication.factor",
    ],
)
def test_a_broker_alone_refuses_a_replicated_internal_topic(setting):
    with pytest.raises(ConfigError, match=f"{setting}=3 needs a cluster"):
        Broker({"listeners": "PLAINTEXT://127.0.0.1:0", setting: "3"})
