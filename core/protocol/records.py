"""RecordBatch v2: Kafka's record format, as bytes in and bytes out.

On the hot path a batch stays bytes: the broker reads the 61-byte header, checks the
CRC-32C, and patches the base offset and partition leader epoch in place (the CRC covers
neither). Records are walked only where semantics need them: :func:`scan_records_untrusted`
gathers what validation checks (compressed batches, compacted topics, timestamp bounds)
in one pass, :func:`decode_records` materialises them (timestamp lookups, conversion,
tests). :func:`encode_batch` wraps a records section (compressed or not) in a header and
CRC; :func:`build_batch` builds whole uncompressed batches for tests, tools and benchmarks.

Batch header (all big-endian)::

    base_offset            int64   0   first offset of the batch (assigned by the broker)
    batch_length           int32   8   bytes after this field
    partition_leader_epoch int32  12   set by the broker
    magic                  int8   16   2 (offset 16 holds the magic in v0/v1 messages too)
    crc                    uint32 17   CRC-32C of everything from attributes to the end
    attributes             int16  21   bits 0-2 codec, 3 timestamp type, 4 transactional,
                                       5 control, 6 delete horizon
    last_offset_delta      int32  23
    base_timestamp         int64  27
    max_timestamp          int64  35
    producer_id            int64  43
    producer_epoch         int16  51
    base_sequence          int32  53
    record_count           int32  57
    records                ...    61

Record (inside the batch, possibly compressed)::

    length varint, attributes int8, timestamp_delta varlong, offset_delta varint,
    key_length varint (-1 = null), key, value_length varint (-1 = null), value,
    header_count varint, [header_key_length varint, key, value_length varint, value]...
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Iterator, Sequence
from typing import NamedTuple

import attrs
import crc32c

from ..errors import CorruptRequest
from .primitives import VARINT_MAX_BYTES, VARLONG_MAX_BYTES, decode_uvarint, encode_varint

try:
    from . import _recordscan  # the record walk in C (core/protocol/_recordscan.c)
except ImportError:  # not built: the Python walk runs
    _recordscan = None
C_WALK = _recordscan is not None

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # base_offset + batch_length
#: The smallest size a batch may declare in any format (Kafka's RECORD_OVERHEAD_V0), so
#: that a small v0/v1 message set is told apart by its magic rather than by its size.
LEGACY_MIN_SIZE = 14
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
MAX_TIMESTAMP_OFFSET = 35
_BASE_OFFSET = struct.Struct(">q")
_EPOCH = struct.Struct(">i")
_LENGTH = struct.Struct(">i")
_CRC = struct.Struct(">I")
_ATTRIBUTES = struct.Struct(">h")
_TIMESTAMP = struct.Struct(">q")

CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08  # set: LogAppendTime
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20

NO_PRODUCER_ID = -1
NO_TIMESTAMP = -1


class BatchHeader(NamedTuple):
    """The header of one batch and where it sits in its buffer (one per batch, never per
    record). A named tuple: recovery builds one per stored batch, so it must be cheap."""

    position: int
    base_offset: int
    batch_length: int
    leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @classmethod
    def unpack(cls, buf: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
        """The header of the batch at ``position``; the caller has checked that it fits."""
        return cls(position, *HEADER.unpack_from(buf, position))

    @property
    def size(self) -> int:
        return LOG_OVERHEAD + self.batch_length

    @property
    def end(self) -> int:
        return self.position + self.size

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def codec(self) -> int:
        return self.attributes & CODEC_MASK

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG)

    @property
    def log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_MASK)


def iter_batches_untrusted(buf: bytes | bytearray | memoryview) -> Iterator[BatchHeader]:
    """Walk the batches of a record set, checking every size before it is used.

    Yields the header of each whole batch. A trailing partial batch (which a fetch may
    legitimately return) ends the walk; a size that is impossible raises CorruptRequest.
    Only magic 2 headers are decoded; other magics raise CorruptRequest with the magic
    in the message, so callers can map them to their own error.
    """
    mv = memoryview(buf)
    pos, end = 0, len(mv)
    while pos + LOG_OVERHEAD <= end:
        (length,) = _LENGTH.unpack_from(mv, pos + 8)
        if length < LEGACY_MIN_SIZE:
            raise CorruptRequest(f"record batch at {pos} declares size {length}, below the minimum")
        if pos + LOG_OVERHEAD + length > end:
            return
        magic = mv[pos + MAGIC_OFFSET]
        if magic != 2:
            raise CorruptRequest(f"record batch at {pos} has magic {magic}; only magic 2 is supported")
        if length < HEADER_SIZE - LOG_OVERHEAD:
            raise CorruptRequest(f"record batch at {pos} declares size {length}, below the minimum")
        yield BatchHeader.unpack(mv, pos)
        pos += LOG_OVERHEAD + length


def next_offset_after(buf: bytes | bytearray | memoryview, default: int) -> int:
    """One past the last offset of the last whole batch in ``buf`` (``default`` if none):
    a hop from batch length to batch length, reading two header fields of the last batch
    only (a fetch's aborted-transaction search needs where its records end)."""
    pos, end, last = 0, len(buf), -1
    while pos + LOG_OVERHEAD <= end:
        (length,) = _LENGTH.unpack_from(buf, pos + 8)
        if length < HEADER_SIZE - LOG_OVERHEAD or pos + LOG_OVERHEAD + length > end:
            break
        last, pos = pos, pos + LOG_OVERHEAD + length
    if last < 0:
        return default
    return _BASE_OFFSET.unpack_from(buf, last)[0] + _LENGTH.unpack_from(buf, last + LAST_OFFSET_DELTA_OFFSET)[0] + 1


def crc_ok(buf: bytes | bytearray | memoryview, header: BatchHeader) -> bool:
    return crc32c.crc32c(memoryview(buf)[header.position + ATTRIBUTES_OFFSET : header.end]) == header.crc


def patch_batch(buf: bytearray, position: int, base_offset: int, leader_epoch: int) -> None:
    """Assign a batch its offsets and epoch in place; neither is covered by the CRC."""
    _BASE_OFFSET.pack_into(buf, position, base_offset)
    _EPOCH.pack_into(buf, position + 12, leader_epoch)


def set_max_timestamp(buf: bytearray, header: BatchHeader, max_timestamp: int, log_append_time: bool) -> BatchHeader:
    """Kafka's ``DefaultRecordBatch.setMaxTimestamp``: rewrite the timestamp type bit and
    the max timestamp of the batch ``header`` describes, and its CRC, in place. The records
    section (compressed or not) is untouched. Returns the header as it now is; a batch that
    already says so is left alone."""
    if log_append_time:
        attributes = header.attributes | TIMESTAMP_TYPE_MASK
    else:
        attributes = header.attributes & ~TIMESTAMP_TYPE_MASK
    if attributes == header.attributes and max_timestamp == header.max_timestamp:
        return header
    _ATTRIBUTES.pack_into(buf, header.position + ATTRIBUTES_OFFSET, attributes)
    _TIMESTAMP.pack_into(buf, header.position + MAX_TIMESTAMP_OFFSET, max_timestamp)
    crc = crc32c.crc32c(memoryview(buf)[header.position + ATTRIBUTES_OFFSET : header.end])
    _CRC.pack_into(buf, header.position + CRC_OFFSET, crc)
    return header._replace(attributes=attributes, max_timestamp=max_timestamp, crc=crc)


# -- records: walking, decoding and building (only where semantics need records) ----


@attrs.frozen
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


@attrs.frozen
class RecordScan:
    """What validation needs from a batch's records, gathered in one pass: one object per
    batch, arrays indexed like the records (8 bytes a record, no object per record, so a
    batch of millions of tiny records costs a bounded multiple of its size)."""

    timestamp_deltas: array
    offset_deltas: array
    keyless: array  # indexes of the records without a key
    sequential: bool  # whether the offset deltas are 0..n-1
    min_timestamp_delta: int  # of timestamp_deltas, gathered by the walk (0 for no records)
    max_timestamp_delta: int


def scan_records_untrusted(header: BatchHeader, payload: bytes | memoryview) -> RecordScan:
    """Walk the (already decompressed) records section of a batch from a peer.

    Checks what Kafka's record iterator checks: ``record_count`` well-formed records, each
    within its declared length, that fill the section exactly. Raises CorruptRequest.

    This walk is the cost of every record a compressed produce carries (Kafka walks them
    too): it runs in C (:func:`scan_records_c`), and what the C walk does not accept, or
    everything when it is not built, the Python walk (:func:`scan_records_python`) decides,
    with its error message.
    """
    return scan_records_c(header, payload) or scan_records_python(header, payload)


def scan_records_c(header: BatchHeader, payload: bytes | memoryview, release_gil: bool = False) -> RecordScan | None:
    """:func:`scan_records_untrusted` in C (``_recordscan``, built with brokkr where a C
    compiler is: a few ns a record, and without the GIL when ``release_gil``, for worker
    threads). None when it is not built, or the records are not ones it accepts (the
    Python walk then decides)."""
    count = header.record_count
    if _recordscan is None or not 0 <= count <= len(payload):  # each record takes a byte at least
        return None
    timestamp_deltas, offset_deltas, keyless = (array("q", [0]) * count for _ in range(3))
    found = _recordscan.scan(payload, count, timestamp_deltas, offset_deltas, keyless, release_gil)
    if found is None:
        return None
    keyless_count, sequential, low, high = found
    del keyless[keyless_count:]
    return RecordScan(timestamp_deltas, offset_deltas, keyless, sequential, low, high)


def check_records_c(header: BatchHeader, payload: bytes | memoryview) -> bool:
    """Whether the (uncompressed) records section holds exactly ``record_count``
    well-formed records with offset deltas 0..n-1, as the C walk tells without writing
    anything (``_recordscan.check``, about 20 ns a record). False when it is not built or
    does not accept them: :func:`scan_records_untrusted` and :func:`check_offset_deltas`
    then decide, and word what is wrong."""
    return _recordscan is not None and _recordscan.check(payload, header.record_count)


def check_offset_deltas(scan: RecordScan) -> None:
    """Raise CorruptRequest unless the walked records' offset deltas are 0..n-1."""
    if not scan.sequential:
        deltas = scan.offset_deltas
        index = next(i for i, delta in enumerate(deltas) if delta != i)
        raise CorruptRequest(
            f"record {index} has offset delta {deltas[index]}; the offset deltas of a batch of {len(deltas)} records "
            f"must be 0 to {len(deltas) - 1}"
        )


def scan_records_python(header: BatchHeader, payload: bytes | memoryview) -> RecordScan:
    """:func:`scan_records_untrusted` in Python. It reads the one-byte varints most fields
    are inline and skips keys, values and headers by their lengths; it accepts and refuses
    exactly what :func:`_record_at` does (tests/protocol/test_records.py compares them, and
    the C walk with both, on valid and damaged batches)."""
    buf, pos, end = payload, 0, len(payload)
    timestamp_deltas, offset_deltas, keyless = array("q"), array("q"), array("q")
    add_timestamp, add_offset = timestamp_deltas.append, offset_deltas.append
    sequential = True
    for index in range(header.record_count):
        if pos < end and (b := buf[pos]) < 0x80:
            length, pos = (b >> 1) ^ -(b & 1), pos + 1
        elif pos >= end:  # Kafka's words: its iterator reads past the last record
            raise CorruptRequest("Incorrect declared batch size, premature EOF reached")
        else:
            length, pos = _varint(buf, pos, end)
        stop = pos + length
        if length < 1 or stop > end:
            raise CorruptRequest(f"record length {length} exceeds the batch")
        pos += 1  # the attributes byte, unused in v2
        if pos < stop and (b := buf[pos]) < 0x80:
            timestamp_delta, pos = (b >> 1) ^ -(b & 1), pos + 1
        else:
            timestamp_delta, pos = _varlong(buf, pos, stop)
        if pos < stop and (b := buf[pos]) < 0x80:
            offset_delta, pos = (b >> 1) ^ -(b & 1), pos + 1
        else:
            offset_delta, pos = _varint(buf, pos, stop)
        add_timestamp(timestamp_delta)
        add_offset(offset_delta)
        if offset_delta != index:
            sequential = False
        for field in (0, 1):  # key, value
            if pos < stop and (b := buf[pos]) < 0x80:
                n, pos = (b >> 1) ^ -(b & 1), pos + 1
            else:
                n, pos = _varint(buf, pos, stop)
            if n < 0:
                if field == 0:
                    keyless.append(index)
            elif pos + n > stop:
                raise CorruptRequest(f"length {n} exceeds the {stop - pos} bytes left")
            else:
                pos += n
        if pos < stop and (b := buf[pos]) < 0x80:
            n, pos = (b >> 1) ^ -(b & 1), pos + 1
        else:
            n, pos = _varint(buf, pos, stop)
        if n:
            if n < 0 or n > stop - pos:
                raise CorruptRequest(f"invalid header count {n}")
            for _ in range(n):
                hkey, pos = _span(buf, pos, stop)
                if hkey is None:
                    raise CorruptRequest("null header key")
                _, pos = _span(buf, pos, stop)
        if pos != stop:
            raise CorruptRequest("record has trailing bytes")
    if pos != end:
        raise CorruptRequest("Incorrect declared batch size, records still remaining in file")
    low, high = (min(timestamp_deltas), max(timestamp_deltas)) if timestamp_deltas else (0, 0)
    return RecordScan(timestamp_deltas, offset_deltas, keyless, sequential, low, high)


def decode_records(header: BatchHeader, payload: bytes | memoryview) -> list[Record]:
    """Decode the (already decompressed) records section of a batch."""
    return list(iter_records(header, payload))


def iter_records(header: BatchHeader, payload: bytes | memoryview) -> Iterator[Record]:
    """The records of a (decompressed) records section, one at a time."""
    pos, end = 0, len(payload)
    for _ in range(header.record_count):
        timestamp_delta, offset_delta, key, value, headers, pos = _record_at(payload, pos, end)
        timestamp = header.max_timestamp if header.log_append_time else header.base_timestamp + timestamp_delta
        yield Record(
            header.base_offset + offset_delta,
            timestamp,
            _bytes(payload, key),
            _bytes(payload, value),
            tuple((str(payload[k[0] : k[1]], "utf-8", "replace"), _bytes(payload, v)) for k, v in headers),
        )


_Span = tuple[int, int] | None  # (start, end) of a byte field in the buffer; None: null


def _record_at(buf: bytes | memoryview, pos: int, end: int) -> tuple[int, int, _Span, _Span, list, int]:
    """The record at ``pos``: (timestamp delta, offset delta, key, value, headers as
    [(key, value)], position after it), byte fields as spans of ``buf``. Positions rather
    than views or Reader objects keep this loop, the cost of every walked record, lean.
    The record attributes byte is unused in v2."""
    length, pos = _varint(buf, pos, end)
    stop = pos + length
    if length < 1 or stop > end:
        raise CorruptRequest(f"record length {length} exceeds the batch")
    timestamp_delta, pos = _varlong(buf, pos + 1, stop)
    offset_delta, pos = _varint(buf, pos, stop)
    key, pos = _span(buf, pos, stop)
    value, pos = _span(buf, pos, stop)
    n_headers, pos = _varint(buf, pos, stop)
    if n_headers < 0 or n_headers > stop - pos:
        raise CorruptRequest(f"invalid header count {n_headers}")
    headers = []
    for _ in range(n_headers):
        hkey, pos = _span(buf, pos, stop)
        if hkey is None:
            raise CorruptRequest("null header key")
        hvalue, pos = _span(buf, pos, stop)
        headers.append((hkey, hvalue))
    if pos != stop:
        raise CorruptRequest("record has trailing bytes")
    return timestamp_delta, offset_delta, key, value, headers, stop


def _varint(buf: bytes | memoryview, pos: int, end: int) -> tuple[int, int]:
    value, pos = decode_uvarint(buf, pos, end, VARINT_MAX_BYTES)
    return (value >> 1) ^ -(value & 1), pos


def _varlong(buf: bytes | memoryview, pos: int, end: int) -> tuple[int, int]:
    value, pos = decode_uvarint(buf, pos, end, VARLONG_MAX_BYTES)
    if value >> 64:  # ten bytes hold 70 bits; a long, 64
        raise CorruptRequest("varlong out of range")
    return (value >> 1) ^ -(value & 1), pos


def _span(buf: bytes | memoryview, pos: int, end: int) -> tuple[_Span, int]:
    """A length-prefixed byte field (length -1: null)."""
    n, pos = _varint(buf, pos, end)
    if n < 0:
        return None, pos
    if pos + n > end:
        raise CorruptRequest(f"length {n} exceeds the {end - pos} bytes left")
    return (pos, pos + n), pos + n


def _bytes(buf: bytes | memoryview, span: _Span) -> bytes | None:
    return None if span is None else bytes(buf[span[0] : span[1]])


def encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]] = (),
) -> bytes:
    body = bytearray(b"\x00")
    body += encode_varint(timestamp_delta)
    body += encode_varint(offset_delta)
    for field in (key, value):
        if field is None:
            body += encode_varint(-1)
        else:
            body += encode_varint(len(field)) + field
    body += encode_varint(len(headers))
    for hkey, hvalue in headers:
        raw = hkey.encode()
        body += encode_varint(len(raw)) + raw
        body += encode_varint(-1) if hvalue is None else encode_varint(len(hvalue)) + hvalue
    return encode_varint(len(body)) + bytes(body)


