"""Record validation and conversion: the types of the ``brokkr_validate_records`` stage and
brokkr's built-in validator, which checks what Kafka checks before an append, in Kafka's
order and with its error codes and messages:

1. ``ProduceRequest.validateRecords``: exactly one batch, of magic 2; zstd from Produce v7.
2. ``UnifiedLog.analyzeAndValidateRecords``: base offset 0, size within
   ``max.message.bytes``, CRC-32C; then a codec this broker has.
3. ``LogValidator.validateBatch``: record count against the offset range, no control
   batches, a sequence number wherever there is a producer id.
4. ``LogValidator``'s walk of the records: its record iterator
   (``DefaultRecordBatch.RecordIterator``) refuses fewer or more records than the header
   counts, or a malformed one (INVALID_RECORD); brokkr also refuses an uncompressed
   batch's offset deltas other than 0..n-1, which Kafka stores as sent (it renumbers a
   compressed batch's). Then the record checks (:mod:`brokkr.core.record_checks`) and
   conversion (:mod:`brokkr.core.conversion`); a rebuilt batch must still fit
   ``max.message.bytes``.

Step 4 takes one of Kafka's two paths. A batch that is uncompressed and stored
uncompressed is validated from its 61-byte header, its CRC and a walk of its records'
lengths and offset deltas, all in C, unless a rule needs the records' contents
(a compacted topic: keys; timestamps the header cannot vouch for; a producer claiming
LogAppendTime), the C walk is not built or does not accept the records, or they are too
many to walk on the event loop. Unlike Kafka, that path trusts the header's max
timestamp, so that the common case never loops over records in Python. Any other batch
is decompressed once, with its output bounded by ``socket.request.max.bytes`` (a client
can make the broker hold no more than that by sending it uncompressed), walked once, and
stored in place or rebuilt.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Iterator
from typing import TYPE_CHECKING

import attrs

from .compression import (
    NONE_ID,
    ZSTD_ID,
    Codec,
    DecompressedSizeExceeded,
    DecompressionError,
    Scratch,
    target_codec_id,
)
from .conversion import rebuild, sequential_offsets
from .errors import BrokkrError, CorruptRequest, ErrorCode
from .plugins import hookimpl
from .protocol.records import (
    CODEC_MASK,
    HEADER_SIZE,
    NO_PRODUCER_ID,
    NO_TIMESTAMP,
    BatchHeader,
    Record,
    RecordScan,
    check_offset_deltas,
    check_records_c,
    crc_ok,
    iter_batches_untrusted,
    scan_records_c,
    scan_records_untrusted,
    set_max_timestamp,
)
from .protocol.records import iter_records as _batch_records
from .record_checks import RecordRules, need_records, rejection_message

try:
    from .protocol import _produce  # _single_batch and _check_header in C (core/protocol/_produce.c)
except ImportError:  # not built: the Python checks run alone
    _produce = None

if TYPE_CHECKING:
    from .broker import Broker
    from .context import RequestContext
    from .partition import Partition

__all__ = ["Codec", "Record", "RecordsError", "ValidatedRecords", "iter_records", "validate_batches"]

ZSTD_MIN_PRODUCE_VERSION = 7  # KIP-110
#: The smallest record: length, attributes, timestamp delta, offset delta, key length,
#: value length and header count, one byte each (Kafka's DefaultRecord).
MIN_RECORD_SIZE = 7
#: Record walks up to this size run on the event loop (about 2 us a record: a few ms at
#: most); larger ones, and compressed batches decompressing to more than
#: INLINE_DECOMPRESSED_BYTES, run in the broker's offload pool (brokkr.core.offload).
INLINE_RECORDS = 2000
INLINE_BYTES = 256 * 1024
INLINE_DECOMPRESSED_BYTES = 1 << 20
#: The C walk of an uncompressed batch's records takes about 20 ns a record: up to this
#: many it runs on the event loop (a few ms at most), as part of the header-only path.
INLINE_C_RECORDS = 200_000


@attrs.define  # not frozen: a frozen class's __init__ costs three times as much, once a partition
class ValidatedRecords:
    """Records ready for offset assignment, private and mutable (see :func:`own`), and their
    batch headers, as they will be stored (``max_timestamp`` included). ``log_append_time`` is the
    broker's time stamped on them under LogAppendTime, else -1, as the Produce response's
    ``log_append_time_ms`` reports it. The fields are not changed after."""

    records: bytearray | memoryview
    batches: list[BatchHeader]
    record_count: int
    max_timestamp: int
    log_append_time: int = NO_TIMESTAMP


def own(records: memoryview) -> bytearray | memoryview:
    """Records the append may stamp offsets into: the request's own bytes when they are
    writable (the frame body a connection hands to its request alone, see
    :mod:`brokkr.core.channel`), so that the bytes go from the socket to the log without
    a copy; else (bytes, e.g. a frame a test or tool built) a copy."""
    return records if not records.readonly else bytearray(records)


class RecordsError(BrokkrError):
    """Reject one partition's records. ``record_errors`` are KIP-467's (batch index, message)."""

    def __init__(self, code: ErrorCode, message: str, record_errors: list[tuple[int, str]] | None = None):
        super().__init__(message, code)
        self.record_errors = record_errors or []

    def __reduce__(self):  # raised in offload workers, re-raised here
        return (RecordsError, (self.code, str(self), self.record_errors))


def iter_records(validated: ValidatedRecords, broker: Broker) -> Iterator[Record]:
    """The records of a batch the built-in validator has accepted, one at a time: what a
    plugin checking records walks (a wrapper of ``brokkr_validate_records``, see the README's
    "Writing a plugin"). Each is a :class:`~brokkr.core.protocol.records.Record` (offset,
    timestamp, key, value, headers); offsets are not assigned yet, so a record's ``offset``
    is its index in the batch, the batch index of a KIP-467 record error. A compressed
    batch is decompressed once, within ``socket.request.max.bytes`` as the validator does,
    with the broker's codecs: call it on the event loop. Nothing is kept: one record at a
    time is decoded, so a batch of many records costs its walk's time, not memory (a plugin
    walking large batches often should do so in a worker, as the hook's documentation says)."""
    records = memoryview(validated.records)
    bound = broker.config["socket.request.max.bytes"]
    for header in validated.batches:
        section = records[header.position + HEADER_SIZE : header.end]
        if header.codec != NONE_ID:
            section = broker.codecs[header.codec].decompress(section, bound)
        yield from _batch_records(header, section)


