"""Codec 3, ``lz4``: one LZ4 frame, written as Kafka's ``Lz4BlockOutputStream`` writes it
(independent 64 KiB blocks, a correct header checksum, no content size or checksums, the
fast compressor of Kafka's default level) and read in any standard form through lz4.frame.

``decompress_into`` (the record walks, into a buffer they keep) runs in C (``_lz4frame.c``)
when it is built: one call a frame, letting go of the GIL once, where lz4.frame takes a
call a block (see the C file for why that matters to offload threads).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import lz4.frame
from brokkr.core.compression import DecompressionError, ensure_within, place
from brokkr.core.plugins import hookimpl

try:
    from . import _lz4frame
except ImportError:  # built only with a C compiler and liblz4's headers (setup.py)
    _lz4frame = None

#: An LZ4 block of Kafka's frames at most.
CHUNK = 64 * 1024


class Lz4Codec:
    id = 3
    name = "lz4"

    def compress(self, data: bytes | memoryview) -> bytes:
        return lz4.frame.compress(
            data,
            compression_level=lz4.frame.COMPRESSIONLEVEL_MIN,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            block_checksum=False,
            store_size=False,
        )

    def decompress(self, data: bytes | memoryview, max_size: int | None = None) -> bytes:
        return b"".join(self._blocks(data, max_size))

    def decompress_into(self, data: bytes | memoryview, out: bytearray, max_size: int | None = None) -> int:
        if _lz4frame is not None:
            try:  # one byte past the bound tells "too large"
                size, ended, read = _lz4frame.decompress_into(data, out, -1 if max_size is None else max_size + 1)
            except ValueError as exc:
                raise DecompressionError(f"lz4: {exc}") from None
            ensure_within(size, max_size)
            if not ended or read != len(data):
                raise DecompressionError("lz4: truncated frame or bytes after its end")
            return size
        size = 0
        for block in self._blocks(data, max_size):
            size = place(out, size, block, math.inf if max_size is None else max_size + 1)
        return size

    def _blocks(self, data: bytes | memoryview, max_size: int | None) -> Iterator[bytes]:
        """The frame's output, a block at most at a time: lz4 allocates all the output a
        call may write, and copies it once more, so asking for the whole bound (100 MiB by
        default) would map and fault in fresh memory for every batch. Raises
        DecompressionError, at the end at the latest."""
        context = lz4.frame.create_decompression_context()
        view = memoryview(data)
        bound = math.inf if max_size is None else max_size + 1  # one byte past tells "too large"
        read = size = 0
        eof = False
        try:
            while size < bound and not eof:
                block, taken, eof = lz4.frame.decompress_chunk(
                    context, view[read:], max_length=min(CHUNK, bound - size)
                )
                if not block and not taken:  # the input ran out inside the frame
                    break
                read += taken
                size += len(block)
                yield block
        except RuntimeError as exc:
            raise DecompressionError(f"lz4: {exc}") from None
        ensure_within(size, max_size)
        if not eof or read != len(view):
            raise DecompressionError("lz4: truncated frame or bytes after its end")


@hookimpl
def brokkr_codecs() -> list[Lz4Codec]:
    return [Lz4Codec()]
