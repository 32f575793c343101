"""Codec 4, ``zstd`` (KIP-110): one zstandard frame, at Kafka's default level (3).

The Java client writes through a zstd stream, so its frames do not declare their content
size; librdkafka's and kafka-python's do. A frame that declares its size is checked
against the bound before anything is allocated. One that does not is decompressed in one
call into an output buffer capped at the bound (memory is committed only as output is
written); python-zstandard's streaming readers are not used because they end silently on
a truncated frame, where this call fails. Only when that call fails is the frame streamed
once more, up to one byte past the bound, to tell "too large" from "corrupt".
"""

from __future__ import annotations

import zstandard
from brokkr.core.compression import DecompressionError, ensure_within
from brokkr.core.plugins import hookimpl

#: Kafka's default ``compression.zstd.level``.
LEVEL = 3


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
        try:
            declared = zstandard.frame_content_size(data)
        except zstandard.ZstdError as exc:
            raise DecompressionError(f"zstd: {exc}") from None
        if declared >= 0:
            ensure_within(declared, max_size)
            return self._one_shot(data, 0)
        if max_size is None:  # a stored batch: trusted, no bound to keep
            return self._decompressor.stream_reader(data, read_across_frames=False).readall()
        try:
            return self._one_shot(data, max_size)
        except DecompressionError:
            # Too large for the capped buffer, or corrupt: only the former streams past the bound.
            ensure_within(self._streamed_length(data, max_size + 1), max_size)
            raise

    def _streamed_length(self, data: bytes | memoryview, limit: int) -> int:
        """How many bytes, up to ``limit``, the frame yields before it ends or breaks (0)."""
        try:
            return len(self._decompressor.stream_reader(data, read_across_frames=False).read(limit))
        except zstandard.ZstdError:
            return 0

    def _one_shot(self, data: bytes | memoryview, max_output_size: int) -> bytes:
        try:
            return self._decompressor.decompress(data, max_output_size=max_output_size, allow_extra_data=False)
        except zstandard.ZstdError as exc:
            raise DecompressionError(f"zstd: {exc}") from None


@hookimpl
def brokkr_codecs() -> list[ZstdCodec]:
    return [ZstdCodec()]
