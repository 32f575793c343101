"""Segment storage: Kafka's files, byte for byte where Kafka fixes them, and recovery."""

from __future__ import annotations

import json
import os
import shutil
import struct
import threading
import uuid
from pathlib import Path

import pytest
from brokkr.core.errors import ConfigError
from brokkr.core.protocol.records import read_all_records
from brokkr.core.storage_contract import MIB, Harness, StorageContract, append, offsets_in
from brokkr.plugins.storage.segment import files
from segment_crash import crash, hold

FIXTURES = Path(__file__).parent / "fixtures" / "kafka-logs"


class _Segment(StorageContract):
    storage_name = "segment"


@pytest.fixture
def harness(tmp_path):
    h = Harness(_Segment(), tmp_path / "logs")
    yield h
    h.close()


def drain(harness: Harness) -> None:
    """Wait until the disk work queued on the storage's flusher is done."""
    harness.storage.flusher.submit(lambda: None).result(timeout=10)


def entries(path: Path, fmt: str) -> list[tuple[int, ...]]:
    return list(struct.iter_unpack(fmt, path.read_bytes()))


def names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_partition_directory_holds_kafkas_files(harness):
    plog = harness.log("orders", 0, **{"segment.bytes": 1000})
    for _ in range(8):
        append(plog, records=2, value_size=100)
    d = harness.directory / "orders-0"
    bases = [s.base_offset for s in plog.segments()]
    assert len(bases) >= 3
    expected = {f"{b:020d}{suffix}" for b in bases for suffix in (".log", ".index", ".timeindex")}
    drain(harness)  # the leader-epoch-checkpoint is written on the flusher (temp file, then rename)
    assert set(names(d)) == expected | {"partition.metadata", "leader-epoch-checkpoint"}
    [stored] = harness.storage.load_topics()
    assert (d / "partition.metadata").read_text() == f"version: 0\ntopic_id: {files.kafka_uuid(stored.topic_id)}\n"
    assert (d / "leader-epoch-checkpoint").read_text() == "0\n1\n0 0\n"
    assert files.parse_kafka_uuid(files.kafka_uuid(stored.topic_id)) == stored.topic_id
    # The log holds the batches exactly as read back, with their assigned offsets.
    first_log = d / f"{bases[0]:020d}.log"
    assert offsets_in(first_log.read_bytes()) == list(range(bases[0], bases[1]))


def test_broker_level_files_after_a_clean_shutdown(harness):
    plog = harness.log("t", 0)
    for _ in range(3):
        append(plog, records=2)
    plog.delete_before(2)
    harness.close()
    d = harness.directory
    meta = files.read_meta_properties(d / "meta.properties")
    assert meta.version == 1 and meta.node_id == 0 and len(meta.cluster_id) == 22 and meta.directory_id
    assert (d / "recovery-point-offset-checkpoint").read_text() == "0\n1\nt 0 6\n"
    assert (d / "log-start-offset-checkpoint").read_text() == "0\n1\nt 0 2\n"
    assert json.loads((d / ".kafka_cleanshutdown").read_text())["version"] == 0
    harness.open()
    assert not (d / ".kafka_cleanshutdown").exists(), "the marker is consumed at start"


def test_index_entries_follow_index_interval_bytes_per_batch(harness):
    plog = harness.log(**{"index.interval.bytes": 1000})
    sizes, positions, lasts = [], [], []
    for i in range(30):
        positions.append(sum(sizes))
        info = append(plog, records=1, value_size=100, timestamp=[5000, 4000][i % 2] + i)
        sizes.append(info.size)
        lasts.append(info.last_offset)
    harness.close()
    d = harness.directory / "t-0"
    # Kafka's rule: an entry for a batch once more than 1000 bytes were written since the last one.
    expected, since = [], 0
    for size, position, last in zip(sizes, positions, lasts):
        if since > 1000:
            expected.append((last, position))
            since = 0
        since += size
    assert entries(d / f"{0:020d}.index", ">ii") == expected
    # The time index: an entry only when the largest timestamp grew, plus the closing one.
    timestamps = entries(d / f"{0:020d}.timeindex", ">qi")
    assert [ts for ts, _ in timestamps] == sorted({ts for ts, _ in timestamps})
    assert timestamps[-1] == (5000 + 28, 28)


