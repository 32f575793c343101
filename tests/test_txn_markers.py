"""Transaction markers: the control batch in Kafka's bytes, and write_txn_markers on a
real broker (the marker stored after the transaction's records, its transaction ended)."""

from __future__ import annotations

from pathlib import Path

import pytest
from brokkr.core.errors import ErrorCode
from brokkr.core.plugins import hookimpl
from brokkr.core.protocol.control import EndTxnMarker, encode_marker_batch, read_end_txn_marker
from brokkr.core.protocol.records import iter_batches_untrusted, patch_batch
from brokkr.core.testing import RawClient
from brokkr.core.txn_index import AbortedTxn
from txn_wire import UNVERIFIED, end_txn, txn_batch, txn_produce
from wire import FETCH, fetch_body

KSQL_LOG = (
    Path(__file__).parent / "fixtures/kafka-logs/_confluent-ksql-default__command_topic-0/00000000000000000000.log"
)
PID = 7000


def test_a_commit_marker_is_byte_for_byte_the_one_kafka_wrote():
    data = KSQL_LOG.read_bytes()
    data_batch, marker_batch = list(iter_batches_untrusted(data))
    assert data_batch.is_transactional and not data_batch.is_control
    assert read_end_txn_marker(data, marker_batch) == EndTxnMarker(committed=True, coordinator_epoch=0)
    ours = encode_marker_batch(
        marker_batch.producer_id, marker_batch.producer_epoch, True, 0, marker_batch.max_timestamp
    )
    patch_batch(ours, 0, marker_batch.base_offset, marker_batch.leader_epoch)
    assert bytes(ours) == data[marker_batch.position : marker_batch.end]


@pytest.mark.parametrize("committed", [True, False])
def test_marker_round_trips_with_its_coordinator_epoch(committed):
    batch = encode_marker_batch(12, 3, committed, 41, 1_700_000_000_000)
    (h,) = iter_batches_untrusted(batch)
    assert (h.is_control, h.is_transactional, h.record_count, h.base_sequence) == (True, True, 1, -1)
    assert (h.producer_id, h.producer_epoch, h.codec) == (12, 3, 0)
    assert read_end_txn_marker(batch, h) == EndTxnMarker(committed, 41)


def stored_batches(broker, topic="t"):
    with RawClient(broker.bootstrap_servers) as c:
        records = c.request(FETCH, 12, fetch_body(topic)).responses[0].partitions[0].records or b""
    return records, list(iter_batches_untrusted(records))


def test_markers_end_transactions_at_the_leader(brokkr_broker_factory):
    broker = brokkr_broker_factory(UNVERIFIED)
    broker.call(broker.broker.create_topic, "t")
    partition = broker.broker.partition("t", 0)
    assert txn_produce(broker, "t", txn_batch([b"a1", b"a2", b"a3"], PID)).error_code == ErrorCode.NONE
    assert partition.producers.ongoing == {PID: 0}
    assert partition.last_stable_offset == 0 and partition.high_watermark == 3

    assert end_txn(broker, PID, committed=False, partitions=[("t", 0)]) == {("t", 0): ErrorCode.NONE}
    assert partition.last_stable_offset == partition.high_watermark == 4
    assert partition.aborted.aborted_txns(0, 4) == [AbortedTxn(PID, 0, 3, 4)]

    assert txn_produce(broker, "t", txn_batch([b"c1", b"c2"], PID, seq=3)).error_code == ErrorCode.NONE
    assert partition.last_stable_offset == 4
    assert end_txn(broker, PID, committed=True, partitions=[("t", 0)]) == {("t", 0): ErrorCode.NONE}
    assert partition.last_stable_offset == 7 and not partition.producers.ongoing

    records, headers = stored_batches(broker)
    assert [(h.base_offset, h.is_control) for h in headers] == [(0, False), (3, True), (4, False), (6, True)]
    assert [read_end_txn_marker(records, h) for h in headers if h.is_control] == [
        EndTxnMarker(False, 0),
        EndTxnMarker(True, 0),
    ]
    assert partition.aborted.aborted_txns(4, 7) == []  # the commit adds no entry


