"""Hand-driven transactions for tests: transactional batches on raw Produce requests and
markers written with ``write_txn_markers``, so the partition side is tested without a
transaction coordinator."""

from __future__ import annotations

import time

from brokkr.core.errors import ErrorCode
from brokkr.core.protocol.frames import request_spec
from brokkr.core.protocol.records import TRANSACTIONAL_FLAG, build_batch
from brokkr.core.testing import RawClient
from brokkr.core.txn_markers import TxnMarker, write_txn_markers
from wire import PRODUCE, produce_body

#: Kafka's KIP-890 setting, off: these tests hand-drive transactions with no transaction
#: coordinator (no AddPartitionsToTxn), which a broker that verifies would refuse, as Kafka
#: does. Served by the transaction coordinator plugin; a broker without it ignores it.
UNVERIFIED = {"transaction.partition.verification.enable": "false"}
T0 = int(time.time() * 1000)  # markers carry the time they are written: no roll on segment.ms
TXN_ID = "txn"


def txn_batch(values: list[bytes], pid: int, epoch: int = 0, seq: int = 0, transactional: bool = True) -> bytes:
    """A batch of ``values`` from producer ``pid``, transactional unless told otherwise."""
    return build_batch(
        [(b"k", v) for v in values],
        timestamp=T0,
        attributes=TRANSACTIONAL_FLAG if transactional else 0,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )


def txn_produce(broker, topic: str, records: bytes, partition: int = 0, version: int = 9, txn_id=TXN_ID, acks=-1):
    """One Produce request with the transactional id; the partition's response."""
    body = produce_body(topic, records, acks=acks, partition=partition)
    body.transactional_id = txn_id
    with RawClient(broker.bootstrap_servers) as c:
        return c.request(PRODUCE, version, body).responses[0].partition_responses[0]


def end_txn(broker, pid: int, committed: bool, partitions, epoch: int = 0, coordinator_epoch: int = 0):
    """Write the COMMIT or ABORT marker to ``partitions`` on ``broker``; the error codes."""
    marker = TxnMarker(pid, epoch, committed, coordinator_epoch, tuple(partitions))
    return broker.call(write_txn_markers, broker.broker, marker)


WRITE_TXN_MARKERS = 27


def write_txn_markers_body(*markers):
    """``markers``: (producer id, epoch, committed, coordinator epoch, {topic: [partitions]})."""
    spec = request_spec(WRITE_TXN_MARKERS)
    marker, topic = spec.struct("WritableTxnMarker"), spec.struct("WritableTxnMarkerTopic")
    return spec.cls(
        markers=[
            marker(
                producer_id=pid,
                producer_epoch=epoch,
                transaction_result=committed,
                coordinator_epoch=coordinator_epoch,
                topics=[topic(name=name, partition_indexes=list(ps)) for name, ps in topics.items()],
            )
            for pid, epoch, committed, coordinator_epoch, topics in markers
        ]
    )


def write_markers_on_the_wire(bootstrap: str, *markers, version: int = 1) -> list[dict]:
    """WriteTxnMarkers as a coordinator on another broker sends it: per marker,
    {(topic, partition): error code}."""
    with RawClient(bootstrap) as c:
        response = c.request(WRITE_TXN_MARKERS, version, write_txn_markers_body(*markers))
    return [
        {(t.name, p.partition_index): p.error_code for t in m.topics for p in t.partitions} for m in response.markers
    ]


A, B, C = 9100, 9200, 9300


def build_log(broker, topic="rc"):
    """The log of ``topic``-0 (offset: what):

    0 p0 (plain)   1-2 A aborted   3 ABORT A   4 B   5-6 C   7 COMMIT C   8 COMMIT B
    9 A again      10 ABORT A      11 p1 (plain)   12 B, left open

    read_committed sees p0, b1, c1, c2, p1; the last stable offset is 12."""
    one = [(topic, 0)]
    plain = build_batch([(b"k", b"p0")], timestamp=T0)
    assert txn_produce(broker, topic, plain, txn_id=None).error_code == ErrorCode.NONE
    txn_produce(broker, topic, txn_batch([b"a1", b"a2"], A))
    end_txn(broker, A, False, one)
    txn_produce(broker, topic, txn_batch([b"b1"], B))
    txn_produce(broker, topic, txn_batch([b"c1", b"c2"], C))
    end_txn(broker, C, True, one)
    end_txn(broker, B, True, one)
    txn_produce(broker, topic, txn_batch([b"a3"], A, seq=2))
    end_txn(broker, A, False, one)
    assert txn_produce(broker, topic, build_batch([(b"k", b"p1")], timestamp=T0), txn_id=None).error_code == 0
    txn_produce(broker, topic, txn_batch([b"b2"], B, seq=1))


COMMITTED = [b"p0", b"b1", b"c1", b"c2", b"p1"]
