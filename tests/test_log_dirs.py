"""A broker's log dirs as Kafka keeps them: locked while a process uses them (``.lock``),
``meta.properties`` of either version (a ZooKeeper-era broker's version 0 too), empty
checkpoint files read as empty, and retention that empties a partition whose only
segment is too old (adopted from Kafka or not)."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from brokkr.core.cli import main
from brokkr.core.errors import ConfigError
from brokkr.core.protocol.records import build_batch
from brokkr.plugins.storage.segment import files

from tests.integration.conftest import ck_consume, ck_flush, ck_producer
from tests.serve import Served
from tests.test_adoption import KSQL, OLD, kafka_log_dir, metadata_record, segment_files
from tests.waiting import wait_for

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource  # noqa: E402

LOCKED = (
    "Failed to acquire lock on file .lock in {}. A Kafka instance in another process or thread is using this directory."
)
WEEK_MS = str(7 * 24 * 3600 * 1000)


def brokkr(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "brokkr.core.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=30
    )


def broker_files(log_dir: Path) -> dict[str, bytes]:
    """The log dir's own files (meta.properties, checkpoints, the clean-shutdown marker)."""
    return {p.name: p.read_bytes() for p in log_dir.iterdir() if p.is_file()}


# -- the lock ----------------------------------------------------------------------------


def test_a_second_process_on_a_live_log_dir_is_refused_and_changes_nothing(tmp_path):
    data = tmp_path / "data"
    settings = ["--override", f"log.dirs={data}", "--override", "listeners=PLAINTEXT://127.0.0.1:0"]
    first = Served(*settings, "--override", "log.flush.offset.checkpoint.interval.ms=3600000", cwd=tmp_path)
    try:
        producer = ck_producer(first.address)
        producer.produce("live", b"before")
        ck_flush(producer)
        before = broker_files(data)
        assert files.CLEAN_SHUTDOWN not in before

        second = brokkr("serve", *settings, cwd=tmp_path)
        assert second.returncode == 1
        assert second.stderr.strip().splitlines()[-1] == f"brokkr: {LOCKED.format(data)}"
        assert "Traceback" not in second.stderr and "listening" not in second.stderr
        scram = brokkr("scram", "list", "--override", f"log.dirs={data}", cwd=tmp_path)
        assert (scram.returncode, scram.stderr.strip()) == (1, f"brokkr: {LOCKED.format(data)}")
        mirror = brokkr("mirror", "--log-dir", str(data), "--lake", str(tmp_path / "lake"), cwd=tmp_path)
        assert (mirror.returncode, mirror.stderr.strip()) == (1, f"brokkr: {LOCKED.format(data)}")
        assert not (tmp_path / "lake").exists()
        assert broker_files(data) == before, "no checkpoint or clean-shutdown marker written by them"

        producer.produce("live", b"after")
        ck_flush(producer)
        assert [r.value for r in ck_consume(first.address, "live", 2)] == [b"before", b"after"]
        first.proc.send_signal(signal.SIGTERM)
        assert first.proc.wait(timeout=20) == 0
    finally:
        first.kill()
    assert (data / files.CLEAN_SHUTDOWN).exists()
    assert brokkr("scram", "list", "--override", f"log.dirs={data}", cwd=tmp_path).returncode == 0, "released"


def test_an_embedded_broker_holds_its_log_dir_until_it_stops(tmp_path, brokkr_broker_factory, capsys):
    data = tmp_path / "data"
    broker = brokkr_broker_factory({"log.dirs": str(data)})
    with pytest.raises(files.LogDirInUse, match="Failed to acquire lock on file .lock in"):
        brokkr_broker_factory({"log.dirs": str(data)})  # in this same process
    assert main(["scram", "add", "ann", "--password", "secret", "--override", f"log.dirs={data}"]) == 1
    assert capsys.readouterr().err.strip() == f"brokkr: {LOCKED.format(data)}"
    assert not files.state_file(data, "scram-credentials").exists()
    broker.stop()
    assert main(["scram", "add", "ann", "--password", "secret", "--override", f"log.dirs={data}"]) == 0
    brokkr_broker_factory({"log.dirs": str(data)}).stop()  # and again, in one process
    brokkr_broker_factory({"log.dirs": str(data)})


# -- meta.properties ---------------------------------------------------------------------

#: As a Kafka 3.x broker in ZooKeeper mode writes it (version 0: broker.id, cluster.id).
ZOOKEEPER_META = "#\n#Tue Mar 08 10:15:42 UTC 2022\ncluster.id=p8yxUTtnRX2kBy8FIT6u0A\nversion=0\nbroker.id=1\n"


def test_a_zookeeper_era_log_dir_opens_with_its_broker_id(tmp_path, brokkr_broker_factory):
    log_dir = kafka_log_dir(tmp_path, f"{OLD}-2")
    (log_dir / files.META_PROPERTIES).write_text(ZOOKEEPER_META)
    broker = brokkr_broker_factory({"log.dirs": str(log_dir), "broker.id": "1"})
    end = broker.partition(OLD, 2).log.log_end_offset
    assert end > 100
    records = ck_consume(broker.bootstrap_servers, OLD, end, partition=2, timeout=20)
    assert [r.offset for r in records] == list(range(end))
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    assert admin.list_topics(timeout=10).cluster_id == "p8yxUTtnRX2kBy8FIT6u0A"
    broker.stop()
    assert (log_dir / files.META_PROPERTIES).read_text() == ZOOKEEPER_META, "Kafka's file is left as it is"


