"""Codec 4, ``zstd`` (KIP-110): one zstandard frame, at Kafka's default level (3).

The Java client and librdkafka write through a zstd stream, so their frames do not declare
their content size; kafka-python's do. A frame that declares its size is checked against
the bound before anything is decompressed; every frame is then streamed into a buffer that
grows with the output, up to one byte past the bound (``decompress_into``; ``decompress``
returns what it wrote), so neither a declared size nor the bound is allocated up front.

python-zstandard's streaming reader ends silently on a truncated frame, so the frame must
also end, by its block headers, exactly where the data ends, and hold the size it declares;
any other frame is read once more in one call, bounded by what the stream gave, which tells
what is wrong with it.

A frame's window (up to 128 MiB, zstd's limit) is a buffer its decompression context
allocates and keeps for the next frame: a context grown past :data:`CONTEXT_KEPT` by a
frame of a large window is replaced after it, so that one bomb of zeros does not leave each
thread's context holding a hundred megabytes.
"""

from __future__ import annotations

import math

import zstandard
from brokkr.core.compression import DecompressionError, ensure_within, place, reserve
from brokkr.core.plugins import hookimpl

#: Kafka's default ``compression.zstd.level``.
LEVEL = 3
#: The block type whose block holds one byte, repeated (RFC 8878, 3.1.1.2.2).
RLE_BLOCK = 1
#: Fewer bytes a block than encoders write (zstd's blocks hold up to 128 KiB): a frame of
#: smaller blocks is read the slower way (in one call).
SMALLEST_USUAL_BLOCK = 16 * 1024
#: The most memory a decompression context keeps between frames: the window of zstd's
#: levels up to 19 (8 MiB) and its tables; those of levels 20-22 (32-128 MiB) are let go.
CONTEXT_KEPT = 16 * 1024 * 1024


class ZstdCodec:
    """Keeps one compression and one decompression context: not thread-safe, which is
    fine since each broker gets its own codec objects and uses them from its loop only."""

    id = 4
    name = "zstd"

    def __init__(self) -> None:
        self._compressor = zstandard.ZstdCompressor(level=LEVEL)
        self._decompressor = zstandard.ZstdDecompressor()

    def compress(self, data: bytes | memoryview) -> bytes:
        return self._compressor.compress(data)

    def decompress(self, data: bytes | memoryview, max_size: int | None = None) -> bytes:
        if max_size is None:  # a stored batch: trusted, no bound to keep
            try:
                return self._decompressor.stream_reader(data, read_across_frames=False).readall()
            finally:
                self._let_go_of_a_large_window()
        out = bytearray()
        size = self.decompress_into(data, out, max_size)
        del out[size:]
        return bytes(out)

    def decompress_into(self, data: bytes | memoryview, out: bytearray, max_size: int | None = None) -> int:
        """Streamed straight into ``out``, the frame's end checked by its block headers
        (see the module's docstring)."""
        try:
            return self._stream_into(data, out, max_size)
        finally:
            self._let_go_of_a_large_window()

    def _stream_into(self, data: bytes | memoryview, out: bytearray, max_size: int | None) -> int:
        try:
            declared = zstandard.frame_content_size(data)
        except zstandard.ZstdError as exc:
            raise DecompressionError(f"zstd: {exc}") from None
        if declared >= 0:
            ensure_within(declared, max_size)
        bound = math.inf if max_size is None else max_size + 1  # one byte past tells "too large"
        reader = self._decompressor.stream_reader(data, read_across_frames=False)
        size = 0
        try:
            while size < bound:
                reserve(out, size + 1, bound)
                with memoryview(out) as view:
                    got = reader.readinto(view[size : min(len(out), bound)])
                if not got:
                    break
                size += got
        except zstandard.ZstdError as exc:
            raise DecompressionError(f"zstd: {exc}") from None
        ensure_within(size, max_size)
        if declared not in (-1, size):
            raise DecompressionError(f"zstd: the frame declares {declared} bytes and holds {size}")
        if _frame_end(memoryview(data), size) != len(data):
            if declared == 0:  # zstandard skips a frame declaring no content unread
                raise DecompressionError("zstd: truncated frame or bytes after its end")
            # Truncated, followed by other bytes, or of unusually small blocks: one call
            # tells, its output bounded by what the stream gave.
            return place(out, 0, self._one_shot(data, size + 1))
        return size

    def _let_go_of_a_large_window(self) -> None:
        if self._decompressor.memory_size() > CONTEXT_KEPT:
            self._decompressor = zstandard.ZstdDecompressor()

    def _one_shot(self, data: bytes | memoryview, max_output_size: int) -> bytes:
        try:
            return self._decompressor.decompress(data, max_output_size=max_output_size, allow_extra_data=False)
        except zstandard.ZstdError as exc:
            raise DecompressionError(f"zstd: {exc}") from None


def _frame_end(view: memoryview, content_size: int) -> int | None:
    """Where the frame at the start of ``view`` ends, read from its header and block
    headers (RFC 8878: three bytes each, holding the last-block flag, the type and the
    size); None when they run past the data, or when there are more blocks than a frame
    of ``content_size`` bytes has from usual encoders (full blocks hold 128 KiB), so
    that the Python walked here stays a few steps a batch."""
    try:
        pos = zstandard.frame_header_size(view)
    except zstandard.ZstdError:
        return None
    has_checksum = view[4] & 0x04
    for _ in range(content_size // SMALLEST_USUAL_BLOCK + 4):
        if pos + 3 > len(view):
            return None
        block = int.from_bytes(view[pos : pos + 3], "little")
        pos += 3 + (1 if (block >> 1) & 3 == RLE_BLOCK else block >> 3)
        if block & 1:
            return pos + 4 if has_checksum else pos
    return None


@hookimpl
def brokkr_codecs() -> list[ZstdCodec]:
    return [ZstdCodec()]