def encode_batch(
    payload: bytes | memoryview,
    *,
    record_count: int,
    attributes: int = 0,
    base_timestamp: int = NO_TIMESTAMP,
    max_timestamp: int = NO_TIMESTAMP,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    base_offset: int = 0,
    leader_epoch: int = -1,
) -> bytearray:
    """A whole batch around ``payload``, a records section that the codec bits of
    ``attributes`` say how to read: the header (last offset delta ``record_count - 1``)
    and its CRC-32C."""
    head = HEADER.pack(
        base_offset,
        HEADER_SIZE - LOG_OVERHEAD + len(payload),
        leader_epoch,
        2,
        0,
        attributes,
        max(record_count - 1, 0),
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        record_count,
    )
    batch = bytearray(head)
    batch += payload
    _CRC.pack_into(batch, CRC_OFFSET, crc32c.crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:]))
    return batch


def build_batch(
    records: Sequence[tuple[bytes | None, bytes | None] | tuple[bytes | None, bytes | None, Sequence]],
    *,
    base_offset: int = 0,
    timestamp: int = 0,
    timestamps: Sequence[int] | None = None,
    attributes: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    leader_epoch: int = -1,
    compressed_payload: bytes | None = None,
) -> bytes:
    """An uncompressed batch of ``(key, value[, headers])`` records, all at ``timestamp``
    or each at its entry of ``timestamps`` (the first is the base timestamp).

    ``compressed_payload`` replaces the records section (for codec tests); the codec bits
    of ``attributes`` must then say which codec made it.
    """
    stamps = list(timestamps) if timestamps is not None else [timestamp] * len(records)
    base = stamps[0] if stamps else timestamp
    payload = compressed_payload
    if payload is None:
        payload = b"".join(
            encode_record(i, stamp - base, rec[0], rec[1], rec[2] if len(rec) > 2 else ())
            for i, (rec, stamp) in enumerate(zip(records, stamps))
        )
    return bytes(
        encode_batch(
            payload,
            record_count=len(records),
            attributes=attributes,
            base_timestamp=base,
            max_timestamp=max(stamps, default=timestamp),
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
            base_offset=base_offset,
            leader_epoch=leader_epoch,
        )
    )


def read_all_records(buf: bytes | memoryview) -> list[Record]:
    """Every record of an uncompressed record set (tests and tools)."""
    out: list[Record] = []
    mv = memoryview(buf)
    for h in iter_batches_untrusted(mv):
        if h.codec:
            raise CorruptRequest(f"batch at offset {h.base_offset} is compressed (codec {h.codec})")
        out.extend(decode_records(h, mv[h.position + HEADER_SIZE : h.end]))
    return out
