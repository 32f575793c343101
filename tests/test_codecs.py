"""The compression codecs: each reads what real clients write, writes what Kafka writes,
refuses bad input with DecompressionError only, and never decompresses past its bound.
A third-party plugin replaces a built-in codec through the same hook."""

from __future__ import annotations

import io
import os
import random
import struct
import tracemalloc
import zlib

import lz4.frame
import pytest
import snappy
import zstandard
from brokkr.core.compression import (
    Codec,
    DecompressedSizeExceeded,
    DecompressionError,
    Scratch,
    collect_codecs,
    reserve,
)
from brokkr.core.errors import ErrorCode
from brokkr.core.plugins import create_plugin_manager, hookimpl
from brokkr.core.protocol.records import HEADER_SIZE, build_batch, decode_records, iter_batches_untrusted
from brokkr.core.testing import RawClient
from brokkr.plugins.codecs import lz4 as lz4_codec
from brokkr.plugins.codecs.gzip import GzipCodec
from brokkr.plugins.codecs.lz4 import Lz4Codec
from brokkr.plugins.codecs.none import NoneCodec
from brokkr.plugins.codecs.snappy import XERIAL_BLOCK_SIZE, SnappyCodec
from brokkr.plugins.codecs.zstd import ZstdCodec
from wire import FETCH, PRODUCE, fetch_body, produce_body

# kafka-python 3.0 loads its protocol schemas through deprecated importlib.resources calls.
pytestmark = [
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]

CODECS = {"none": NoneCodec, "gzip": GzipCodec, "snappy": SnappyCodec, "lz4": Lz4Codec, "zstd": ZstdCodec}
COMPRESSING = [name for name in CODECS if name != "none"]
# Compressible text, an incompressible stretch, and enough of both for several snappy
# (32 KiB) and lz4 (64 KiB) blocks.
DATA = b"brokkr record payload %d " * 4000 + os.urandom(50_000)


@pytest.fixture(params=list(CODECS))
def codec(request) -> Codec:
    return CODECS[request.param]()


def test_every_codec_satisfies_the_protocol_under_kafkas_id(codec):
    assert isinstance(codec, Codec)
    assert (codec.id, codec.name) == (list(CODECS).index(codec.name), codec.name)


@pytest.mark.parametrize("view", [bytes, memoryview], ids=["bytes", "memoryview"])
def test_roundtrip(codec, view):
    compressed = codec.compress(view(DATA))
    assert codec.decompress(view(compressed)) == DATA
    assert codec.decompress(view(compressed), len(DATA)) == DATA


@pytest.mark.parametrize("name", COMPRESSING)
def test_reads_what_kafka_python_writes_and_kafka_python_reads_what_it_writes(name):
    from kafka import codec as kafka_python  # the encoders its producer uses, the decoders its consumer uses

    encode, decode = getattr(kafka_python, f"{name}_encode"), getattr(kafka_python, f"{name}_decode")
    codec = CODECS[name]()
    assert codec.decompress(encode(DATA), len(DATA)) == DATA
    assert decode(codec.compress(DATA)) == DATA


def test_gzip_writes_one_gzip_member():
    out = GzipCodec().compress(DATA)
    assert out[:3] == b"\x1f\x8b\x08"  # gzip magic, deflate
    assert struct.unpack("<I", out[-4:])[0] == len(DATA)  # ISIZE: a single member ends the data


def test_snappy_writes_xerial_framing_in_32_kib_blocks():
    out = SnappyCodec().compress(DATA)
    assert out[:16] == b"\x82SNAPPY\x00" + b"\x00\x00\x00\x01" * 2
    blocks, pos = [], 16
    while pos < len(out):
        (length,) = struct.unpack_from(">i", out, pos)
        blocks.append(snappy.uncompress(out[pos + 4 : pos + 4 + length]))
        pos += 4 + length
    assert pos == len(out)
    assert [len(b) for b in blocks[:-1]] == [XERIAL_BLOCK_SIZE] * (len(blocks) - 1)
    assert b"".join(blocks) == DATA


def test_snappy_reads_what_the_java_client_writes():
    # snappy-java's SnappyOutputStream output for b"foobar\n": the xerial header, one block.
    java = bytes.fromhex("82534e41505059000000000100000001" + "00000009" + "0718666f6f6261720a")
    assert SnappyCodec().decompress(java, 100) == b"foobar\n"


def test_snappy_reads_a_raw_block_as_librdkafka_writes_it():
    raw = snappy.compress(DATA)
    assert not raw.startswith(b"\x82SNAPPY")
    assert SnappyCodec().decompress(raw, len(DATA)) == DATA


