"""A broker's log dirs as Kafka keeps them: locked while a process uses them (``.lock``),
``meta.properties`` of either version (a ZooKeeper-era broker's version 0 too), empty
checkpoint files read as empty, retention that empties a partition whose only segment is
too old (adopted from Kafka or not), and replicas moved between log dirs
(AlterReplicaLogDirs) under appends, given up, or interrupted by a crash."""

from __future__ import annotations

import logging
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from brokkr.core.cli import main
from brokkr.core.errors import ConfigError
from brokkr.core.protocol.records import build_batch
from brokkr.core.testing import RawClient
from brokkr.plugins.storage.segment import files

from tests.integration.conftest import ck_consume, ck_flush, ck_producer
from tests.serve import Served
from tests.test_adoption import KSQL, OLD, kafka_log_dir, metadata_record, segment_files
from tests.waiting import wait_for
from tests.wire import PRODUCE, batch, produce_body

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
    assert main(["scram", "list", "--override", f"log.dirs={data}"]) == 0
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


# -- moving a replica between log dirs (AlterReplicaLogDirs) ------------------------------------


def test_a_replica_moves_to_the_other_log_dir_under_appends_and_is_read_back_after_a_restart(
    tmp_path, brokkr_broker_factory, monkeypatch
):
    """kafka-python's alter_replica_log_dirs moves a partition's replica to the other of two
    log dirs while a producer goes on appending: it answers at once; the copy catches up a
    batch a turn of the loop (made small here), appends included; DescribeLogDirs shows the
    replica being filled as a future one; the swap waits while the cleaner works on the
    log, then loses no record; after a restart the data is read from the new dir, an
    aborted transaction still aborted. Kafka's errors for a dir or partition it lacks."""
    from brokkr.core import partition as partition_module
    from kafka import TopicPartitionReplica
    from kafka.admin import KafkaAdminClient
    from kafka.errors import LogDirNotFoundError, NoError, UnknownTopicOrPartitionError

    monkeypatch.setattr(partition_module, "MOVE_STEP_BYTES", 1)  # one batch a step
    a, b = tmp_path / "a", tmp_path / "b"
    config = {"log.dirs": f"{a},{b}", "transaction.state.log.replication.factor": 1}
    broker = brokkr_broker_factory(config)
    broker.call(broker.broker.create_topic, "moving", 1)
    with RawClient(broker.bootstrap_servers) as c:
        for i in range(1000):
            c.request(PRODUCE, 9, produce_body("moving", batch(1, value=b"%d" % i)))
    txn = ck_producer(broker.bootstrap_servers, **{"transactional.id": "mover"})
    txn.init_transactions(10)
    txn.begin_transaction()
    txn.produce("moving", b"aborted")
    ck_flush(txn)  # in the log, then aborted
    txn.abort_transaction(10)
    partition = broker.partition("moving", 0)
    source = partition.log.dir.parent
    target = b if source == a else a

    n = 1300
    producer = ck_producer(broker.bootstrap_servers)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    node = broker.broker.node_id
    try:
        partition.log.cleaning = True  # as while the cleaner works on it: the move copies, but does not swap
        moving = TopicPartitionReplica("moving", 0, node)
        assert admin.alter_replica_log_dirs({moving: str(target)}) == {moving: NoError}
        for i in range(1000, n):  # one at a time, each appended while the log moves
            producer.produce("moving", b"%d" % i)
            ck_flush(producer)
        move = partition.log_move
        wait_for("the copy", lambda: move.future.log_end_offset == partition.log.log_end_offset)
        (described,) = admin.describe_log_dirs()
        where = {
            d["log_dir"]: [p for t in d["topics"] if t["name"] == "moving" for p in t["partitions"]]
            for d in described["log_dirs"]
        }
        assert [(p["is_future_key"], p["offset_lag"]) for p in where[str(source)]] == [(False, 0)]
        assert [(p["is_future_key"], p["offset_lag"]) for p in where[str(target)]] == [(True, 0)]
        assert partition.log_move is move, "the swap waits for the cleaner"
        partition.log.cleaning = False
        wait_for("the move", lambda: partition.log_move is None)
        assert partition.log.dir == target / "moving-0" and not (source / "moving-0").exists()
        assert admin.alter_replica_log_dirs({moving: str(target)}) == {moving: NoError}, "already there"
        elsewhere, unknown = str(tmp_path / "c"), TopicPartitionReplica("nope", 0, node)
        assert admin.alter_replica_log_dirs({moving: elsewhere, unknown: str(target)}) == {
            moving: LogDirNotFoundError,
            unknown: UnknownTopicOrPartitionError,
        }
    finally:
        admin.close()

    broker.stop()
    broker = brokkr_broker_factory(config)
    assert broker.partition("moving", 0).log.dir == target / "moving-0"
    records = ck_consume(broker.bootstrap_servers, "moving", n, **{"isolation.level": "read_committed"})
    assert [r.value for r in records] == [b"%d" % i for i in range(n)], "every record, in order, none aborted"


