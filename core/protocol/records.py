"""RecordBatch v2: Kafka's record format, as bytes in and bytes out.

On the hot path a batch stays bytes: the broker reads the 61-byte header, checks the
CRC-32C, and patches the base offset and partition leader epoch in place (the CRC covers
neither). Records are decoded only where semantics need them (timestamp lookups in the
memory log, compressed batches, tests); :func:`build_batch` writes uncompressed batches
for tests, tools and benchmarks.

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
from collections.abc import Iterator, Sequence

import attrs
import crc32c

from ..errors import CorruptRequest
from .primitives import Reader, encode_varint

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # base_offset + batch_length
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
_BASE_OFFSET = struct.Struct(">q")
_EPOCH = struct.Struct(">i")
_LENGTH = struct.Struct(">i")
_CRC = struct.Struct(">I")

CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08  # set: LogAppendTime
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20

NO_PRODUCER_ID = -1
NO_TIMESTAMP = -1


@attrs.frozen
class BatchHeader:
    """The header of one batch and where it sits in its buffer (one per batch, never per record)."""

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
        if length < HEADER_SIZE - LOG_OVERHEAD:
            raise CorruptRequest(f"record batch at {pos} declares size {length}, below the minimum")
        if pos + LOG_OVERHEAD + length > end:
            return
        magic = mv[pos + MAGIC_OFFSET]
        if magic != 2:
            raise CorruptRequest(f"record batch at {pos} has magic {magic}; only magic 2 is supported")
        yield BatchHeader(pos, *HEADER.unpack_from(mv, pos))
        pos += LOG_OVERHEAD + length


def crc_ok(buf: bytes | bytearray | memoryview, header: BatchHeader) -> bool:
    return crc32c.crc32c(memoryview(buf)[header.position + ATTRIBUTES_OFFSET : header.end]) == header.crc


def patch_batch(buf: bytearray, position: int, base_offset: int, leader_epoch: int) -> None:
    """Assign a batch its offsets and epoch in place; neither is covered by the CRC."""
    _BASE_OFFSET.pack_into(buf, position, base_offset)
    _EPOCH.pack_into(buf, position + 12, leader_epoch)


# -- records: decoding and building (off the hot path) ------------------------------


@attrs.frozen
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


def decode_records(header: BatchHeader, payload: bytes | memoryview) -> list[Record]:
    """Decode the (already decompressed) records section of a batch."""
    r = Reader(payload)
    out = []
    for _ in range(header.record_count):
        length = r.varint()
        if length < 0 or length > r.remaining:
            raise CorruptRequest(f"record length {length} exceeds the batch")
        end = r.pos + length
        sub = Reader(r.buf, r.pos, end)
        sub.int8()
        ts_delta = sub.varlong()
        offset_delta = sub.varint()
        key = _varbytes(sub)
        value = _varbytes(sub)
        n_headers = sub.varint()
        if n_headers < 0 or n_headers > sub.remaining:
            raise CorruptRequest(f"invalid header count {n_headers}")
        headers = []
        for _ in range(n_headers):
            hkey = _varbytes(sub)
            if hkey is None:
                raise CorruptRequest("null header key")
            headers.append((hkey.decode("utf-8", "replace"), _varbytes(sub)))
        if sub.remaining:
            raise CorruptRequest("record has trailing bytes")
        r.pos = end
        timestamp = header.max_timestamp if header.log_append_time else header.base_timestamp + ts_delta
        out.append(Record(header.base_offset + offset_delta, timestamp, key, value, tuple(headers)))
    return out


def _varbytes(r: Reader) -> bytes | None:
    n = r.varint()
    return None if n < 0 else bytes(r.take(n))


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


def build_batch(
    records: Sequence[tuple[bytes | None, bytes | None] | tuple[bytes | None, bytes | None, Sequence]],
    *,
    base_offset: int = 0,
    timestamp: int = 0,
    attributes: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    leader_epoch: int = -1,
    compressed_payload: bytes | None = None,
) -> bytes:
    """An uncompressed batch of ``(key, value[, headers])`` records, all at ``timestamp``.

    ``compressed_payload`` replaces the records section (for codec tests); the codec bits
    of ``attributes`` must then say which codec made it.
    """
    payload = compressed_payload
    if payload is None:
        payload = b"".join(
            encode_record(i, 0, rec[0], rec[1], rec[2] if len(rec) > 2 else ()) for i, rec in enumerate(records)
        )
    n = len(records)
    head = HEADER.pack(
        base_offset,
        HEADER_SIZE - LOG_OVERHEAD + len(payload),
        leader_epoch,
        2,
        0,
        attributes,
        max(n - 1, 0),
        timestamp,
        timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        n,
    )
    batch = bytearray(head + payload)
    _CRC.pack_into(batch, CRC_OFFSET, crc32c.crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:]))
    return bytes(batch)


def read_all_records(buf: bytes | memoryview) -> list[Record]:
    """Every record of an uncompressed record set (tests and tools)."""
    out: list[Record] = []
    mv = memoryview(buf)
    for h in iter_batches_untrusted(mv):
        if h.codec:
            raise CorruptRequest(f"batch at offset {h.base_offset} is compressed (codec {h.codec})")
        out.extend(decode_records(h, mv[h.position + HEADER_SIZE : h.end]))
    return out