def validate_batches(
    partition: Partition,
    records: memoryview | None,
    api_version: int,
    codecs: dict[int, Codec],
    max_decompressed_size: int,
    now: int,
) -> ValidatedRecords:
    """Validate and convert one partition's records (``now`` in ms); raises :class:`RecordsError`.
    Everything runs in the caller's thread (tools, tests); the built-in hook below moves
    heavy batches off the event loop."""
    plan = prepare_batch(partition, records, api_version, codecs, max_decompressed_size, now)
    return plan if isinstance(plan, ValidatedRecords) else plan.run(codecs)


def prepare_batch(
    partition: Partition,
    records: memoryview | None,
    api_version: int,
    codecs: dict[int, Codec],
    max_decompressed_size: int,
    now: int,
) -> ValidatedRecords | RecordWalk:
    """Everything that reads only the batch header (and, in C, its CRC and an uncompressed
    batch's record lengths): the finished :class:`ValidatedRecords` when that settles every
    rule (an uncompressed batch stored uncompressed), else the :class:`RecordWalk` still to
    do. Raises RecordsError."""
    if type(records) is not memoryview:  # a request's records are a view already
        records = memoryview(records or b"")
    config = partition.topic.config
    topic_settings = config.derived.get(prepare_batch)
    if topic_settings is None:  # read once per change of the topic's settings
        topic_settings = config.derived[prepare_batch] = (
            config["max.message.bytes"],
            config["compression.type"],
            RecordRules.settings(config),
        )
    max_message_bytes, compression_type, settings = topic_settings
    header = _checked_header(partition, records, api_version, codecs, max_message_bytes)
    codec = header.codec
    target = target_codec_id(compression_type, codec)
    if target not in codecs:
        raise RecordsError(
            ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
            f"Compression type {target} of topic {partition.topic.name} is not available on this broker",
        )
    if (
        codec == NONE_ID
        and target == NONE_ID
        and not need_records(header, now, settings)
        and header.record_count <= INLINE_C_RECORDS
        and check_records_c(header, records[HEADER_SIZE:])
    ):
        buf = own(records)
        if not settings[0]:  # CreateTime, as the header says (need_records refused LogAppendTime)
            return ValidatedRecords(buf, [header], header.record_count, header.max_timestamp)
        header = set_max_timestamp(buf, header, now, True)
        return ValidatedRecords(buf, [header], header.record_count, now, now)
    rules = RecordRules(partition.name, now, *settings)
    # A record takes at least MIN_RECORD_SIZE bytes: refuse a count the bytes cannot hold
    # before decompressing or walking anything.
    room = header.size - HEADER_SIZE if header.codec == NONE_ID else max_decompressed_size
    if header.record_count > room // MIN_RECORD_SIZE:
        raise RecordsError(
            ErrorCode.INVALID_RECORD,
            f"Invalid record in topic partition {partition.name}: {header.record_count} records cannot fit in "
            f"{room} bytes",
        )
    # Stored uncompressed, a rebuilt batch holds at least MIN_RECORD_SIZE bytes a record:
    # refuse one that cannot fit the topic's max.message.bytes before walking it.
    if target == NONE_ID and header.codec != NONE_ID:
        smallest = HEADER_SIZE + header.record_count * MIN_RECORD_SIZE
        if smallest > max_message_bytes:
            raise RecordsError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"Message batch size is at least {smallest} bytes in append to partition {partition.name} which "
                f"exceeds the maximum configured size of {max_message_bytes}.",
            )
    return RecordWalk(records, header, target, rules, max_decompressed_size, max_message_bytes)


