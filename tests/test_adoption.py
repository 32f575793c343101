"""Adopting a log directory written by a Kafka broker loses nothing: topics keep the ids
and settings Kafka's KRaft metadata log gives them, or get no time/size retention without
it; they are recorded in the catalog; new batches continue the partitions' leader epochs;
``__cluster_metadata`` is never served as a topic."""

from __future__ import annotations

import json
import logging
import shutil
import time
import uuid
from pathlib import Path

import pytest
from brokkr.core.client import RawClient
from brokkr.core.errors import ErrorCode
from brokkr.core.protocol.primitives import Writer
from brokkr.core.protocol.records import build_batch, iter_batches_untrusted
from brokkr.core.protocol.schema import load_message
from brokkr.plugins.storage.segment import files, kraft

from tests.wire import FETCH, METADATA, PRODUCE, batch, fetch_body, metadata_body, produce_body

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import KafkaException, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

KAFKA_LOGS = Path(__file__).parent / "fixtures" / "kafka-logs"
KSQL = "_confluent-ksql-default__command_topic"
OLD = "dspiderTask"  # records from 2022, written by a broker without KRaft metadata


def kafka_log_dir(tmp_path: Path, *dirs: str, renamed: dict[str, str] | None = None) -> Path:
    log_dir = tmp_path / "kafka-data"
    log_dir.mkdir()
    for name in dirs:
        shutil.copytree(KAFKA_LOGS / name, log_dir / (renamed or {}).get(name, name))
    return log_dir


def segment_files(log_dir: Path) -> dict[str, list[str]]:
    return {d.name: sorted(p.name for p in d.glob("*.log")) for d in log_dir.iterdir() if d.is_dir()}


def test_kraft_metadata_gives_adopted_topics_their_ids_and_settings(tmp_path, brokkr_broker_factory, caplog):
    log_dir = kafka_log_dir(tmp_path, "__cluster_metadata-0", f"{KSQL}-0", "__transaction_state-44", f"{OLD}-2")
    metadata_before = {p.name: p.read_bytes() for p in (log_dir / "__cluster_metadata-0").iterdir()}
    with caplog.at_level(logging.INFO, logger="brokkr.storage"):
        broker = brokkr_broker_factory({"log.dirs": str(log_dir)})

    ksql = broker.topics[KSQL]
    assert ksql.topic_id == uuid.UUID("4ef4284e-ad0a-4475-962c-a43ae1dd607f")
    assert ksql.config["retention.ms"] == -1 and ksql.config["cleanup.policy"] == ["delete"]
    txn = broker.topics["__transaction_state"]
    assert txn.config["cleanup.policy"] == ["compact"], "a compacted Kafka topic stays compacted"
    assert len(txn.partitions) == 50 and txn.config["segment.bytes"] == 104857600
    # Not in the metadata log (another broker wrote it): kept, with no time or size retention.
    old = broker.topics[OLD]
    assert old.config["retention.ms"] == -1 and old.config["retention.bytes"] == -1
    assert len(old.partitions) == 3
    assert any(OLD in r.getMessage() and "retention.ms=-1" in r.getMessage() for r in caplog.records)
    assert any("unclean.leader.election.enable" in r.getMessage() for r in caplog.records), "dropped settings named"

    # Recorded in the catalog, with their settings.
    catalog = {t["name"]: t for t in json.loads((log_dir / files.CATALOG).read_text())["topics"]}
    assert catalog[KSQL]["topic_id"] == "4ef4284e-ad0a-4475-962c-a43ae1dd607f"
    assert catalog[KSQL]["configs"]["retention.ms"] == "-1"
    assert catalog["__transaction_state"]["configs"]["cleanup.policy"] == "compact"
    assert catalog[OLD]["configs"] == {"retention.ms": "-1", "retention.bytes": "-1"}

    # __cluster_metadata is not a topic, and its files are left exactly as they were.
    assert "__cluster_metadata" not in broker.topics
    broker.stop()
    assert {p.name: p.read_bytes() for p in (log_dir / "__cluster_metadata-0").iterdir()} == metadata_before


@pytest.mark.parametrize("with_metadata", [True, False])
def test_retention_never_deletes_adopted_data(tmp_path, brokkr_broker_factory, with_metadata):
    dirs = [f"{KSQL}-0", f"{OLD}-2"] + (["__cluster_metadata-0"] if with_metadata else [])
    log_dir = kafka_log_dir(tmp_path, *dirs)
    before = segment_files(log_dir)
    broker = brokkr_broker_factory({"log.dirs": str(log_dir), "log.retention.check.interval.ms": 50})
    starts = {name: broker.partition(name, i).log.log_start_offset for name, i in ((KSQL, 0), (OLD, 2))}
    time.sleep(0.5)  # ten retention checks; the 2022 records are far past Kafka's default 7 days
    assert broker.partition(OLD, 2).log.log_end_offset > 0
    assert {name: broker.partition(name, i).log.log_start_offset for name, i in ((KSQL, 0), (OLD, 2))} == starts
    after = segment_files(log_dir)
    assert all(after[d] == segs for d, segs in before.items() if segs)


def test_new_batches_continue_the_adopted_leader_epoch(tmp_path, brokkr_broker_factory):
    # Kafka wrote this partition's last batches at leader epoch 38.
    log_dir = kafka_log_dir(tmp_path, "__consumer_offsets-29", renamed={"__consumer_offsets-29": "copied-0"})
    broker = brokkr_broker_factory({"log.dirs": str(log_dir)})
    end = broker.partition("copied", 0).log.log_end_offset
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    producer.produce("copied", b"after adoption", partition=0)
    assert producer.flush(15) == 0
    broker.stop()
    data = b"".join(p.read_bytes() for p in sorted((log_dir / "copied-0").glob("*.log")))
    batches = list(iter_batches_untrusted(data))
    assert batches[-1].base_offset == end
    assert batches[-1].leader_epoch == 38 == max(b.leader_epoch for b in batches[:-1])
    epochs = files.read_leader_epochs(log_dir / "copied-0" / files.LEADER_EPOCH_CHECKPOINT)
    assert epochs[-1][0] == 38 and all(e <= 38 for e, _ in epochs)


