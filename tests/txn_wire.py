"""Hand-driven transactions for tests: transactional batches on raw Produce requests and
markers written with ``write_txn_markers``, so the partition side is tested without a
transaction coordinator."""

from __future__ import annotations

import time

from brokkr.core.protocol.frames import request_spec
from brokkr.core.protocol.records import TRANSACTIONAL_FLAG, build_batch
from brokkr.core.testing import RawClient
from brokkr.core.txn_markers import TxnMarker, write_txn_markers
from wire import PRODUCE, produce_body

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
