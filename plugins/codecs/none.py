"""Codec 0, ``none``: records stored as produced."""

from __future__ import annotations

from brokkr.core.compression import ensure_within
from brokkr.core.plugins import hookimpl


class NoneCodec:
    id = 0
    name = "none"

    def compress(self, data: bytes | memoryview) -> bytes:
        return bytes(data)

    def decompress(self, data: bytes | memoryview, max_size: int | None = None) -> bytes:
        ensure_within(len(data), max_size)
        return bytes(data)


@hookimpl
def brokkr_codecs() -> list[NoneCodec]:
    return [NoneCodec()]