def test_marker_errors_per_partition(brokkr_broker_factory):
    broker = brokkr_broker_factory(UNVERIFIED)
    broker.call(broker.broker.create_topic, "t")
    assert txn_produce(broker, "t", txn_batch([b"x"], PID, epoch=2)).error_code == ErrorCode.NONE
    assert end_txn(broker, PID, True, [("t", 0), ("t", 9), ("nope", 0)], epoch=1) == {
        ("t", 0): ErrorCode.INVALID_PRODUCER_EPOCH,
        ("t", 9): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert end_txn(broker, PID, False, [("t", 0)], epoch=2, coordinator_epoch=5) == {("t", 0): ErrorCode.NONE}
    # A coordinator epoch older than the last marker's: a zombie coordinator.
    assert end_txn(broker, PID, False, [("t", 0)], epoch=2, coordinator_epoch=4) == {
        ("t", 0): ErrorCode.TRANSACTION_COORDINATOR_FENCED
    }
    _, headers = stored_batches(broker)
    assert [h.is_control for h in headers] == [False, True]


def test_a_marker_needs_min_insync_replicas_as_an_acks_all_write_does(brokkr_broker_factory):
    """Kafka appends markers with acks=-1: an ISR below min.insync.replicas refuses the
    marker (NOT_ENOUGH_REPLICAS, nothing written; the coordinator sends it again)."""
    broker = brokkr_broker_factory(UNVERIFIED)
    broker.call(broker.broker.create_topic, "t", 1, {"min.insync.replicas": "2"})
    partition = broker.broker.partition("t", 0)
    assert txn_produce(broker, "t", txn_batch([b"x"], PID), acks=1).error_code == ErrorCode.NONE
    assert end_txn(broker, PID, True, [("t", 0)]) == {("t", 0): ErrorCode.NOT_ENOUGH_REPLICAS}
    assert partition.log.log_end_offset == 1 and partition.producers.ongoing == {PID: 0}
    broker.call(broker.broker.alter_topic_config, "t", {"min.insync.replicas": "1"})
    assert end_txn(broker, PID, True, [("t", 0)]) == {("t", 0): ErrorCode.NONE}
    assert partition.last_stable_offset == 2


def test_clients_still_cannot_write_control_batches(brokkr_broker_factory):
    broker = brokkr_broker_factory(UNVERIFIED)
    broker.call(broker.broker.create_topic, "t")
    res = txn_produce(broker, "t", bytes(encode_marker_batch(PID, 0, True, 0, 1_700_000_000_000)))
    assert res.error_code == ErrorCode.INVALID_RECORD


def test_a_plain_write_inside_an_open_transaction_is_refused(brokkr_broker_factory):
    broker = brokkr_broker_factory(UNVERIFIED)
    broker.call(broker.broker.create_topic, "t")
    assert txn_produce(broker, "t", txn_batch([b"x"], PID)).error_code == ErrorCode.NONE
    res = txn_produce(broker, "t", txn_batch([b"y"], PID, seq=1, transactional=False), txn_id=None)
    assert res.error_code == ErrorCode.INVALID_TXN_STATE


class Coordinator:
    """A stand-in transaction coordinator (the real one is the transactions plugin): the
    partitions added to the transaction, and the calls it got."""

    def __init__(self, added=(), error=ErrorCode.INVALID_TXN_STATE):
        self.added = set(added)
        self.error = error
        self.calls = []
        self.versions = []

    @hookimpl(tryfirst=True)  # before a real coordinator's
    def brokkr_transaction_verify(self, transactional_id, producer_id, producer_epoch, partitions, produce_version):
        self.calls.append((transactional_id, producer_id, producer_epoch, sorted(partitions)))
        self.versions.append(produce_version)

        async def answer():
            return {p: ErrorCode.NONE if p in self.added else self.error for p in partitions}

        return answer()


def test_produce_verifies_only_batches_that_would_start_a_transaction(brokkr_broker_factory):
    coordinator = Coordinator(added={("t", 0)})
    broker = brokkr_broker_factory(plugins=[coordinator])
    broker.call(broker.broker.create_topic, "t", 2)
    assert txn_produce(broker, "t", txn_batch([b"a"], PID, epoch=1)).error_code == ErrorCode.NONE
    assert coordinator.calls == [("txn", PID, 1, [("t", 0)])] and coordinator.versions == [9]
    # The transaction is open in t-0: its next batch is not verified again.
    assert txn_produce(broker, "t", txn_batch([b"b"], PID, epoch=1, seq=1)).error_code == ErrorCode.NONE
    assert len(coordinator.calls) == 1
    refused = txn_produce(broker, "t", txn_batch([b"c"], PID, epoch=1), partition=1)
    assert (refused.error_code, refused.error_message) == (
        ErrorCode.INVALID_TXN_STATE,
        "Partition was not added to the transaction",
    )
    assert broker.broker.partition("t", 1).log.log_end_offset == 0
    # Plain idempotent batches are never verified.
    assert txn_produce(broker, "t", txn_batch([b"d"], PID + 1, transactional=False), partition=1).error_code == 0
    assert len(coordinator.calls) == 2


class Unreachable:
    @hookimpl(tryfirst=True)
    def brokkr_transaction_verify(self):
        async def answer():
            raise ConnectionError("the coordinator went away")

        return answer()


@pytest.mark.parametrize(
    "plugin, underlying",
    [(Coordinator(error=ErrorCode.NOT_COORDINATOR), "NOT_COORDINATOR"), (Unreachable(), "COORDINATOR_NOT_AVAILABLE")],
)
def test_a_coordinator_that_cannot_answer_yet_makes_the_producer_retry(brokkr_broker_factory, plugin, underlying):
    broker = brokkr_broker_factory(plugins=[plugin])
    broker.call(broker.broker.create_topic, "t")
    res = txn_produce(broker, "t", txn_batch([b"a"], PID))
    assert res.error_code == ErrorCode.NOT_ENOUGH_REPLICAS
    assert underlying in res.error_message
    assert broker.broker.partition("t", 0).log.log_end_offset == 0


@pytest.mark.parametrize("version", [3, 9, 12])
def test_a_zombie_producers_transactional_batch_is_fenced(brokkr_broker_factory, version):
    """Kafka answers INVALID_PRODUCER_EPOCH in every Produce version (KAFKA-10687) and does
    not ask the coordinator about a batch whose epoch is already known to be old."""
    coordinator = Coordinator(added={("t", 0)})
    broker = brokkr_broker_factory(plugins=[coordinator])
    broker.call(broker.broker.create_topic, "t")
    assert txn_produce(broker, "t", txn_batch([b"old"], PID, epoch=1), version=version).error_code == 0
    assert end_txn(broker, PID, False, [("t", 0)], epoch=1) == {("t", 0): ErrorCode.NONE}
    assert txn_produce(broker, "t", txn_batch([b"new"], PID, epoch=2), version=version).error_code == 0
    asked = len(coordinator.calls)
    zombie = txn_produce(broker, "t", txn_batch([b"zombie"], PID, epoch=1, seq=1), version=version)
    assert zombie.error_code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert len(coordinator.calls) == asked
    assert broker.broker.partition("t", 0).log.log_end_offset == 3
