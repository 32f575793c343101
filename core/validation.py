"""Record validation and conversion: the types of the ``brokkr_validate_records`` stage and
brokkr's built-in, batch-level validator (the checks of Kafka's ``LogValidator`` that need
no record decoding).

The validator never loops over records in Python: for an uncompressed magic-2 batch
everything checked here lives in the 61-byte header and the CRC-32C, computed in C.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

import attrs

from .errors import BrokkrError, CorruptRequest, ErrorCode
from .plugins import hookimpl
from .protocol.records import BatchHeader, crc_ok, iter_batches_untrusted

if TYPE_CHECKING:
    from .broker import Broker
    from .context import RequestContext
    from .partition import Partition

ZSTD_ID = 4
ZSTD_MIN_PRODUCE_VERSION = 7  # KIP-110


@runtime_checkable
class Codec(Protocol):
    """A compression codec, as Kafka numbers them: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd."""

    id: int
    name: str

    def compress(self, data: bytes | memoryview) -> bytes: ...

    def decompress(self, data: bytes | memoryview) -> bytes: ...


@attrs.frozen
class ValidatedRecords:
    """Records ready for offset assignment: a private, mutable copy and its batch headers."""

    records: bytearray
    batches: list[BatchHeader]
    record_count: int
    max_timestamp: int


class RecordsError(BrokkrError):
    """Reject one partition's records. ``record_errors`` are KIP-467's (batch index, message)."""

    def __init__(self, code: ErrorCode, message: str, record_errors: list[tuple[int, str]] | None = None):
        super().__init__(message, code)
        self.record_errors = record_errors or []


def validate_batches(partition: Partition, records: memoryview | None, api_version: int, codecs) -> ValidatedRecords:
    """The batch-level checks, in Kafka's order; raises :class:`RecordsError`."""
    if not records:
        raise RecordsError(ErrorCode.INVALID_RECORD, "Produce requests must have at least one record batch")
    try:
        batches = list(iter_batches_untrusted(records))
    except CorruptRequest as exc:
        if "magic" in str(exc):
            raise RecordsError(
                ErrorCode.INVALID_RECORD, f"Produce requests only accept magic 2 batches: {exc}"
            ) from None
        raise RecordsError(ErrorCode.CORRUPT_MESSAGE, str(exc)) from None
    if not batches or batches[-1].end != len(records):
        raise RecordsError(ErrorCode.CORRUPT_MESSAGE, "record set ends in a partial batch")
    if len(batches) != 1:
        raise RecordsError(
            ErrorCode.INVALID_RECORD, "Produce requests must have exactly one record batch per partition"
        )
    batch = batches[0]
    max_size = partition.config["max.message.bytes"]
    if batch.size > max_size:
        raise RecordsError(
            ErrorCode.MESSAGE_TOO_LARGE,
            f"The record batch size {batch.size} exceeds max.message.bytes {max_size}",
        )
    if not crc_ok(records, batch):
        raise RecordsError(ErrorCode.CORRUPT_MESSAGE, f"Record batch is corrupt (CRC-32C mismatch, stored {batch.crc})")
    if batch.record_count <= 0 or batch.record_count != batch.last_offset_delta + 1:
        raise RecordsError(
            ErrorCode.INVALID_RECORD,
            f"Inconsistent batch offset range: {batch.record_count} records, last offset delta "
            f"{batch.last_offset_delta}",
        )
    if batch.codec not in codecs or (batch.codec == ZSTD_ID and api_version < ZSTD_MIN_PRODUCE_VERSION):
        raise RecordsError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"Compression type {batch.codec} is not supported")
    return ValidatedRecords(bytearray(records), batches, batch.record_count, batch.max_timestamp)


@hookimpl(trylast=True)
def brokkr_validate_records(
    partition: Partition, records: memoryview, context: RequestContext, broker: Broker
) -> ValidatedRecords:
    return validate_batches(partition, records, context.api_version, broker.codecs)