@attrs.frozen
class RecordWalk:
    """The part of validation that reads the records: decompress once, walk once, check the
    record rules, then keep the batch or rebuild it with the topic's codec. Plain data, so
    that it can run in another process (:mod:`brokkr.core.offload`)."""

    records: bytes | memoryview  # bytes when sent to another process
    header: BatchHeader
    target: int
    rules: RecordRules
    max_decompressed_size: int
    max_message_bytes: int

    @property
    def light(self) -> bool:
        """Cheap enough for the event loop: few records, and few bytes to decompress (a
        compressed batch that turns out larger is walked elsewhere: see ``run``)."""
        return self.header.record_count <= INLINE_RECORDS and len(self.records) <= INLINE_BYTES

    def run(
        self,
        codecs: dict[int, Codec],
        decompressed_cap: int | None = None,
        elsewhere: bool = False,
        in_thread: bool = False,
        scratch: Scratch | None = None,
    ) -> ValidatedRecords:
        """Raises RecordsError, or :class:`TooLargeToRunHere` when the records decompress
        to more than ``decompressed_cap`` bytes. Run ``elsewhere`` (another process), a
        batch kept as it came is answered without its bytes (``records`` None), which
        :meth:`kept` then stamps into the caller's own: only a rebuilt batch travels back.
        Run ``in_thread`` (a worker thread of this process), the C record walk lets go of
        the GIL, and anything that would take per-record Python raises
        :class:`RunElsewhere` instead. With a ``scratch``, the records are decompressed
        into its buffer (by codecs that can), which is free again once this returns."""
        header = self.header
        capped = decompressed_cap is not None and decompressed_cap < self.max_decompressed_size
        try:
            payload = _decompress(
                codecs,
                header,
                memoryview(self.records),
                decompressed_cap if capped else self.max_decompressed_size,
                scratch,
            )
        except DecompressedSizeExceeded as exc:
            if capped:
                raise TooLargeToRunHere() from None
            raise RecordsError(ErrorCode.INVALID_RECORD, f"Record batch {exc}") from None
        try:
            return self._check(codecs, payload, elsewhere, in_thread)
        finally:
            if isinstance(payload, memoryview):
                payload.release()

    def _check(
        self, codecs: dict[int, Codec], payload: bytes | memoryview, elsewhere: bool, in_thread: bool
    ) -> ValidatedRecords:
        """``run``'s walk of the decompressed records, and what it makes of the batch."""
        header, rules, records = self.header, self.rules, memoryview(self.records)
        if header.record_count > len(payload) // MIN_RECORD_SIZE:
            raise RecordsError(
                ErrorCode.INVALID_RECORD,
                f"Invalid record in topic partition {rules.partition}: {header.record_count} records cannot fit in "
                f"{len(payload)} bytes",
            )
        if in_thread:  # only what needs no per-record Python
            scan = scan_records_c(header, payload, release_gil=True)
            out_of_order = scan is not None and header.codec == NONE_ID and not scan.sequential  # refused in _scan
            if scan is None or out_of_order or not rules.pass_at_a_glance(header, scan):
                raise RunElsewhere()
        else:
            scan = _scan(header, payload, rules)
        max_timestamp = rules.max_timestamp(header, scan)
        log_append_time = rules.now if rules.log_append_time else NO_TIMESTAMP
        # Inner offsets out of sequence: Kafka renumbers a compressed batch (rebuilds it); an
        # uncompressed one was refused (_scan).
        if header.codec == self.target and (self.target == NONE_ID or sequential_offsets(scan)):
            if elsewhere:
                return ValidatedRecords(None, [header], header.record_count, max_timestamp, log_append_time)
            buf = own(records)
            header = set_max_timestamp(buf, header, max_timestamp, rules.log_append_time)
        elif in_thread:
            raise RunElsewhere()
        else:
            buf = rebuild(header, payload, scan, codecs[self.target], max_timestamp, rules.log_append_time)
            header = BatchHeader.unpack(buf)
            if header.size > self.max_message_bytes:
                raise RecordsError(
                    ErrorCode.MESSAGE_TOO_LARGE,
                    f"Message batch size is {header.size} bytes in append to partition {rules.partition} which "
                    f"exceeds the maximum configured size of {self.max_message_bytes}.",
                )
        return ValidatedRecords(buf, [header], header.record_count, max_timestamp, log_append_time)

    def kept(self, outcome: ValidatedRecords) -> ValidatedRecords:
        """The outcome of a walk run elsewhere, with this walk's records in it when the
        batch was kept as it came (its max timestamp stamped in place)."""
        if outcome.records is not None:
            return outcome
        buf = own(memoryview(self.records))
        header = set_max_timestamp(buf, self.header, outcome.max_timestamp, self.rules.log_append_time)
        return attrs.evolve(outcome, records=buf, batches=[header])


