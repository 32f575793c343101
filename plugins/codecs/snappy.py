"""Codec 2, ``snappy``, in the two forms producers write.

The Java client (snappy-java's ``SnappyOutputStream``) and kafka-python write xerial
framing: a 16-byte header, then blocks of 32 KiB of input, each as a big-endian int32
length and a raw snappy block::

    magic              8 bytes  82 'S' 'N' 'A' 'P' 'P' 'Y' 00
    version            int32    1
    compatible version int32    1
    (block length int32, raw snappy block)...

librdkafka writes one raw snappy block, with no framing. Kafka reads both
(``SnappyInputStream`` falls back to raw data when the magic is absent), and so does this
codec; it writes xerial framing, as Kafka does. A raw block starts with its uncompressed
length as a varint, so the size bound is checked before anything is decompressed, and so
is what the block's bytes can hold at all (:data:`MAX_EXPANSION`): a block is decompressed
whole, into room made for its declared length, so a few bytes declaring megabytes must
not make that room. Blocks are decompressed through cramjam (python-snappy's own backend),
which writes them into the caller's buffer (``decompress_into``).
"""

from __future__ import annotations

import struct

import cramjam
import snappy
from brokkr.core.compression import DecompressionError, ensure_within, reserve
from brokkr.core.errors import CorruptRequest
from brokkr.core.plugins import hookimpl
from brokkr.core.protocol.primitives import Reader

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
#: snappy-java's default block size, which Kafka uses.
XERIAL_BLOCK_SIZE = 32 * 1024
_BLOCK_LENGTH = struct.Struct(">i")
#: The most output a byte of a raw snappy block makes: a copy element of 3 bytes writes at
#: most 64 (literals write what they hold; 1-byte-offset copies, 11 from 2 bytes).
MAX_EXPANSION = 64 / 3


class SnappyCodec:
    id = 2
    name = "snappy"

    def compress(self, data: bytes | memoryview) -> bytes:
        view = memoryview(data)
        out = bytearray(XERIAL_HEADER)
        for start in range(0, len(view), XERIAL_BLOCK_SIZE):
            block = snappy.compress(view[start : start + XERIAL_BLOCK_SIZE])
            out += _BLOCK_LENGTH.pack(len(block))
            out += block
        return bytes(out)

    def decompress(self, data: bytes | memoryview, max_size: int | None = None) -> bytes:
        out = bytearray()
        size = self.decompress_into(data, out, max_size)
        return bytes(memoryview(out)[:size])

    def decompress_into(self, data: bytes | memoryview, out: bytearray, max_size: int | None = None) -> int:
        view = memoryview(data)
        if view[: len(XERIAL_MAGIC)] != XERIAL_MAGIC:
            return _raw_block_into(view, out, 0, max_size)
        if len(view) < len(XERIAL_HEADER):
            raise DecompressionError("snappy: truncated xerial header")
        size = 0
        pos = len(XERIAL_HEADER)
        while pos < len(view):
            if pos + _BLOCK_LENGTH.size > len(view):
                raise DecompressionError("snappy: truncated xerial block length")
            (length,) = _BLOCK_LENGTH.unpack_from(view, pos)
            pos += _BLOCK_LENGTH.size
            if length < 0 or pos + length > len(view):
                raise DecompressionError(f"snappy: xerial block of {length} bytes exceeds the data")
            size = _raw_block_into(view[pos : pos + length], out, size, None if max_size is None else max_size - size)
            pos += length
        return size


def _raw_block_into(block: memoryview, out: bytearray, at: int, max_size: int | None) -> int:
    """One raw snappy block, written into ``out`` at ``at``; refused before decompression
    if its declared length is too large. Returns the end of what was written."""
    try:
        declared = Reader(block).uvarint()
    except CorruptRequest:
        raise DecompressionError("snappy: block does not start with its length") from None
    ensure_within(declared, max_size)
    if declared > len(block) * MAX_EXPANSION:
        raise DecompressionError(f"snappy: a block of {len(block)} bytes cannot hold the {declared} it declares")
    reserve(out, at + declared, None if max_size is None else at + max_size + 1)
    try:
        with memoryview(out) as view:
            written = cramjam.snappy.decompress_raw_into(block, view[at : at + declared])
    except cramjam.DecompressionError:
        raise DecompressionError("snappy: corrupt block") from None
    if written != declared:
        raise DecompressionError(f"snappy: a block declares {declared} bytes and holds {written}")
    return at + written


@hookimpl
def brokkr_codecs() -> list[SnappyCodec]:
    return [SnappyCodec()]