def test_the_active_index_is_preallocated_and_trimmed_when_sealed(harness):
    plog = harness.log(**{"segment.index.bytes": 8000, "index.interval.bytes": 0, "segment.bytes": 2000})
    for _ in range(10):
        append(plog, value_size=100)
    d = harness.directory / "t-0"
    [*sealed, active] = plog.segments()
    assert (d / f"{active.base_offset:020d}.index").stat().st_size == 8000
    assert (d / f"{active.base_offset:020d}.timeindex").stat().st_size == 7992
    for seg in sealed:
        index = d / f"{seg.base_offset:020d}.index"
        assert index.stat().st_size == 8 * len(entries(index, ">ii")) > 0
        assert entries(d / f"{seg.base_offset:020d}.timeindex", ">qi")[-1] == (
            1000,
            seg.next_offset - 1 - seg.base_offset,
        )
    harness.close()
    assert (d / f"{active.base_offset:020d}.index").stat().st_size < 8000


def test_segments_roll_when_an_index_is_full(harness):
    plog = harness.log(**{"segment.index.bytes": 24, "index.interval.bytes": 0})
    rolls = [append(plog, timestamp=1000 + i).rolled for i in range(12)]
    assert sum(r is not None for r in rolls) >= 3, "3 offset entries or 1 + a reserved time entry fill the index"
    assert offsets_in(plog.read(0, MIB, 12, True))[0] == 0


def test_a_torn_tail_is_truncated_after_a_crash(harness):
    plog = harness.log()
    for _ in range(10):
        append(plog, records=3)
    crash(harness)
    log_file = harness.directory / "t-0" / f"{0:020d}.log"
    size = log_file.stat().st_size
    os.truncate(log_file, size - 7)
    plog = harness.log()
    assert plog.log_end_offset == 27
    assert offsets_in(plog.read(0, MIB, 27, True)) == list(range(27))
    assert log_file.stat().st_size < size - 7
    assert append(plog).first_offset == 27


def test_a_torn_tail_is_truncated_even_after_a_clean_shutdown(harness):
    plog = harness.log()
    for _ in range(10):
        append(plog, records=3)
    harness.close()
    log_file = harness.directory / "t-0" / f"{0:020d}.log"
    os.truncate(log_file, log_file.stat().st_size - 7)
    plog = harness.log()
    assert plog.log_end_offset == 27
    assert append(plog).first_offset == 27
    assert offsets_in(plog.read(24, MIB, 28, True)) == [24, 25, 26, 27]


def test_a_corrupt_batch_truncates_the_log_and_drops_later_segments(harness):
    plog = harness.log(**{"segment.bytes": 500})
    for _ in range(20):
        append(plog, records=2, value_size=40)
    segments = plog.segments()
    victim = segments[1]
    crash(harness)
    log_file = harness.directory / "t-0" / f"{victim.base_offset:020d}.log"
    data = bytearray(log_file.read_bytes())
    second_batch = len(data) // 2
    data[second_batch + 70] ^= 0xFF  # a payload byte: the CRC-32C no longer matches
    log_file.write_bytes(bytes(data))
    plog = harness.log()
    assert plog.log_end_offset == victim.base_offset + 2
    assert [s.base_offset for s in plog.segments()] == [s.base_offset for s in segments[:2]]
    assert not (harness.directory / "t-0" / f"{segments[2].base_offset:020d}.log").exists()
    assert offsets_in(b"".join(plog.read(o, MIB, 100, True) for o in (0, victim.base_offset))) == list(
        range(victim.base_offset + 2)
    )


@pytest.mark.parametrize("damage", ["garbage", "truncated", "missing", "zeros"])
def test_a_damaged_index_is_rebuilt_not_trusted(harness, damage):
    plog = harness.log(**{"segment.bytes": 3000, "index.interval.bytes": 200})
    for i in range(40):
        append(plog, records=2, value_size=50, timestamp=1000 + i)
    first = plog.segments()[0]
    harness.close()
    index = harness.directory / "t-0" / f"{0:020d}.index"
    good = index.read_bytes()
    assert len(good) >= 16
    if damage == "garbage":
        index.write_bytes(struct.pack(">ii", 7, 999999) * 3)
    elif damage == "truncated":
        index.write_bytes(good[:-3])
    elif damage == "missing":
        index.unlink()
    else:
        index.write_bytes(bytes(len(good)))
    plog = harness.log()
    assert index.read_bytes() == good
    for offset in range(first.base_offset, first.next_offset):
        assert offsets_in(plog.read(offset, 200, 80, True))[0] <= offset


