"""Hand-driven transactions for tests: transactional batches on raw Produce requests and
markers written with ``write_txn_markers``, so the partition side is tested without a
transaction coordinator."""

from __future__ import annotations

import time

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
