"""Control records: the transaction markers a partition's leader writes (Kafka's
``ControlRecordType`` and ``EndTransactionMarker``).

A transaction ends in each of its partitions with a control batch of one record, written
by the partition's leader at the transaction coordinator's request (WriteTxnMarkers)::

    batch:  attributes = transactional | control (0x30), uncompressed, CreateTime,
            producer id and epoch of the transaction, base sequence -1, 1 record
    record: offset delta 0, timestamp delta 0, no headers
      key   version         int16   0
            type            int16   0 ABORT, 1 COMMIT (other types are KRaft's)
      value version         int16   0
            coordinator     int32   the coordinator epoch that decided the outcome
            epoch

Clients never write control batches (validation refuses them); consumers skip them.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from ..errors import CorruptRequest
from .records import (
    CONTROL_FLAG,
    HEADER_SIZE,
    TRANSACTIONAL_FLAG,
    BatchHeader,
    encode_batch,
    encode_record,
    iter_records,
)

ABORT = 0
COMMIT = 1
CONTROL_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0
_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")
#: The attributes of every transaction marker batch.
MARKER_ATTRIBUTES = TRANSACTIONAL_FLAG | CONTROL_FLAG


class EndTxnMarker(NamedTuple):
    """What a marker record says: the outcome and the coordinator epoch."""

    committed: bool
    coordinator_epoch: int


def encode_marker_batch(
    producer_id: int, producer_epoch: int, committed: bool, coordinator_epoch: int, timestamp: int
) -> bytearray:
    """A COMMIT or ABORT marker batch at base offset 0 (the leader assigns offset and
    epoch when appending it), as Kafka's ``MemoryRecords.withEndTransactionMarker``."""
    key = _KEY.pack(CONTROL_KEY_VERSION, COMMIT if committed else ABORT)
    value = _VALUE.pack(END_TXN_MARKER_VERSION, coordinator_epoch)
    return encode_batch(
        encode_record(0, 0, key, value),
        record_count=1,
        attributes=MARKER_ATTRIBUTES,
        base_timestamp=timestamp,
        max_timestamp=timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=-1,
    )


def read_end_txn_marker(buf: bytes | bytearray | memoryview, header: BatchHeader) -> EndTxnMarker | None:
    """The transaction marker of the control batch ``header`` describes in ``buf``, or None
    for a control record of another type or one that does not read (Kafka skips those).
    A marker batch is uncompressed and holds one small record: this decodes that one."""
    if header.codec or header.record_count < 1:
        return None
    try:
        record = next(iter_records(header, memoryview(buf)[header.position + HEADER_SIZE : header.end]))
    except CorruptRequest:
        return None
    key, value = record.key or b"", record.value or b""
    if len(key) < _KEY.size or len(value) < _VALUE.size:
        return None
    _, kind = _KEY.unpack_from(key)
    if kind not in (ABORT, COMMIT):
        return None
    return EndTxnMarker(kind == COMMIT, _VALUE.unpack_from(value)[1])