def test_cluster_metadata_is_never_served_as_a_topic(tmp_path, brokkr_broker_factory):
    log_dir = kafka_log_dir(tmp_path, "__cluster_metadata-0")
    broker = brokkr_broker_factory({"log.dirs": str(log_dir)})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    assert "__cluster_metadata" not in admin.list_topics(timeout=10).topics
    future = admin.create_topics([NewTopic("__cluster_metadata", 1, 1)])["__cluster_metadata"]
    with pytest.raises(KafkaException) as info:
        future.result(timeout=10)
    assert info.value.args[0].code() == confluent_kafka.KafkaError.INVALID_REQUEST
    assert "Creation of internal topic __cluster_metadata is prohibited." in info.value.args[0].str()
    assert "__cluster_metadata" not in broker.topics


@pytest.mark.parametrize("source", ["leader-epoch-checkpoint", "metadata log"])
def test_new_batches_take_the_latest_epoch_even_without_a_batch_at_it(tmp_path, brokkr_broker_factory, source):
    # The KSQL partition's two batches are at epoch 0; Kafka then led it at epoch 38 (its
    # leader-epoch-checkpoint holds "38 2", and so does the metadata log's PartitionRecord).
    log_dir = kafka_log_dir(tmp_path, f"{KSQL}-0", *(["__cluster_metadata-0"] if source == "metadata log" else []))
    checkpoint = log_dir / f"{KSQL}-0" / files.LEADER_EPOCH_CHECKPOINT
    if source == "metadata log":
        checkpoint.unlink()
    broker = brokkr_broker_factory({"log.dirs": str(log_dir)})
    # the checkpoint is written on the storage's flusher thread: wait for its queue
    broker.call(lambda: broker.broker.storage.flusher.submit(lambda: None)).result(timeout=10)
    assert files.read_leader_epochs(checkpoint)[-1] == (38, 2)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    producer.produce(KSQL, b"after adoption", partition=0)
    assert producer.flush(15) == 0
    broker.stop()
    data = b"".join(p.read_bytes() for p in sorted((log_dir / f"{KSQL}-0").glob("*.log")))
    batches = list(iter_batches_untrusted(data))
    assert [(b.base_offset, b.leader_epoch) for b in batches] == [(0, 0), (1, 0), (2, 38)]
    assert files.read_leader_epochs(checkpoint)[-1] == (38, 2)


def test_cluster_metadata_is_refused_on_produce_and_fetch(tmp_path, brokkr_broker_factory):
    log_dir = kafka_log_dir(tmp_path, "__cluster_metadata-0")
    before = {p.name: p.read_bytes() for p in (log_dir / "__cluster_metadata-0").iterdir()}
    broker = brokkr_broker_factory({"log.dirs": str(log_dir)})
    with RawClient(broker.bootstrap_servers) as client:
        [topic] = client.request(METADATA, 12, metadata_body("__cluster_metadata")).topics
        assert topic.error_code == ErrorCode.INVALID_REQUEST and not topic.partitions
        [t] = client.request(PRODUCE, 9, produce_body("__cluster_metadata", batch(2))).responses
        assert t.partition_responses[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        [t] = client.request(FETCH, 12, fetch_body("__cluster_metadata")).responses
        assert t.partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and not t.partitions[0].records
    assert "__cluster_metadata" not in broker.topics
    broker.stop()
    assert {p.name: p.read_bytes() for p in (log_dir / "__cluster_metadata-0").iterdir()} == before


def metadata_record(record: str, api_key: int, version: int, **fields) -> bytes:
    """A metadata record framed as Kafka's MetadataRecordSerde writes it."""
    spec = load_message(record, "metadata_records")
    w = Writer()
    for v in (1, api_key, version):
        w.uvarint(v)
    return bytes(spec.encode(version, spec.cls(**fields), w).buf)


def test_metadata_log_segments_after_the_snapshot_are_applied(tmp_path):
    log_dir = kafka_log_dir(tmp_path, "__cluster_metadata-0")
    ksql_id = uuid.UUID("4ef4284e-ad0a-4475-962c-a43ae1dd607f")
    schemas_id = uuid.UUID("15ad6d1e-6a30-412d-a54b-252b11de2348")
    records = [
        metadata_record("PartitionChangeRecord", 5, 0, partition_id=0, topic_id=ksql_id, leader=1),
        metadata_record("PartitionChangeRecord", 5, 0, partition_id=0, topic_id=ksql_id, isr=[1]),  # same leader
        metadata_record("ConfigRecord", 4, 0, resource_type=2, resource_name=KSQL, name="retention.ms", value="1000"),
        metadata_record("RemoveTopicRecord", 9, 0, topic_id=schemas_id),
    ]
    # One batch before the snapshot's end offset (already in it: skipped), one after.
    stale = build_batch([(None, records[0])], base_offset=60499)
    fresh = build_batch([(None, r) for r in records], base_offset=60500)
    (log_dir / "__cluster_metadata-0" / "00000000000000060000.log").write_bytes(stale + fresh)
    topics = kraft.read_kraft_topics(log_dir, {})
    assert topics[KSQL].leader_epochs == {0: 39}
    assert topics[KSQL].configs["retention.ms"] == "1000"
    assert "_schemas" not in topics and topics["__transaction_state"].leader_epochs[44] == 38