def test_an_index_pointing_inside_a_batch_is_caught_on_read(harness):
    plog = harness.log(**{"index.interval.bytes": 100})
    for _ in range(20):
        append(plog, records=2, value_size=50)
    harness.close()
    index = harness.directory / "t-0" / f"{0:020d}.index"
    good = entries(index, ">ii")
    # Sane first and last entries, but a middle one that points past its batch.
    lying = [good[0], *[(rel, pos + 1000) for rel, pos in good[1:-1]], good[-1]]
    index.write_bytes(b"".join(struct.pack(">ii", *e) for e in lying))
    plog = harness.log()
    for offset in range(plog.log_end_offset):
        assert offset in offsets_in(plog.read(offset, 1, 40, True))


def test_leftover_files_are_removed_at_start(harness):
    plog = harness.log()
    append(plog)
    harness.close()
    d = harness.directory / "t-0"
    for name in ("00000000000000000000.log.deleted", "00000000000000000000.index.cleaned", "x.log.swap"):
        (d / name).write_bytes(b"junk")
    (d / f"{5:020d}.index").write_bytes(b"")  # an index without its log
    (d / f"{1:020d}.snapshot").write_bytes(b"state")
    (d / f"{1:020d}.snapshot.tmp").write_bytes(b"half")  # a snapshot write interrupted
    (harness.directory / "gone-0.0123abcd-delete").mkdir()
    harness.log()
    drain(harness)
    assert names(d) == [
        f"{0:020d}.index",
        f"{0:020d}.log",
        f"{0:020d}.timeindex",
        f"{1:020d}.snapshot",  # producer state is no leftover
        "leader-epoch-checkpoint",
        "partition.metadata",
    ]
    assert not (harness.directory / "gone-0.0123abcd-delete").exists()


def test_producer_snapshots_above_the_recovered_log_end_are_deleted(harness):
    plog = harness.log()
    for end in range(3, 31, 3):
        append(plog, records=3)
        plog.write_producer_snapshot(end, b"state at %d" % end)
    drain(harness)
    crash(harness)
    d = harness.directory / "t-0"
    os.truncate(d / f"{0:020d}.log", (d / f"{0:020d}.log").stat().st_size - 7)
    plog = harness.log()
    assert plog.log_end_offset == 27
    assert [p.name for p in sorted(d.glob("*.snapshot"))] == [f"{27:020d}.snapshot"]
    assert plog.latest_producer_snapshot() == (27, b"state at 27")


def test_a_truncation_keeps_the_snapshots_still_queued_at_or_below_it(harness):
    """A truncation drops the snapshots above its offset, also those its flusher has not
    written yet, and only those: one queued at or below it is still written (CI once saw
    the snapshot at 4 lost when the flusher was behind)."""
    plog = harness.log()
    release = threading.Event()
    harness.storage.flusher.submit(release.wait, 10)  # the flusher is behind: nothing queued after is written yet
    for end in (2, 4, 6):
        append(plog, records=2)
        plog.write_producer_snapshot(end, b"at %d" % end)
    plog.truncate_to(4)
    assert plog.latest_producer_snapshot() == (4, b"at 4")
    release.set()
    drain(harness)
    d = harness.directory / "t-0"
    assert [p.name for p in sorted(d.glob("*.snapshot"))] == [f"{2:020d}.snapshot", f"{4:020d}.snapshot"]
    assert plog.latest_producer_snapshot() == (4, b"at 4")