@pytest.mark.parametrize("settings", [{"broker.id": "2"}, {"node.id": "2"}, {}])
def test_a_zookeeper_era_log_dir_of_another_broker_id_is_refused(tmp_path, brokkr_broker_factory, settings):
    log_dir = kafka_log_dir(tmp_path, f"{OLD}-2")
    (log_dir / files.META_PROPERTIES).write_text(ZOOKEEPER_META)
    ours = settings.get("broker.id", settings.get("node.id", "0"))
    with pytest.raises(ConfigError) as info:
        brokkr_broker_factory({"log.dirs": str(log_dir), **settings})
    assert str(info.value) == (
        f"Stored node id 1 doesn't match previous node id {ours} in {log_dir / files.META_PROPERTIES}. If you moved "
        "your data, make sure your configured node id matches. If you intend to create a new node, you should "
        "remove all data in your data directories."
    )
    assert segment_files(log_dir) == {f"{OLD}-2": ["00000000000000000000.log"]}
    assert not (log_dir / files.CATALOG).exists()


@pytest.mark.parametrize(
    "text, problem",
    [
        ("version=2\nnode.id=0\ncluster.id=c\n", "Unknown meta.properties version number 2"),
        ("version=one\nnode.id=0\ncluster.id=c\n", "Invalid meta.properties version string 'one'"),
        ("version=1\nnode.id=0\n", "cluster.id was not found."),
        ("version=1\ncluster.id=c\n", "node.id was not found."),
    ],
)
def test_a_meta_properties_kafka_refuses_is_refused(tmp_path, brokkr_broker_factory, text, problem):
    data = tmp_path / "data"
    data.mkdir()
    (data / files.META_PROPERTIES).write_text(text)
    with pytest.raises(ConfigError) as info:
        brokkr_broker_factory({"log.dirs": str(data)})
    assert str(info.value) == f"{data / files.META_PROPERTIES}: {problem}"
    (data / files.META_PROPERTIES).write_text("version=1\nnode.id=0\ncluster.id=c\n")
    assert brokkr_broker_factory({"log.dirs": str(data)}).broker.cluster_id == "c", "the refused start let go of it"


# -- checkpoints -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "checkpoint",
    [
        files.CLEANER_CHECKPOINT,
        files.RECOVERY_POINT_CHECKPOINT,
        files.LOG_START_CHECKPOINT,
        files.REPLICATION_CHECKPOINT,
    ],
)
def test_an_empty_checkpoint_file_keeps_a_clean_start(tmp_path, brokkr_broker_factory, caplog, checkpoint):
    """Kafka creates its checkpoint files empty (0 bytes) and reads an empty one as empty."""
    data = tmp_path / "data"
    broker = brokkr_broker_factory({"log.dirs": str(data)})
    producer = ck_producer(broker.bootstrap_servers)
    producer.produce("kept", b"v")
    ck_flush(producer)
    broker.stop()
    (data / checkpoint).write_bytes(b"")
    with caplog.at_level(logging.WARNING, logger="brokkr.storage"):
        broker = brokkr_broker_factory({"log.dirs": str(data)})
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert broker.broker.storage.clean[data]
    assert [r.value for r in ck_consume(broker.bootstrap_servers, "kept", 1)] == [b"v"]


# -- retention of adopted partitions -----------------------------------------------------


def set_topic_config(bootstrap: str, topic: str, name: str, value: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entry = ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource("TOPIC", topic, incremental_configs=[entry])
    admin.incremental_alter_configs([resource])[resource].result(timeout=10)


@pytest.mark.parametrize("retention_from", ["metadata log", "altered"])
def test_an_adopted_partition_whose_only_segment_is_too_old_is_emptied(tmp_path, brokkr_broker_factory, retention_from):
    if retention_from == "metadata log":  # it gives the topic retention.ms; the records are from 2024
        topic, partition = KSQL, 0
        log_dir = kafka_log_dir(tmp_path, "__cluster_metadata-0", f"{KSQL}-0")
        config = metadata_record(
            "ConfigRecord", 4, 0, resource_type=2, resource_name=KSQL, name="retention.ms", value=WEEK_MS
        )
        (log_dir / "__cluster_metadata-0" / "00000000000000060500.log").write_bytes(
            build_batch([(None, config)], base_offset=60500)
        )
    else:  # no metadata log: no retention until an operator sets it (records from 2022)
        topic, partition = OLD, 2
        log_dir = kafka_log_dir(tmp_path, f"{OLD}-2")
    broker = brokkr_broker_factory({"log.dirs": str(log_dir), "log.retention.check.interval.ms": 50})
    plog = broker.partition(topic, partition).log
    end = plog.log_end_offset
    assert len(plog.segments()) == 1 and end > 0
    if retention_from == "altered":
        time.sleep(0.3)  # several retention checks
        assert plog.log_start_offset == 0 and segment_files(log_dir)[f"{OLD}-2"] == ["00000000000000000000.log"]
        set_topic_config(broker.bootstrap_servers, topic, "retention.ms", WEEK_MS)
    assert broker.topics[topic].config["retention.ms"] == int(WEEK_MS)

    wait_for("retention to drop the only segment", lambda: plog.log_start_offset == end, timeout=10)
    wait_for("its files to go", lambda: segment_files(log_dir)[f"{topic}-{partition}"] == [f"{end:020d}.log"])
    [segment] = plog.segments()
    assert (segment.base_offset, segment.size) == (end, 0)
    producer = ck_producer(broker.bootstrap_servers)
    producer.produce(topic, b"after retention", partition=partition)
    ck_flush(producer)
    [record] = ck_consume(broker.bootstrap_servers, topic, 1, partition=partition)
    assert (record.offset, record.value) == (end, b"after retention")
    assert plog.log_start_offset == end, "the new record is not too old"
