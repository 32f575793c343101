"""Producer state (brokkr.core.producer_state): Kafka's snapshot format against the
snapshots real Kafka brokers wrote, sequence arithmetic, and rebuilding the state of a log
from its latest snapshot and the batch headers after it."""

from __future__ import annotations

import shutil
import struct
import uuid
from pathlib import Path

import pytest
from brokkr.core.broker import Broker
from brokkr.core.log import StoredTopic
from brokkr.core.producer_state import (
    INT32_MAX,
    BatchMetadata,
    CorruptSnapshot,
    ProducerStateEntry,
    ProducerStateManager,
    decode_snapshot,
    decrement_sequence,
    encode_snapshot,
    increment_sequence,
    rebuild_producer_state,
)
from brokkr.core.protocol.records import BatchHeader, build_batch, patch_batch
from brokkr.core.testing import RawClient
from wire import INIT_PRODUCER_ID, init_producer_id_body

KAFKA_LOGS = Path(__file__).parent / "fixtures" / "kafka-logs"
KSQL = KAFKA_LOGS / "_confluent-ksql-default__command_topic-0"
KAFKA_SNAPSHOT = (KSQL / "00000000000000000002.snapshot").read_bytes()
EMPTY_KAFKA_SNAPSHOT = (KAFKA_LOGS / "__transaction_state-44" / "00000000000000000004.snapshot").read_bytes()


# -- the snapshot format ----------------------------------------------------------------------


def test_a_snapshot_kafka_wrote_decodes_and_encodes_back_byte_for_byte():
    producers = decode_snapshot(KAFKA_SNAPSHOT)
    [(producer_id, entry)] = producers.items()
    assert (producer_id, entry.producer_epoch, entry.coordinator_epoch, entry.current_txn_first_offset) == (0, 0, 0, -1)
    assert list(entry.batches) == [BatchMetadata(last_seq=0, last_offset=0, offset_delta=0, timestamp=1728561475581)]
    assert encode_snapshot(producers) == KAFKA_SNAPSHOT
    assert decode_snapshot(EMPTY_KAFKA_SNAPSHOT) == {}
    assert encode_snapshot({}) == EMPTY_KAFKA_SNAPSHOT


def test_a_snapshot_keeps_each_producers_last_batch_only():
    entry = ProducerStateEntry()
    for offset in range(0, 30, 3):
        entry.add_batch(2, BatchMetadata(offset + 2, offset + 2, 2, 1000 + offset))
    assert len(entry.batches) == 5
    [(producer_id, loaded)] = decode_snapshot(encode_snapshot({7: entry})).items()
    assert (producer_id, loaded.producer_epoch, loaded.last_timestamp) == (7, 2, 1027)
    assert list(loaded.batches) == [BatchMetadata(29, 29, 2, 1027)]


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda b: b[:5], "Snapshot failed schema validation: 5 bytes is too short"),
        (lambda b: struct.pack(">h", 2) + b[2:], "Snapshot contained an unknown file version 2"),
        (lambda b: b[:-1] + bytes([b[-1] ^ 1]), "Snapshot is corrupt (CRC is no longer valid). Stored crc: "),
        (lambda b: b[:-1], "Snapshot is corrupt (CRC is no longer valid)"),
    ],
    ids=["too-short", "unknown-version", "flipped-bit", "truncated"],
)
def test_a_damaged_snapshot_is_refused(damage, message):
    with pytest.raises(CorruptSnapshot, match=message.replace("(", r"\(").replace(")", r"\)")):
        decode_snapshot(damage(KAFKA_SNAPSHOT))


def test_sequences_wrap_from_int32_max_to_zero():
    assert increment_sequence(INT32_MAX - 1, 3) == 1
    assert decrement_sequence(1, 3) == INT32_MAX - 1
    assert increment_sequence(5, 3) == 8 and decrement_sequence(8, 3) == 5
    assert BatchMetadata(last_seq=1, last_offset=9, offset_delta=3, timestamp=0).first_seq == INT32_MAX - 1


# -- rebuilding a log's state ----------------------------------------------------------------


@pytest.fixture
def memory_log():
    broker = Broker({"brokkr.storage": "memory"}, entry_points=False)
    storage = broker.open_storage()
    return storage.open_log(StoredTopic("t", uuid.uuid4(), 1), 0, broker.config.topic_config({}))


