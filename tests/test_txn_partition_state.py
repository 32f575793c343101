"""A partition's transaction state: WriteTxnMarkers on the wire, the last stable offset and
the aborted-transaction index in Kafka's formats, across restarts and SIGKILLs."""

from __future__ import annotations

import io
import struct
from types import SimpleNamespace

from brokkr.core.authorization import AclOperation, AuthorizationResult
from brokkr.core.broker import BrokerThread
from brokkr.core.errors import ErrorCode
from brokkr.core.plugins import hookimpl
from brokkr.core.producer_state import decode_snapshot, encode_snapshot
from brokkr.core.protocol.frames import request_spec
from brokkr.core.testing import RawClient
from brokkr.core.txn_index import AbortedTxn, decode_entries_untrusted, encode_entry
from brokkr.plugins.storage.segment.dump import dump_files
from confluent_kafka.admin import AdminClient, NewTopic
from serve import Served
from txn_wire import UNVERIFIED, end_txn, txn_batch, txn_produce, write_markers_on_the_wire

PID = 8000


def start(factory, config=None, plugins=()):
    broker = factory({**UNVERIFIED, **(config or {})}, plugins)
    broker.call(broker.broker.create_topic, "t", 2)
    return broker


def test_txn_index_entries_are_kafkas_34_bytes():
    entry = encode_entry(AbortedTxn(producer_id=5, first_offset=10, last_offset=20, last_stable_offset=21))
    # version int16 0, producerId int64, firstOffset int64, lastOffset int64, lastStableOffset int64
    assert entry == struct.pack(">hqqqq", 0, 5, 10, 20, 21) and len(entry) == 34
    assert decode_entries_untrusted(entry * 2) == [AbortedTxn(5, 10, 20, 21)] * 2


def test_snapshots_carry_the_open_transaction_and_coordinator_epoch(brokkr_broker_factory):
    broker = start(brokkr_broker_factory)
    partition = broker.broker.partition("t", 0)
    txn_produce(broker, "t", txn_batch([b"a"], PID))
    end_txn(broker, PID, False, [("t", 0)], coordinator_epoch=3)
    txn_produce(broker, "t", txn_batch([b"b", b"c"], PID, seq=1))
    entries = decode_snapshot(encode_snapshot(partition.producers.producers))
    assert (entries[PID].current_txn_first_offset, entries[PID].coordinator_epoch) == (2, 3)


class Denies:
    """Denies one operation on every resource, allows the rest."""

    def __init__(self, operation: AclOperation):
        self.operation = operation

    @hookimpl
    def brokkr_authorize(self, actions):
        return [
            AuthorizationResult.DENIED if a.operation == self.operation else AuthorizationResult.ALLOWED
            for a in actions
        ]


def test_write_txn_markers_needs_cluster_action(brokkr_broker_factory):
    broker = start(brokkr_broker_factory, plugins=[Denies(AclOperation.CLUSTER_ACTION)])
    txn_produce(broker, "t", txn_batch([b"a"], PID))
    answer = write_markers_on_the_wire(broker.bootstrap_servers, (PID, 0, True, 0, {"t": [0]}))
    assert answer == [{("t", 0): ErrorCode.CLUSTER_AUTHORIZATION_FAILED}]
    assert broker.broker.partition("t", 0).last_stable_offset == 0  # still open


