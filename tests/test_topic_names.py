"""Topic names as Kafka checks them, and names at the edge of what a file system holds."""

from __future__ import annotations

import time

import attrs
import pytest
from brokkr.core.errors import BrokkrError, ErrorCode
from brokkr.core.partition import validate_topic_name
from brokkr.core.protocol.frames import request_spec
from brokkr.core.testing import RawClient
from brokkr.plugins.storage.segment import files
from wire import metadata_body

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

METADATA, CREATE_TOPICS = 3, 19
CreateTopicsRequest = request_spec(CREATE_TOPICS).cls
CreatableTopic = request_spec(CREATE_TOPICS).struct("CreatableTopic")


@pytest.mark.parametrize("name", ["orders\n", "orders\r", "\norders", "a b", "", ".", "..", "x" * 250, "é"])
def test_illegal_names_are_refused(name):
    with pytest.raises(BrokkrError) as info:
        validate_topic_name(name)
    assert info.value.code == ErrorCode.INVALID_TOPIC_EXCEPTION


def test_a_trailing_newline_is_refused_by_create_topics_and_auto_creation(brokkr_broker):
    with RawClient(brokkr_broker.bootstrap_servers) as c:
        request = CreateTopicsRequest(
            topics=[CreatableTopic(name="orders\n", num_partitions=1, replication_factor=1)], timeout_ms=5000
        )
        [result] = c.request(CREATE_TOPICS, 7, request).topics
        assert result.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
        [topic] = c.request(METADATA, 12, metadata_body("orders\n")).topics
        assert topic.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert brokkr_broker.broker.topics == {}


def test_checkpoints_refuse_entries_that_would_not_read_back(tmp_path):
    path = tmp_path / files.RECOVERY_POINT_CHECKPOINT
    files.write_offset_checkpoint(path, {("orders", 0): 5})
    before = path.read_bytes()
    for bad in ("orders\n", "a b", ""):
        with pytest.raises(files.CorruptFile, match="would not read back"):
            files.write_offset_checkpoint(path, {("orders", 0): 7, (bad, 0): 1})
    assert path.read_bytes() == before, "the last good checkpoint is kept"
    assert files.read_offset_checkpoint(path) == {("orders", 0): 5}


def test_a_topic_with_the_longest_legal_name_is_deleted_for_good(brokkr_broker_factory, tmp_path):
    name = "t" * 249  # "<name>-0.<32 hex>-delete" would be 282 characters: too long for one file name
    log_dir = tmp_path / "data"
    broker = brokkr_broker_factory({"log.dirs": str(log_dir)})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(timeout=10)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    producer.produce(name, b"doomed")
    assert producer.flush(15) == 0

    admin.delete_topics([name])[name].result(timeout=10)
    assert name not in admin.list_topics(timeout=10).topics
    deadline = time.monotonic() + 10  # the renamed directory is removed in the background, as Kafka removes it
    while any(p.name.startswith("ttt") for p in log_dir.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(p.name.startswith("ttt") for p in log_dir.iterdir()), "no directory is left behind"
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(timeout=10)  # the name is free again
    broker.stop()

    broker = brokkr_broker_factory({"log.dirs": str(log_dir)})
    assert broker.partition(name, 0).log.log_end_offset == 0, "the deleted records do not come back"
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "unused"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(name, 0), timeout=10)
        assert (low, high) == (0, 0)
    finally:
        consumer.close()


def test_delete_directory_names_fit_in_255_bytes():
    for topic in ("t" * 249, "orders"):
        name = files.delete_dir_name(topic, 123)
        assert len(name) <= 255 and name.endswith("-delete") and name.startswith(topic[:200])
    assert files.delete_dir_name("orders", 3).startswith("orders-3.")


def test_a_stored_topic_with_an_illegal_name_stops_the_start_and_keeps_the_checkpoints(brokkr_broker_factory, tmp_path):
    """A newline-named topic written into the catalog below the API layer (as an older
    brokkr could) would make every checkpoint of its log directory unwritable: the broker
    refuses to start, saying which topic, and the checkpoints stay as they were."""
    log_dir = tmp_path / "data"
    broker = brokkr_broker_factory({"log.dirs": str(log_dir)})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic("orders", 1, 1)])["orders"].result(timeout=10)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    producer.produce("orders", b"kept")
    assert producer.flush(15) == 0
    broker.stop()
    checkpoint = log_dir / files.RECOVERY_POINT_CHECKPOINT
    before = checkpoint.read_bytes()
    assert files.read_offset_checkpoint(checkpoint) == {("orders", 0): 1}

    catalog = log_dir / files.CATALOG
    [orders] = files.read_catalog(catalog)
    files.write_catalog(catalog, [orders, attrs.evolve(orders, name="orders\n")])
    with pytest.raises(BrokkrError, match=r"the storage lists topic 'orders\\n'") as info:
        brokkr_broker_factory({"log.dirs": str(log_dir)})
    assert info.value.code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert checkpoint.read_bytes() == before
    assert not (log_dir / "orders\n-0").exists()