def test_lz4_writes_the_frame_kafka_writes():
    out = Lz4Codec().compress(DATA)
    magic, flg, bd = struct.unpack_from("<IBB", out)
    assert magic == 0x184D2204
    # version 1, independent blocks; no block checksum, content size or content checksum
    assert flg == 0b0110_0000
    assert bd == 0b0100_0000  # 64 KiB blocks
    assert out[-4:] == b"\x00\x00\x00\x00"  # end mark, then nothing (no content checksum)


def java_style_zstd(data: bytes) -> bytes:
    """A zstd frame written through a stream, as zstd-jni's ZstdOutputStream writes it: no content size."""
    sink = io.BytesIO()
    with zstandard.ZstdCompressor(level=3).stream_writer(sink, closefd=False) as stream:
        stream.write(data)
    return sink.getvalue()


def test_zstd_reads_frames_without_content_size():
    frame = java_style_zstd(DATA)
    assert zstandard.frame_content_size(frame) == -1
    assert ZstdCodec().decompress(frame, len(DATA)) == DATA
    assert ZstdCodec().decompress(frame) == DATA


def test_zstd_writes_kafkas_default_level_and_declares_the_size():
    out = ZstdCodec().compress(DATA)
    assert zstandard.frame_content_size(out) == len(DATA)
    assert out == zstandard.ZstdCompressor(level=3).compress(DATA)


