"""Conversion: the batch as it is stored under the topic's ``compression.type`` and
``message.timestamp.type``, as Kafka's ``LogValidator`` builds it.

A batch is kept *in place* when it is stored with the codec it came with and its records
carry offsets 0..n-1: only the header changes (timestamp type, max timestamp and CRC,
:func:`~brokkr.core.protocol.records.set_max_timestamp`), so a compressed records section
is never recompressed just to stamp LogAppendTime. Otherwise it is *rebuilt*: the records
section, renumbered if its offsets are not sequential (Kafka rewrites those of old clients
rather than refusing them), is compressed with the topic's codec under a new header that
keeps the producer id, epoch and base sequence, the base timestamp and the other attribute
bits. The records keep their order, timestamps and headers.
"""

from __future__ import annotations

from .compression import Codec
from .protocol.records import (
    CODEC_MASK,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    RecordScan,
    encode_batch,
    encode_record,
    iter_records,
)


def sequential_offsets(scan: RecordScan) -> bool:
    """Whether the records' offsets are 0..n-1, which in-place storage needs."""
    return scan.sequential


def rebuild(
    header: BatchHeader,
    payload: bytes | memoryview,
    scan: RecordScan,
    codec: Codec,
    max_timestamp: int,
    log_append_time: bool,
) -> bytearray:
    """The batch ``header`` heads, its (decompressed) records ``payload`` compressed with
    ``codec`` and stamped with the given timestamp type and max timestamp."""
    if not sequential_offsets(scan):  # renumbered one record at a time: memory is the output's size
        renumbered = bytearray()
        for i, r in enumerate(iter_records(header, payload)):
            renumbered += encode_record(i, r.timestamp - header.base_timestamp, r.key, r.value, r.headers)
        payload = renumbered
    attributes = header.attributes & ~(CODEC_MASK | TIMESTAMP_TYPE_MASK) | codec.id
    if log_append_time:
        attributes |= TIMESTAMP_TYPE_MASK
    return encode_batch(
        codec.compress(payload),
        record_count=header.record_count,
        attributes=attributes,
        base_timestamp=header.base_timestamp,
        max_timestamp=max_timestamp,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
    )