def test_write_txn_markers_per_partition_errors(brokkr_broker_factory):
    broker = start(brokkr_broker_factory)
    txn_produce(broker, "t", txn_batch([b"a"], PID, epoch=4))
    txn_produce(broker, "t", txn_batch([b"b"], PID + 1), partition=1)
    answers = write_markers_on_the_wire(
        broker.bootstrap_servers,
        (PID, 3, True, 0, {"t": [0], "missing": [0]}),  # a fenced producer epoch
        (PID + 1, 0, False, 7, {"t": [1, 5]}),
        version=1,  # Kafka 4.1's newest (v2, with a transaction version, is 4.2's)
    )
    assert answers == [
        {("t", 0): ErrorCode.INVALID_PRODUCER_EPOCH, ("missing", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION},
        {("t", 1): ErrorCode.NONE, ("t", 5): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION},
    ]
    # The coordinator that wrote epoch 7 was replaced by one at 8; the old one is fenced.
    stale = write_markers_on_the_wire(broker.bootstrap_servers, (PID + 1, 0, False, 6, {"t": [1]}))
    assert stale == [{("t", 1): ErrorCode.TRANSACTION_COORDINATOR_FENCED}]
    p0, p1 = broker.broker.partition("t", 0), broker.broker.partition("t", 1)
    assert (p0.last_stable_offset, p1.last_stable_offset) == (0, 2)
    assert p1.aborted.aborted_txns(0, 2) == [AbortedTxn(PID + 1, 0, 1, 2)]


def fill(broker, end=None):
    """Partition t-0: an aborted transaction (0-1, marker 2), a committed one (3, marker 4)
    and one left open at 5 by another producer. ``end(pid, committed)`` writes a marker
    (default: ``write_txn_markers`` in the broker's process)."""
    end = end or (lambda pid, committed: end_txn(broker, pid, committed, [("t", 0)]))
    txn_produce(broker, "t", txn_batch([b"a1", b"a2"], PID))
    assert end(PID, False) == {("t", 0): ErrorCode.NONE}
    txn_produce(broker, "t", txn_batch([b"c1"], PID, seq=2))
    assert end(PID, True) == {("t", 0): ErrorCode.NONE}
    txn_produce(broker, "t", txn_batch([b"o1", b"o2"], PID + 1))


def check_recovered(partition):
    assert partition.high_watermark == 7 and partition.last_stable_offset == 5
    assert partition.aborted.aborted_txns(0, 7) == [AbortedTxn(PID, 0, 2, 3)]
    assert partition.producers.ongoing == {PID + 1: 5}


def test_transaction_state_survives_a_restart(brokkr_broker_factory, tmp_path):
    config = {"log.dirs": str(tmp_path)}
    broker = start(brokkr_broker_factory, config)
    fill(broker)
    txnindex = tmp_path / "t-0" / "00000000000000000000.txnindex"
    assert txnindex.read_bytes() == struct.pack(">hqqqq", 0, PID, 0, 2, 3)
    broker.stop()
    again = brokkr_broker_factory({**UNVERIFIED, **config})
    check_recovered(again.broker.partition("t", 0))
    # The open transaction goes on after the restart, and ends.
    assert end_txn(again, PID + 1, False, [("t", 0)]) == {("t", 0): ErrorCode.NONE}
    partition = again.broker.partition("t", 0)
    assert partition.last_stable_offset == 8
    assert partition.aborted.aborted_txns(0, 8)[-1] == AbortedTxn(PID + 1, 5, 7, 8)


def test_transaction_state_survives_sigkill(tmp_path):
    served = Served(
        "--override=listeners=PLAINTEXT://127.0.0.1:0",
        f"--override=log.dirs={tmp_path}",
        *(f"--override={k}={v}" for k, v in UNVERIFIED.items()),
        cwd=tmp_path,
    )
    try:
        admin = AdminClient({"bootstrap.servers": served.address})
        admin.create_topics([NewTopic("t", 2)])["t"].result(10)
        remote = SimpleNamespace(bootstrap_servers=served.address)

        def end(pid, committed):
            (answer,) = write_markers_on_the_wire(served.address, (pid, 0, committed, 0, {"t": [0]}))
            return answer

        fill(remote, end)
    finally:
        served.kill()
    assert not list((tmp_path / "t-0").glob("*.snapshot"))  # nothing was snapshotted: all is replayed
    (tmp_path / "t-0" / "00000000000000000000.txnindex").unlink()  # and the index is rebuilt too
    with BrokerThread({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path), **UNVERIFIED}) as again:
        check_recovered(again.broker.partition("t", 0))


def describe_producers(bootstrap: str, topic: str, *partitions: int):
    spec = request_spec(61)
    body = spec.cls(topics=[spec.struct("TopicRequest")(name=topic, partition_indexes=list(partitions))])
    with RawClient(bootstrap) as c:
        return c.request(61, 0, body).topics[0].partitions


def test_describe_producers_shows_open_transactions(brokkr_broker_factory):
    broker = start(brokkr_broker_factory)
    fill(broker)
    p0, p5 = describe_producers(broker.bootstrap_servers, "t", 0, 5)
    assert p5.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    states = {s.producer_id: s for s in p0.active_producers}
    assert (states[PID].current_txn_start_offset, states[PID].last_sequence) == (-1, 2)
    assert (states[PID + 1].current_txn_start_offset, states[PID + 1].last_sequence) == (5, 1)
    assert states[PID].producer_epoch == 0 and states[PID].coordinator_epoch == 0


def test_describe_producers_needs_read(brokkr_broker_factory):
    broker = start(brokkr_broker_factory, plugins=[Denies(AclOperation.READ)])
    (p0,) = describe_producers(broker.bootstrap_servers, "t", 0)
    assert p0.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED and not p0.active_producers


def test_dump_log_prints_the_txnindex_as_kafka_does(tmp_path):
    path = tmp_path / "00000000000000000000.txnindex"
    path.write_bytes(encode_entry(AbortedTxn(7, 1, 3, 4)) + encode_entry(AbortedTxn(8, 5, 9, 10)))
    out = io.StringIO()
    assert dump_files([path], out, io.StringIO()) == 0
    assert out.getvalue().splitlines()[1:] == [
        "version: 0 producerId: 7 firstOffset: 1 lastOffset: 3 lastStableOffset: 4",
        "version: 0 producerId: 8 firstOffset: 5 lastOffset: 9 lastStableOffset: 10",
    ]
    path.write_bytes(b"\0" * 35)
    assert dump_files([path], io.StringIO(), io.StringIO()) == 1