def corrupted(name: str, compressed: bytes) -> dict[str, bytes]:
    cases = {
        "truncated": compressed[: len(compressed) - 7],
        "trailing bytes": compressed + b"\x00\x01\x02",
        "garbage": b"not compressed at all, not even close",
        "empty": b"",
    }
    if name == "gzip":  # the one format with a checksum of the data (CRC-32 in its trailer)
        flipped = bytearray(compressed)
        flipped[len(flipped) // 2] ^= 0xFF
        cases["flipped byte"] = bytes(flipped)
    return cases


@pytest.mark.parametrize("name", COMPRESSING)
def test_bad_input_raises_decompression_error_only(name):
    codec = CODECS[name]()
    compressed = java_style_zstd(DATA) if name == "zstd" else codec.compress(DATA)
    for label, bad in corrupted(name, compressed).items():
        with pytest.raises(DecompressionError) as info:
            codec.decompress(bad, len(DATA))
        assert not isinstance(info.value, DecompressedSizeExceeded), label


def test_truncated_zstd_frame_without_content_size_is_corrupt_not_too_large():
    frame = java_style_zstd(DATA)
    with pytest.raises(DecompressionError) as info:
        ZstdCodec().decompress(frame[:-9], len(DATA))
    assert not isinstance(info.value, DecompressedSizeExceeded)


def test_the_bound_is_exact(codec):
    compressed = codec.compress(DATA)
    assert codec.decompress(compressed, len(DATA)) == DATA
    with pytest.raises(DecompressedSizeExceeded):
        codec.decompress(compressed, len(DATA) - 1)


BOMB_SIZE = 64 * 1024 * 1024  # zeros, a few MiB or far less once compressed
LIMIT = 1024 * 1024


def bombs():
    zeros = bytes(BOMB_SIZE)
    yield "gzip", GzipCodec(), GzipCodec().compress(zeros)
    yield "xerial snappy", SnappyCodec(), SnappyCodec().compress(zeros)
    yield "raw snappy", SnappyCodec(), snappy.compress(zeros)
    yield "lz4", Lz4Codec(), Lz4Codec().compress(zeros)
    yield "zstd", ZstdCodec(), ZstdCodec().compress(zeros)
    yield "zstd without content size", ZstdCodec(), java_style_zstd(zeros)


def test_decompression_bombs_are_refused_within_bounded_memory():
    for label, codec, bomb in bombs():
        assert len(bomb) < BOMB_SIZE // 15, label
        tracemalloc.start()
        try:
            with pytest.raises(DecompressedSizeExceeded):
                codec.decompress(bomb, LIMIT)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 4 * LIMIT, f"{label}: peak {peak} bytes while refusing"


# -- decompress_into: into a buffer the caller keeps --------------------------------

INTO = [name for name in CODECS if hasattr(CODECS[name], "decompress_into")]
#: Every codec's decompress_into, and lz4's once more without its C module (_lz4frame.c).
INTO_CASES = [*INTO, "lz4 in Python"]


def into(case: str, monkeypatch) -> tuple[str, type]:
    """The codec name and class of an INTO_CASES case."""
    name, _, python = case.partition(" in ")
    if python:
        monkeypatch.setattr(lz4_codec, "_lz4frame", None)
    return name, CODECS[name]


def frames_of(name: str, data: bytes) -> list[bytes]:
    """Every form of frame the codec reads, of ``data``."""
    if name == "gzip":
        return [GzipCodec().compress(data), zlib.compress(data, 9, wbits=31)]
    if name == "snappy":
        return [SnappyCodec().compress(data), snappy.compress(data)]  # xerial framing, a raw block
    if name == "lz4":
        return [
            Lz4Codec().compress(data),
            lz4.frame.compress(data, store_size=True, content_checksum=True, block_checksum=True),
            lz4.frame.compress(data, block_linked=True, block_size=lz4.frame.BLOCKSIZE_MAX4MB),
        ]
    return [
        ZstdCodec().compress(data),  # declares its size, as kafka-python's do
        java_style_zstd(data),  # does not, as librdkafka's and the Java client's do
        zstandard.ZstdCompressor(level=19, write_checksum=True).compress(data),
    ]


def test_decompress_into_is_offered_by_every_codec_that_compresses():
    assert INTO == COMPRESSING


@pytest.mark.parametrize("case", INTO_CASES)
def test_decompress_into_writes_what_decompress_returns_into_a_buffer_reused_across_sizes(case, monkeypatch):
    name, cls = into(case, monkeypatch)
    codec, out = cls(), bytearray()
    for data in (DATA, b"", b"small", DATA * 8, DATA[:1000]):
        for frame in frames_of(name, data):
            size = codec.decompress_into(frame, out, len(data))
            assert bytes(memoryview(out)[:size]) == data == codec.decompress(frame, len(data))
            assert codec.decompress_into(frame, out) == size  # no bound: a stored batch
    assert len(out) >= len(DATA) * 8


@pytest.mark.parametrize("case", INTO_CASES)
def test_decompress_into_keeps_the_bound_exactly(case, monkeypatch):
    name, cls = into(case, monkeypatch)
    codec = cls()
    for frame in frames_of(name, DATA):
        assert codec.decompress_into(frame, bytearray(), len(DATA)) == len(DATA)
        with pytest.raises(DecompressedSizeExceeded):
            codec.decompress_into(frame, bytearray(), len(DATA) - 1)


@pytest.mark.parametrize("case", INTO_CASES)
def test_decompress_into_refuses_what_decompress_refuses(case, monkeypatch):
    name, cls = into(case, monkeypatch)
    codec, out = cls(), bytearray()
    rng = random.Random(5)
    for frame in frames_of(name, DATA):
        damaged = dict(corrupted(name, frame))
        damaged["last byte flipped"] = frame[:-1] + bytes([frame[-1] ^ 0x10])  # a checksum, where there is one
        for i in range(40):  # a flipped byte anywhere: each must read as decompress reads it
            flipped = bytearray(frame)
            flipped[rng.randrange(len(frame))] ^= 1 << rng.randrange(8)
            damaged[f"flipped {i}"] = bytes(flipped)
        for label, bad in damaged.items():
            try:
                expected = codec.decompress(bad, len(DATA))
            except DecompressionError as exc:
                with pytest.raises(type(exc)):
                    codec.decompress_into(bad, out, len(DATA))
            else:
                size = codec.decompress_into(bad, out, len(DATA))
                assert bytes(memoryview(out)[:size]) == expected, label


@pytest.mark.parametrize("case", INTO_CASES)
def test_decompress_into_a_kept_buffer_allocates_a_fraction_of_the_output(case, monkeypatch):
    # A megabyte of fresh output per batch costs hundreds of page faults; written into a
    # buffer kept from the batch before, it costs none.
    name, cls = into(case, monkeypatch)
    codec, out, data = cls(), bytearray(), DATA * 20
    for frame in frames_of(name, data):
        codec.decompress_into(frame, out, len(data))
        tracemalloc.start()
        try:
            assert codec.decompress_into(frame, out, len(data)) == len(data)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < len(data) // 8, f"{peak} bytes allocated for {len(data)} of output"


@pytest.mark.parametrize("case", INTO_CASES)
def test_decompress_into_refuses_bombs_within_bounded_memory(case, monkeypatch):
    name, _ = into(case, monkeypatch)
    for label, codec, bomb in bombs():
        if label.startswith(name):
            tracemalloc.start()
            try:
                with pytest.raises(DecompressedSizeExceeded):
                    codec.decompress_into(bomb, bytearray(), LIMIT)
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            assert peak < 4 * LIMIT, f"{label}: peak {peak} bytes while refusing"


def test_the_c_lz4_module_is_built_where_liblz4s_headers_are():
    """With a C compiler and liblz4's headers (CI installs liblz4-dev), lz4's decompress_into
    runs in C; elsewhere it runs in Python."""
    if os.environ.get("BROKKR_PYTHON_ONLY") or not os.path.exists("/usr/include/lz4frame.h"):
        pytest.skip("built only with liblz4's headers")
    assert lz4_codec._lz4frame is not None, "brokkr.plugins.codecs._lz4frame is not built: pip install -e ."


def test_lz4_decompress_into_refuses_a_buffer_it_cannot_grow():
    out = bytearray()
    with memoryview(out):  # a live view: the buffer cannot be resized
        with pytest.raises(BufferError):
            Lz4Codec().decompress_into(Lz4Codec().compress(DATA), out, len(DATA))


def test_a_scratch_buffer_is_kept_unless_still_viewed_or_grown_past_its_limit():
    scratch = Scratch(keep=4096)
    kept = scratch.buffer
    reserve(kept, 1000)
    scratch.done()
    assert scratch.buffer is kept and len(kept) >= 1000
    view = memoryview(scratch.buffer)[:10]  # as a traceback may hold one: it could not be resized
    scratch.done()
    assert scratch.buffer is not kept and len(scratch.buffer) == 0
    del view
    reserve(scratch.buffer, 5000)
    scratch.done()
    assert len(scratch.buffer) == 0


# -- the codecs as plugins ------------------------------------------------------------


def test_the_broker_has_every_codec_by_kafka_id(brokkr_broker):
    assert {i: c.name for i, c in brokkr_broker.broker.codecs.items()} == {
        0: "none",
        1: "gzip",
        2: "snappy",
        3: "lz4",
        4: "zstd",
    }


class CountingGzip(GzipCodec):
    """A third-party gzip: the built-in one, counting its calls."""

    def __init__(self):
        self.calls = {"compress": 0, "decompress": 0, "decompress_into": 0}

    def compress(self, data):
        self.calls["compress"] += 1
        return super().compress(data)

    def decompress(self, data, max_size=None):
        self.calls["decompress"] += 1
        return super().decompress(data, max_size)

    def decompress_into(self, data, out, max_size=None):
        self.calls["decompress_into"] += 1
        return super().decompress_into(data, out, max_size)


class GzipPlugin:
    def __init__(self):
        self.codec = CountingGzip()

    @hookimpl
    def brokkr_codecs(self):
        return [self.codec]


def test_the_plugin_registered_last_wins():
    first, second = GzipPlugin(), GzipPlugin()
    pm = create_plugin_manager(plugins=[first, second], entry_points=False)
    by_id = collect_codecs(pm.hook, None)
    assert sorted(by_id) == [0, 1, 2, 3, 4]
    assert by_id[1] is second.codec
    assert by_id[4].name == "zstd"


def test_a_third_party_codec_replaces_the_builtin_and_batches_are_decompressed_once(brokkr_broker_factory):
    plugin = GzipPlugin()
    broker = brokkr_broker_factory(plugins=[plugin])
    assert broker.broker.codecs[1] is plugin.codec
    broker.call(broker.broker.create_topic, "in-place")
    broker.call(broker.broker.create_topic, "to-gzip", 1, {"compression.type": "gzip"})
    records = [(b"k%d" % i, b"value %d" % i) for i in range(50)]
    section = build_batch(records)[HEADER_SIZE:]
    gzipped = build_batch(records, attributes=1, compressed_payload=GzipCodec().compress(section))
    with RawClient(broker.bootstrap_servers) as c:
        for topic, batch in (("in-place", gzipped), ("to-gzip", build_batch(records))):
            part = c.request(PRODUCE, 9, produce_body(topic, batch)).responses[0].partition_responses[0]
            assert part.error_code == ErrorCode.NONE, part.error_message
        stored = c.request(FETCH, 12, fetch_body("to-gzip")).responses[0].partitions[0].records
    assert plugin.codec.calls == {"decompress": 0, "decompress_into": 1, "compress": 1}  # into the loop's buffer
    [header] = iter_batches_untrusted(stored)
    payload = GzipCodec().decompress(memoryview(stored)[HEADER_SIZE : header.end])
    assert [(r.key, r.value) for r in decode_records(header, payload)] == records
