"""Codec 3, ``lz4``: one LZ4 frame, written as Kafka's ``Lz4BlockOutputStream`` writes it
(independent 64 KiB blocks, a correct header checksum, no content size or checksums, the
fast compressor of Kafka's default level) and read in any standard form through lz4.frame."""

from __future__ import annotations

import lz4.frame
from brokkr.core.compression import DecompressionError, ensure_within
from brokkr.core.plugins import hookimpl


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
        frame = lz4.frame.LZ4FrameDecompressor()
        try:
            # One byte past the bound tells "too large" from "exactly max_size".
            out = frame.decompress(data, -1 if max_size is None else max_size + 1)
        except RuntimeError as exc:
            raise DecompressionError(f"lz4: {exc}") from None
        ensure_within(len(out), max_size)
        if not frame.eof or frame.unused_data:
            raise DecompressionError("lz4: truncated frame or bytes after its end")
        return out


@hookimpl
def brokkr_codecs() -> list[Lz4Codec]:
    return [Lz4Codec()]
