"""Compression as the core sees it: the contract codec plugins fulfil, the errors they
raise, and Kafka's names for codecs in the ``compression.type`` setting.

Codecs come from ``brokkr_codecs`` plugins (``plugins/codecs/``), one object per Kafka
compression id; the broker resolves them once at start (``broker.codecs``) and the
validator calls them directly; per id, the codec of the plugin registered last wins
(:func:`collect_codecs`). ``decompress`` faces bytes from untrusted producers, so it takes a bound: a few KiB of
zstd must not make the broker allocate gigabytes.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

NONE_ID = 0
ZSTD_ID = 4

#: Kafka's compression ids under the names ``compression.type`` gives them; the remaining
#: value, ``producer``, keeps whatever codec the producer used.
COMPRESSION_TYPE_IDS = {"uncompressed": NONE_ID, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": ZSTD_ID}
PRODUCER = "producer"


@runtime_checkable
class Codec(Protocol):
    """A compression codec, as Kafka numbers them: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.

    ``compress`` writes what Kafka writes for the codec. ``decompress`` reads what every
    real client writes and, facing untrusted bytes, raises only :class:`DecompressionError`:
    for input that is not valid data of the codec (corrupt, truncated, trailing bytes) and,
    as :class:`DecompressedSizeExceeded`, when the output would exceed ``max_size`` bytes.
    It must stop producing output at that bound rather than check afterwards, and grow its
    buffers as output is written: never to a size the data declares, nor to the whole bound,
    up front (a few bytes of zeros must cost what they really inflate to, up to the bound,
    and only while they do). ``max_size`` is ``None`` only for batches the broker already
    validated and stored.

    A broker calls its codecs from its event loop only; ``brokkr_codecs`` returns new
    objects per broker, so a codec may keep (thread-unsafe) compression contexts.

    A codec may also offer ``decompress_into(data, out, max_size) -> int``: the output of
    ``decompress``, with the same errors and bound, written at the start of the bytearray
    ``out`` (grown with :func:`reserve` or :func:`place` when it is too short); it returns
    the output's length. Record walks use it with a buffer each thread keeps
    (:class:`Scratch`), as Kafka's ``BufferSupplier`` does: a megabyte of fresh output per
    batch costs hundreds of page faults, more than decompressing it. Nobody holds a view
    of ``out`` during the call, so it may be resized.
    """

    id: int
    name: str

    def compress(self, data: bytes | memoryview) -> bytes: ...

    def decompress(self, data: bytes | memoryview, max_size: int | None = None) -> bytes: ...


class DecompressionError(ValueError):
    """The bytes are not valid data of the codec that was asked to decompress them."""


class DecompressedSizeExceeded(DecompressionError):
    """Decompressing would produce more than the bytes allowed."""


def ensure_within(size: int, max_size: int | None) -> None:
    """Raise :class:`DecompressedSizeExceeded` when ``size`` output bytes exceed ``max_size``."""
    if max_size is not None and size > max_size:
        raise DecompressedSizeExceeded(f"decompresses to more than {max_size} bytes")


class Scratch:
    """The buffer one thread decompresses records into, walk after walk (a codec's
    ``decompress_into``), kept while it holds at most ``keep`` bytes."""

    def __init__(self, keep: int):
        self.keep = keep
        self.buffer = bytearray()

    def done(self) -> None:
        """After a walk: empty a buffer grown past ``keep`` in place, which gives its memory
        back even while something still refers to the bytearray (an error's traceback, say);
        drop one still viewed (a view kept by a traceback), which cannot be resized."""
        try:
            if len(self.buffer) > self.keep:
                self.buffer.clear()
            else:
                self.buffer.append(0)  # raises BufferError while a view of it is alive
                del self.buffer[-1]
        except BufferError:
            self.buffer = bytearray()


def reserve(out: bytearray, size: int, limit: float | None = None) -> None:
    """Grow ``out`` to hold at least ``size`` bytes: at least doubling it, when it grows,
    but not past ``limit`` (the most a codec may write: its bound plus one byte)."""
    if size > len(out):
        grown = max(size, 2 * len(out))
        if limit is not None:
            grown = max(size, min(grown, limit))
        out.extend(bytes(grown - len(out)))


def place(out: bytearray, at: int, chunk: bytes | memoryview, limit: float | None = None) -> int:
    """Write ``chunk`` into ``out`` at ``at``, growing ``out`` if needed (not past ``limit``,
    as :func:`reserve`); returns the end of what was written."""
    end = at + len(chunk)
    reserve(out, end, limit)
    out[at:end] = chunk
    return end


def target_codec_id(compression_type: str, producer_codec_id: int) -> int:
    """The codec a batch is stored with under the topic's ``compression.type``."""
    if compression_type == PRODUCER:
        return producer_codec_id
    return COMPRESSION_TYPE_IDS[compression_type]


def collect_codecs(hook, broker) -> dict[int, Codec]:
    """One codec per id from ``brokkr_codecs``: the plugin registered last wins, so a
    third-party plugin replaces a built-in codec (pluggy lists the results of the plugins
    registered last first)."""
    codecs: dict[int, Codec] = {}
    for result in hook.brokkr_codecs(broker=broker):
        for codec in result:
            codecs.setdefault(codec.id, codec)
    return codecs