def test_partition_directories_written_by_kafka_are_adopted(harness):
    harness.directory.mkdir(parents=True)
    shutil.copytree(
        FIXTURES / "_confluent-ksql-default__command_topic-0",
        harness.directory / "_confluent-ksql-default__command_topic-0",
    )
    harness.open()
    [stored] = harness.storage.load_topics()
    assert stored.name == "_confluent-ksql-default__command_topic" and stored.partitions == 1
    metadata = (FIXTURES / "_confluent-ksql-default__command_topic-0" / "partition.metadata").read_text()
    assert files.kafka_uuid(stored.topic_id) in metadata
    plog = harness.log(stored.name)
    records = read_all_records(plog.read(0, MIB, plog.log_end_offset, True))
    assert [r.offset for r in records] == list(range(plog.log_end_offset)) and plog.log_end_offset > 0
    snapshot = FIXTURES / "_confluent-ksql-default__command_topic-0" / f"{2:020d}.snapshot"
    assert plog.latest_producer_snapshot() == (2, snapshot.read_bytes()), "Kafka's producer snapshot is read"
    assert append(plog).first_offset == records[-1].offset + 1


def test_a_log_directory_of_another_node_is_refused(harness, tmp_path):
    harness.open()
    harness.close()
    meta = harness.directory / "meta.properties"
    meta.write_text(meta.read_text().replace("node.id=0", "node.id=7"))
    with pytest.raises(ConfigError, match="Stored node id 7"):
        harness.open()


def test_partition_metadata_is_written_on_the_flusher_and_again_after_a_crash_before_it(harness):
    """A new partition's partition.metadata is queued on the flusher (with the other
    partitions', one job); a crash before it is written leaves the directory without one,
    and the next open writes it, with the catalog's topic id."""
    harness.open()
    release = hold(harness)  # the flusher is behind
    plogs = [harness.log("many", p) for p in (29, *range(29))]
    for plog in plogs:
        append(plog)  # the log works before its file is written
    dirs = [harness.directory / f"many-{p}" for p in range(30)]
    assert not any((d / "partition.metadata").exists() for d in dirs)
    crash(harness, release)  # the queue dies with the process
    assert not any((d / "partition.metadata").exists() for d in dirs)
    assert not any(p.name.endswith(".tmp") for d in dirs for p in d.iterdir())
    [stored] = harness.open().load_topics()
    for p in range(30):
        harness.log("many", p)
    drain(harness)
    expected = f"version: 0\ntopic_id: {files.kafka_uuid(stored.topic_id)}\n"
    assert [(d / "partition.metadata").read_text() for d in dirs] == [expected] * 30


def test_a_partition_directory_of_another_topic_id_is_refused(harness):
    plog = harness.log()
    append(plog)
    harness.close()
    files.write_atomically(
        harness.directory / "t-0" / "partition.metadata", files.partition_metadata_bytes(uuid.uuid4())
    )
    with pytest.raises(Exception, match="belongs to topic id"):
        harness.log()


def test_a_corrupt_checkpoint_means_full_recovery(harness):
    plog = harness.log()
    for _ in range(3):
        append(plog, records=2)
    harness.close()
    (harness.directory / "recovery-point-offset-checkpoint").write_text("garbage")
    plog = harness.log()
    assert plog.log_end_offset == 6


def test_flush_messages_moves_the_recovery_point_and_the_default_leaves_it_to_the_os(harness):
    flushed = harness.log("flushed", **{"flush.messages": 2})
    lazy = harness.log("lazy")
    fsyncs = []
    for _ in range(3):
        fsyncs.append(append(flushed).flushed)
        assert append(lazy).flushed is None
    assert fsyncs[0] is None and fsyncs[2] is None
    fsyncs[1].result(timeout=10)  # the fsync runs on the flusher; the append's answer waits for it
    assert flushed.recovery_point == 2, "flushed after every second record"
    assert lazy.recovery_point == 0, "flush.messages and flush.ms default to never: the OS decides"
    lazy.close()
    assert lazy.recovery_point == 3, "a clean close flushes"
    harness.logs.remove(lazy)


def test_a_rolled_segment_is_flushed_in_the_background(harness):
    plog = harness.log(**{"segment.bytes": 300})
    for _ in range(4):
        append(plog, value_size=100)
    drain(harness)
    assert plog.recovery_point == plog.segments()[-1].base_offset