def append(plog, seq: int, n: int = 2, producer_id: int = 9) -> None:
    first = plog.log_end_offset
    batch = bytearray(build_batch([(b"k", b"v")] * n, producer_id=producer_id, producer_epoch=0, base_sequence=seq))
    patch_batch(batch, 0, first, 0)
    plog.append(batch, first, first + n - 1, -1, n)


def test_the_state_is_the_snapshot_plus_the_batches_after_it(memory_log):
    for seq in (0, 2, 4):
        append(memory_log, seq)
    memory_log.write_producer_snapshot(6, encode_snapshot(rebuild_producer_state("t-0", memory_log).producers))
    for seq in (6, 8):
        append(memory_log, seq)

    state = rebuild_producer_state("t-0", memory_log)

    assert state.snapshot_offset == 6
    assert [(b.first_seq, b.first_offset) for b in state.producers[9].batches] == [(4, 4), (6, 6), (8, 8)], (
        "the snapshot's last batch, then the two replayed"
    )


def test_a_corrupt_snapshot_means_replaying_the_whole_log(memory_log, caplog):
    for seq in (0, 2):
        append(memory_log, seq)
    memory_log.write_producer_snapshot(4, b"\x00\x01garbage")
    state = rebuild_producer_state("t-0", memory_log)
    assert state.snapshot_offset is None
    assert [b.first_seq for b in state.producers[9].batches] == [0, 2]
    assert "Failed to load the producer snapshot of t-0 at 4" in caplog.text


def test_a_snapshot_below_the_log_start_is_not_used(memory_log):
    """Kafka drops those: the records between it and the log start are gone, so its
    producers would look out of sequence instead of unknown."""
    append(memory_log, 0, producer_id=1)
    memory_log.write_producer_snapshot(2, encode_snapshot(rebuild_producer_state("t-0", memory_log).producers))
    append(memory_log, 0, producer_id=2)
    memory_log.delete_before(3)
    assert list(rebuild_producer_state("t-0", memory_log).producers) == [2]


def test_replaying_kafkas_log_skips_its_transaction_marker(tmp_path):
    """The ksql partition holds a transactional batch (producer 0, sequence 0) and its
    COMMIT marker (a control batch of producer 0 without a sequence)."""
    copy = tmp_path / KSQL.name
    shutil.copytree(KSQL, copy)
    (copy / "00000000000000000002.snapshot").unlink()
    broker = Broker({"log.dirs": str(tmp_path)}, entry_points=False)
    storage = broker.open_storage()
    [stored] = storage.load_topics()
    plog = storage.open_log(stored, 0, broker.config.topic_config({}))
    state = rebuild_producer_state(KSQL.name, plog)
    assert [(pid, e.producer_epoch, list(e.batches)) for pid, e in state.producers.items()] == [
        (0, 0, [BatchMetadata(0, 0, 0, 1728561475261)])
    ]
    plog.close()
    storage.close()


def test_a_broker_adopting_kafkas_partition_loads_its_snapshot_and_skips_its_producer_ids(
    brokkr_broker_factory, tmp_path
):
    shutil.copytree(KSQL, tmp_path / KSQL.name)
    broker = brokkr_broker_factory({"log.dirs": str(tmp_path)})
    partition = broker.broker.topics["_confluent-ksql-default__command_topic"].partitions[0]
    assert partition.producers.snapshot_offset == 2
    assert list(partition.producers.producers) == [0]
    with RawClient(broker.bootstrap_servers) as c:
        assert c.request(INIT_PRODUCER_ID, 4, init_producer_id_body()).producer_id == 1, "id 0 is Kafka's producer's"


def test_a_batch_header_is_all_a_check_reads():
    """check_and_find_duplicate and update take a BatchHeader: never the records."""
    header = BatchHeader.unpack(build_batch([(b"k", b"v")] * 3, producer_id=5, producer_epoch=1, base_sequence=7))
    state = ProducerStateManager("t-0")
    assert state.check_and_find_duplicate(header, 10) is None
    state.update(header, 10)
    assert state.check_and_find_duplicate(header, 13) == BatchMetadata(9, 12, 2, header.max_timestamp)
