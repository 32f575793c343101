"""Codec 1, ``gzip``: one gzip member (RFC 1952), as Kafka's ``GZIPOutputStream`` writes it
and every client reads it, through zlib at Kafka's default level."""

from __future__ import annotations

import math
import zlib

from brokkr.core.compression import DecompressionError, ensure_within, place
from brokkr.core.plugins import hookimpl

#: zlib's window bits for the gzip header and trailer (not the zlib wrapper).
GZIP_WBITS = 16 + zlib.MAX_WBITS
#: ``Deflater.DEFAULT_COMPRESSION``, Kafka's default ``compression.gzip.level``.
LEVEL = 6
#: Input fed and output asked at a time: small enough for malloc to reuse.
CHUNK = 64 * 1024


class GzipCodec:
    id = 1
    name = "gzip"

    def compress(self, data: bytes | memoryview) -> bytes:
        deflater = zlib.compressobj(LEVEL, zlib.DEFLATED, GZIP_WBITS)
        return deflater.compress(data) + deflater.flush()

    def decompress(self, data: bytes | memoryview, max_size: int | None = None) -> bytes:
        # Streamed, as decompress_into: zlib asked for the whole bound at once would gather
        # up to the bound in pieces, then join them into as much again.
        out = bytearray()
        size = self.decompress_into(data, out, max_size)
        del out[size:]
        return bytes(out)

    def decompress_into(self, data: bytes | memoryview, out: bytearray, max_size: int | None = None) -> int:
        """Fed a piece of input at a time, each call bounded to a chunk of output: zlib
        copies the input it has not read (``unconsumed_tail``) at every call, and the
        output it returns; ``out`` grows with the output, to one byte past the bound at most."""
        inflater = zlib.decompressobj(GZIP_WBITS)
        view = memoryview(data)
        bound = math.inf if max_size is None else max_size + 1  # one byte past tells "too large"
        size = fed = 0
        try:
            while not inflater.eof and size < bound:
                piece = inflater.unconsumed_tail
                if not piece:
                    if fed == len(view):
                        break  # the input ran out inside the member
                    piece = view[fed : fed + CHUNK]
                    fed += len(piece)
                size = place(out, size, inflater.decompress(piece, min(CHUNK, bound - size)), bound)
        except zlib.error as exc:
            raise DecompressionError(f"gzip: {exc}") from None
        ensure_within(size, max_size)
        if not inflater.eof or inflater.unused_data or fed < len(view):
            raise DecompressionError("gzip: truncated member or bytes after its end")
        return size


@hookimpl
def brokkr_codecs() -> list[GzipCodec]:
    return [GzipCodec()]