def test_a_failed_disk_write_answers_kafka_storage_error_and_leaves_no_partial_batch(
    brokkr_broker_factory, monkeypatch
):
    from brokkr.core.errors import ErrorCode
    from brokkr.core.testing import RawClient
    from brokkr.plugins.storage.segment import segment
    from wire import PRODUCE, batch, produce_body

    broker = brokkr_broker_factory()
    broker.call(broker.broker.create_topic, "t")
    real_write = os.write

    def half_then_enospc(fd, data):
        if len(data) > 40 and getattr(half_then_enospc, "armed", False):
            half_then_enospc.armed = False
            real_write(fd, bytes(data[:40]))
            raise OSError(28, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(segment.os, "write", half_then_enospc)
    with RawClient(broker.bootstrap_servers) as c:
        half_then_enospc.armed = True
        failed = c.request(PRODUCE, 9, produce_body("t", batch())).responses[0].partition_responses[0]
        ok = c.request(PRODUCE, 9, produce_body("t", batch())).responses[0].partition_responses[0]
    assert failed.error_code == ErrorCode.KAFKA_STORAGE_ERROR
    assert (ok.error_code, ok.base_offset) == (ErrorCode.NONE, 0)
    log = broker.broker.topics["t"].partitions[0].log
    assert offsets_in(broker.call(log.read, 0, MIB, 10, True))[0] == 0


def test_opening_the_storage_without_its_logs_keeps_checkpoints_and_pending_recovery(harness):
    plog = harness.log()
    for _ in range(4):
        append(plog, records=2)
    plog.delete_before(3)
    harness.close()
    d = harness.directory
    before = (d / "log-start-offset-checkpoint").read_text(), (d / "recovery-point-offset-checkpoint").read_text()
    harness.open()  # as `brokkr scram` does: the catalog and state only, no partition
    harness.close()
    assert (
        (d / "log-start-offset-checkpoint").read_text(),
        (d / "recovery-point-offset-checkpoint").read_text(),
    ) == before
    assert harness.log().log_start_offset == 3
    crash(harness)
    (d / ".kafka_cleanshutdown").unlink(missing_ok=True)
    harness.open()
    harness.close()
    assert not (d / ".kafka_cleanshutdown").exists(), "its partitions were never recovered"


def test_a_moving_log_truncated_meanwhile_swaps_in_what_it_holds_then(tmp_path):
    """A log moving to another log dir (AlterReplicaLogDirs) may be truncated meanwhile (a
    follower's, when its leader changes): what the move copied past the truncation goes
    too, so the log swapped in holds what the old one held at the swap, and nothing else."""
    from brokkr.core.broker import Broker
    from brokkr.core.log import StoredTopic

    a, b = tmp_path / "a", tmp_path / "b"
    broker = Broker({"log.dirs": f"{a},{b}"})
    storage = broker.open_storage()
    try:
        topic = StoredTopic("t", uuid.uuid4(), 1)
        storage.save_topics([topic])
        plog = storage.open_log(topic, 0, broker.config.topic_config({}))
        for i in range(10):
            append(plog, keyed=[(b"k", b"old-%d" % i)])
        source = plog.dir.parent
        target = b if source == a else a
        move = storage.move_log(plog, target)
        while move.copy(MIB):
            pass
        assert move.caught_up()
        plog.truncate_to(5)
        for i in range(3):
            append(plog, keyed=[(b"k", b"new-%d" % i)])
        assert not move.caught_up()
        while move.copy(MIB):
            pass
        moved = move.complete()
        storage.flusher.submit(lambda: None).result(timeout=10)  # the old directory's removal
        assert moved.dir == target / "t-0" and sorted(p.name for p in target.iterdir() if p.is_dir()) == ["t-0"]
        assert not any(p.is_dir() for p in source.iterdir()), "the old log is gone"
        assert files.read_partition_metadata(moved.dir / files.PARTITION_METADATA) == topic.topic_id
        values = [r.value for r in read_all_records(moved.read(0, MIB, moved.log_end_offset, True))]
        assert values == [b"old-%d" % i for i in range(5)] + [b"new-%d" % i for i in range(3)]
        assert storage.logs[target][("t", 0)] is moved and ("t", 0) not in storage.logs[source]
    finally:
        storage.close()