class TooLargeToRunHere(Exception):
    """A walk meant for the event loop found more bytes than it may decompress there."""


class RunElsewhere(Exception):
    """A walk in a worker thread met work that takes per-record Python (damaged records,
    a broken record rule, a batch to rebuild), which would hold the GIL: a process's work."""


def _checked_header(
    partition: Partition, records: memoryview, api_version: int, codecs: dict[int, Codec], max_message_bytes: int
) -> BatchHeader:
    """The header of the one batch a partition's records must be, checked by
    :func:`_single_batch` and :func:`_check_header`: in one C call where the batch passes
    them (the C checks answer None on any failure, and these then word the error)."""
    if _produce is not None:
        header = _produce.check_batch(records, api_version, max_message_bytes, BatchHeader)
        if header is not None:
            if header.attributes & CODEC_MASK not in codecs:
                _check_codec(header, codecs)  # raises
            return header
    header = _single_batch(records, api_version)
    _check_header(partition, records, header, codecs)
    return header


def _single_batch(records: memoryview, api_version: int) -> BatchHeader:
    """Kafka's ``ProduceRequest.validateRecords`` (errors without record errors).

    Message formats v0 and v1 are refused here with INVALID_RECORD, as Kafka 4 refuses
    them: it removed Produce v0-v2 (KIP-896), the only versions that carry them (brokkr's
    dispatcher answers those UNSUPPORTED_VERSION, as Kafka does), and a v3+ request must
    hold magic 2. The v0/v1-to-v2 conversion left in Kafka 4's ``LogValidator`` is
    therefore never reached from a client, so brokkr has none.
    """
    v = api_version
    if not records:
        raise RecordsError(
            ErrorCode.INVALID_RECORD,
            f"Produce requests with version {v} must have at least one record batch per partition",
        )
    try:
        batches = list(iter_batches_untrusted(records))
    except CorruptRequest as exc:
        if "magic" in str(exc):
            raise RecordsError(
                ErrorCode.INVALID_RECORD,
                f"Produce requests with version {v} are only allowed to contain record batches with magic version 2",
            ) from None
        raise RecordsError(ErrorCode.CORRUPT_MESSAGE, str(exc)) from None
    if not batches or batches[-1].end != len(records):
        raise RecordsError(ErrorCode.CORRUPT_MESSAGE, "record set ends in a partial batch")
    if batches[0].codec == ZSTD_ID and v < ZSTD_MIN_PRODUCE_VERSION:
        raise RecordsError(
            ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
            f"Produce requests with version {v} are not allowed to use ZStandard compression",
        )
    if len(batches) != 1:
        raise RecordsError(
            ErrorCode.INVALID_RECORD,
            f"Produce requests with version {v} are only allowed to contain exactly one record batch per partition",
        )
    return batches[0]