def test_a_move_given_up_leaves_the_log_where_it_was(tmp_path, brokkr_broker_factory):
    """A replica asked back to its own log dir while it moves, or a broker stopping in the
    middle of a move, gives the move up: its future log goes, the log stays and serves."""
    from kafka import TopicPartitionReplica
    from kafka.admin import KafkaAdminClient
    from kafka.errors import NoError

    a, b = tmp_path / "a", tmp_path / "b"
    config = {"log.dirs": f"{a},{b}"}
    broker = brokkr_broker_factory(config)
    broker.call(broker.broker.create_topic, "t", 1)
    with RawClient(broker.bootstrap_servers) as c:
        for i in range(10):
            c.request(PRODUCE, 9, produce_body("t", batch(1, value=b"%d" % i)))
    partition = broker.partition("t", 0)
    source = partition.log.dir.parent
    target = b if source == a else a

    def futures() -> list[str]:
        return [p.name for p in target.iterdir() if p.name.endswith("-future")]

    partition.log.cleaning = True  # holds the swap back
    replica = TopicPartitionReplica("t", 0, broker.broker.node_id)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    try:
        assert admin.alter_replica_log_dirs({replica: str(target)}) == {replica: NoError}
        wait_for("the future log", futures)
        assert admin.alter_replica_log_dirs({replica: str(source)}) == {replica: NoError}
        assert partition.log_move is None
        wait_for("the future log's removal", lambda: not futures())
        assert admin.alter_replica_log_dirs({replica: str(target)}) == {replica: NoError}
        wait_for("the future log", futures)
    finally:
        admin.close()
    broker.stop()
    assert not futures(), "a stop gives the move up"

    broker = brokkr_broker_factory(config)
    assert broker.partition("t", 0).log.dir == source / "t-0"
    assert [r.value for r in ck_consume(broker.bootstrap_servers, "t", 10)] == [b"%d" % i for i in range(10)]


@pytest.mark.parametrize("crashed_in", ["copy", "swap"])
def test_a_move_a_crash_interrupted_is_dropped_or_completed_at_the_next_start(
    tmp_path, brokkr_broker_factory, crashed_in
):
    """A move writes the new log in ``<topic>-<partition>.<id>-future`` and swaps by renaming
    the old directory aside (``-delete``) first. A crash during the copy leaves both: the
    next start drops the future one. A crash during the swap leaves only the complete
    future one: the next start renames it into place, and nothing is lost."""
    a, b = tmp_path / "a", tmp_path / "b"
    config = {"log.dirs": f"{a},{b}"}
    broker = brokkr_broker_factory(config)
    broker.call(broker.broker.create_topic, "t", 1)
    with RawClient(broker.bootstrap_servers) as c:
        for i in range(10):
            c.request(PRODUCE, 9, produce_body("t", batch(1, value=b"%d" % i)))
    source = broker.partition("t", 0).log.dir
    broker.stop()
    target = b if source.parent == a else a
    shutil.copytree(source, target / files.future_dir_name("t", 0))
    if crashed_in == "swap":
        source.rename(source.with_name(files.delete_dir_name("t", 0)))

    broker = brokkr_broker_factory(config)
    kept = source.parent if crashed_in == "copy" else target
    assert broker.partition("t", 0).log.dir == kept / "t-0"
    assert sorted(p.name for d in (a, b) for p in d.iterdir() if p.is_dir()) == ["t-0"], "no move left over"
    records = ck_consume(broker.bootstrap_servers, "t", 10)
    assert [r.value for r in records] == [b"%d" % i for i in range(10)]
