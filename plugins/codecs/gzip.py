"""Codec 1, ``gzip``: one gzip member (RFC 1952), as Kafka's ``GZIPOutputStream`` writes it
and every client reads it, through zlib at Kafka's default level."""

from __future__ import annotations

import zlib

from brokkr.core.compression import DecompressionError, ensure_within
from brokkr.core.plugins import hookimpl

#: zlib's window bits for the gzip header and trailer (not the zlib wrapper).
GZIP_WBITS = 16 + zlib.MAX_WBITS
#: ``Deflater.DEFAULT_COMPRESSION``, Kafka's default ``compression.gzip.level``.
LEVEL = 6


class GzipCodec:
    id = 1
    name = "gzip"

    def compress(self, data: bytes | memoryview) -> bytes:
        deflater = zlib.compressobj(LEVEL, zlib.DEFLATED, GZIP_WBITS)
        return deflater.compress(data) + deflater.flush()

    def decompress(self, data: bytes | memoryview, max_size: int | None = None) -> bytes:
        inflater = zlib.decompressobj(GZIP_WBITS)
        try:
            # One byte past the bound tells "too large" from "exactly max_size".
            out = inflater.decompress(data, 0 if max_size is None else max_size + 1)
        except zlib.error as exc:
            raise DecompressionError(f"gzip: {exc}") from None
        ensure_within(len(out), max_size)
        if not inflater.eof or inflater.unused_data:
            raise DecompressionError("gzip: truncated member or bytes after its end")
        return out


@hookimpl
def brokkr_codecs() -> list[GzipCodec]:
    return [GzipCodec()]