def _check_header(partition: Partition, records: memoryview, header: BatchHeader, codecs: dict[int, Codec]) -> None:
    """``UnifiedLog.analyzeAndValidateRecords`` and ``LogValidator.validateBatch``."""
    if header.base_offset != 0:
        raise RecordsError(
            ErrorCode.INVALID_RECORD,
            f"The baseOffset of the record batch in the append to {partition.name} should be 0, "
            f"but it is {header.base_offset}",
        )
    max_size = partition.config["max.message.bytes"]
    if header.size > max_size:
        raise RecordsError(
            ErrorCode.MESSAGE_TOO_LARGE,
            f"The record batch size in the append to {partition.name} is {header.size} bytes which exceeds the maximum "
            f"configured value of {max_size}.",
        )
    if not crc_ok(records, header):
        raise RecordsError(
            ErrorCode.CORRUPT_MESSAGE,
            f"Record is corrupt (stored crc = {header.crc}) in topic partition {partition.name}.",
        )
    _check_codec(header, codecs)
    if header.last_offset_delta < 0:
        raise RecordsError(
            ErrorCode.INVALID_RECORD,
            f"Batch has an invalid offset range: [0, {header.last_offset}] in topic partition {partition.name}",
        )
    if header.record_count <= 0:
        raise RecordsError(
            ErrorCode.INVALID_RECORD,
            f"Invalid reported count for record batch: {header.record_count} in topic partition {partition.name}",
        )
    if header.record_count != header.last_offset_delta + 1:
        raise RecordsError(
            ErrorCode.INVALID_RECORD,
            f"Inconsistent batch offset range [0, {header.last_offset}] and count of records {header.record_count} "
            f"in topic partition {partition.name}",
        )
    if header.is_control:
        raise RecordsError(
            ErrorCode.INVALID_RECORD,
            f"Clients are not allowed to write control records in topic partition {partition.name}",
        )
    if header.producer_id != NO_PRODUCER_ID and header.base_sequence < 0:
        raise RecordsError(
            ErrorCode.INVALID_RECORD,
            f"Invalid sequence number {header.base_sequence} in record batch with producerId {header.producer_id} "
            f"in topic partition {partition.name}",
        )


def _check_codec(header: BatchHeader, codecs: dict[int, Codec]) -> None:
    if header.codec not in codecs:
        raise RecordsError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"Compression type {header.codec} is not supported")


def _decompress(
    codecs: dict[int, Codec], header: BatchHeader, records: memoryview, max_size: int, scratch: Scratch | None = None
) -> bytes | memoryview:
    """The records section, decompressed (once) within ``max_size`` bytes, into the
    ``scratch`` buffer where the codec can; raises DecompressedSizeExceeded past the bound
    (the caller decides what that means)."""
    section = memoryview(records)[HEADER_SIZE : header.end]
    if header.codec == NONE_ID:
        return section
    codec = codecs[header.codec]
    try:
        if scratch is not None and hasattr(codec, "decompress_into"):
            size = codec.decompress_into(section, scratch.buffer, max_size)
            return memoryview(scratch.buffer)[:size]
        return codec.decompress(section, max_size)
    except DecompressedSizeExceeded:
        raise
    except DecompressionError as exc:
        raise RecordsError(ErrorCode.CORRUPT_MESSAGE, f"Record batch cannot be decompressed: {exc}") from None


def _scan(header: BatchHeader, payload: bytes | memoryview, rules: RecordRules) -> RecordScan:
    """Walk the records once; refuse malformed ones (no record errors, as Kafka) and the
    batch of any record that breaks a rule (with KIP-467 record errors).

    Unlike Kafka, an uncompressed batch must also have offset deltas 0..n-1: Kafka stores
    other deltas as sent, and readers then meet records at offsets the batch does not
    cover (past the log end, or two at one offset). Kafka renumbers a compressed batch's."""
    try:
        scan = scan_records_untrusted(header, payload)
        if header.codec == NONE_ID:
            check_offset_deltas(scan)
    except CorruptRequest as exc:
        raise RecordsError(
            ErrorCode.INVALID_RECORD, f"Invalid record in topic partition {rules.partition}: {exc}"
        ) from None
    code, record_errors = rules.errors(header, scan, payload)
    if record_errors:
        if code == ErrorCode.INVALID_TIMESTAMP:
            message = "One or more records have been rejected due to invalid timestamp"
        else:
            message = rejection_message(record_errors)
        raise RecordsError(code, message, record_errors)
    return scan


@hookimpl(trylast=True)
def brokkr_validate_records(
    partition: Partition, records: memoryview, context: RequestContext, broker: Broker
) -> ValidatedRecords | Awaitable[ValidatedRecords]:
    plan = prepare_batch(
        partition,
        records,
        context.api_version,
        broker.codecs,
        broker.config["socket.request.max.bytes"],
        time.time_ns() // 1_000_000,
    )
    if isinstance(plan, ValidatedRecords):
        return plan
    if plan.light:
        try:
            return broker.offload.run_inline(plan, INLINE_DECOMPRESSED_BYTES)
        except TooLargeToRunHere:
            pass
    return broker.offload.run(plan)
