"""Decompression bombs (issue 34): batches of zeros, 32 KiB to 600 KiB long, that inflate to
more than a batch may hold, sent in raw Produce frames to a real ``brokkr serve``, are refused with
Kafka's errors, ten in a row and ten at once, and the memory they made the broker use goes
back: its RSS returns to within KEPT_MB of what it was before them. A real client's
compressed produce works afterwards.

What a batch may decompress to is bounded by ``socket.request.max.bytes`` (BOUND, 100 MiB by
default: what a client could make the broker hold by sending it uncompressed). Each bomb
makes the broker write up to the bound while it decompresses, so one bomb's memory kept
would show as 100 MiB; before the fix each one kept about 128 MiB (2-2.7 GB after twenty).
"""

from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor

import pytest
from brokkr.core.compression import COMPRESSION_TYPE_IDS
from brokkr.core.errors import ErrorCode
from brokkr.core.protocol.primitives import encode_uvarint
from brokkr.core.testing import RawClient
from brokkr.plugins.codecs.gzip import GzipCodec
from brokkr.plugins.codecs.lz4 import Lz4Codec
from brokkr.plugins.codecs.snappy import XERIAL_HEADER, SnappyCodec
from confluent_kafka import Producer
from serve import Served
from waiting import wait_for
from wire import METADATA, PRODUCE, compressed_batch, empty_records_batch, metadata_body, produce_body

#: ``socket.request.max.bytes``'s default: the most a batch may decompress to.
BOUND = 104857600
#: ``message.max.bytes``'s default: the largest batch.
MESSAGE_MAX_BYTES = 1048588
#: Zeros past the bound, for the codecs whose bombs must be compressed for real.
PAST_BOUND = 128 * 1024 * 1024
#: What the broker may keep of the bombs' memory: less than one bomb's (the bound), more
#: than what it keeps by design after its first walks: its walk threads (stacks, malloc
#: arenas), a decompression buffer per thread of at most 8 MiB (offload.SCRATCH_KEPT) and
#: their zstd contexts (a 2 MiB window each here).
KEPT_MB = 64
#: What a walk worker process may keep: less than the 20 MiB of records of the bomb it walks.
KEPT_BY_WORKER_MB = 16
#: How long the broker's RSS may take to settle once the bombs are answered.
SETTLE_S = 5


def zstd_zeros(size: int, declared: int | None = None, window_log: int = 21) -> bytes:
    """A zstd frame (RFC 8878) of ``size`` zeros, in RLE blocks of 128 KiB (4 bytes each),
    with a window of 2**window_log bytes, declaring ``declared`` content bytes if given."""
    window = bytes([(window_log - 10) << 3])
    if declared is None:
        header = b"\x28\xb5\x2f\xfd\x00" + window
    else:  # 8 bytes of content size
        header = b"\x28\xb5\x2f\xfd\xc0" + window + declared.to_bytes(8, "little")
    block_size, rle = 128 * 1024, 1
    block = ((block_size << 3) | (rle << 1)).to_bytes(3, "little") + b"\x00"
    last = ((block_size << 3) | (rle << 1) | 1).to_bytes(3, "little") + b"\x00"
    return header + block * (size // block_size - 1) + last


def xerial_block_declaring(declared: int) -> bytes:
    """Kafka's snappy framing around one raw block that declares ``declared`` bytes and
    holds a thousand zeros."""
    zeros = SnappyCodec().compress(bytes(1000))
    raw = encode_uvarint(declared) + zeros[len(XERIAL_HEADER) + 4 + len(encode_uvarint(1000)) :]
    return XERIAL_HEADER + len(raw).to_bytes(4, "big") + raw


#: Each bomb: its codec, how to build its compressed records, and Kafka's error for it.
BOMBS = {
    "gzip": ("gzip", lambda: GzipCodec().compress(bytes(PAST_BOUND)), ErrorCode.INVALID_RECORD),
    "lz4": ("lz4", lambda: Lz4Codec().compress(bytes(PAST_BOUND)), ErrorCode.INVALID_RECORD),
    "snappy, a block declaring the bound": ("snappy", lambda: xerial_block_declaring(BOUND), ErrorCode.CORRUPT_MESSAGE),
    "zstd without content size": ("zstd", lambda: zstd_zeros(1 << 30), ErrorCode.INVALID_RECORD),
    "zstd without content size, a 128 MiB window": (
        "zstd",
        lambda: zstd_zeros(1 << 30, window_log=27),
        ErrorCode.INVALID_RECORD,
    ),
    "zstd declaring a content size within the bound": (
        "zstd",
        lambda: zstd_zeros(1 << 30, declared=BOUND // 2),
        ErrorCode.INVALID_RECORD,
    ),
}


@functools.cache
def bomb_batch(name: str) -> bytes:
    codec, build, _ = BOMBS[name]
    return compressed_batch(build(), 1000, COMPRESSION_TYPE_IDS[codec])


def error_of(client: RawClient, batch: bytes) -> tuple[int, str | None]:
    part = client.request(PRODUCE, 9, produce_body("bombs", batch)).responses[0].partition_responses[0]
    return part.error_code, part.error_message


def settled_growth(served: Served, baseline: float, bound: float, children: bool = False) -> float:
    """How much the broker's RSS (with ``children``, its child processes' too) exceeds
    ``baseline``, once that is less than ``bound`` or SETTLE_S seconds have passed."""
    try:
        wait_for("the memory to go back", lambda: served.rss_mb(children) - baseline < bound, timeout=SETTLE_S)
    except AssertionError:
        pass
    return served.rss_mb(children) - baseline


def produce_with_a_real_client(address: str, compression: str) -> None:
    delivered = []
    producer = Producer({"bootstrap.servers": address, "compression.type": compression, "linger.ms": 5})
    for i in range(100):
        producer.produce("after", b"value %d" % i, on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(15) == 0
    assert delivered == [None] * 100


@pytest.mark.parametrize("name", BOMBS)
def test_bombs_are_refused_and_their_memory_goes_back(served, name):
    codec, _, expected = BOMBS[name]
    bomb = bomb_batch(name)
    assert len(bomb) < MESSAGE_MAX_BYTES
    with RawClient(served.address, timeout=60) as c:
        assert c.request(METADATA, 12, metadata_body("bombs")).topics[0].error_code == 0
        baseline = served.rss_mb()
        errors = [error_of(c, bomb) for _ in range(10)]

    def one_connection(_):
        with RawClient(served.address, timeout=60) as client:
            return error_of(client, bomb)

    with ThreadPoolExecutor(10) as pool:
        errors += pool.map(one_connection, range(10))
    assert {code for code, _ in errors} == {expected}, errors[0][1]

    kept = settled_growth(served, baseline, KEPT_MB)
    assert kept < KEPT_MB, f"20 bombs left the broker {kept:.0f} MiB larger than its {baseline:.0f} MiB"
    produce_with_a_real_client(served.address, codec)


def test_a_bomb_within_the_bound_leaves_nothing_in_the_walk_worker_process(served):
    # Kafka's 32 KiB snappy blocks of zeros, as many as a batch holds (snappy expands 21
    # times at most): 20 MiB, within the bound, of records of length 0, which the C walk in
    # a thread leaves to the Python walk of a worker process to refuse.
    bomb = compressed_batch(SnappyCodec().compress(bytes(20 * 1024 * 1024)), 1000, COMPRESSION_TYPE_IDS["snappy"])
    assert len(bomb) < MESSAGE_MAX_BYTES
    with RawClient(served.address, timeout=60) as c:
        assert c.request(METADATA, 12, metadata_body("bombs")).topics[0].error_code == 0
        # A batch to rebuild (its records all at offset delta 0) starts a worker process.
        assert error_of(c, empty_records_batch(3000)) == (ErrorCode.NONE, None)
        baseline = served.rss_mb(children=True)
        errors = [error_of(c, bomb) for _ in range(10)]
    assert {code for code, _ in errors} == {ErrorCode.INVALID_RECORD}, errors[0][1]

    kept = settled_growth(served, baseline, KEPT_BY_WORKER_MB, children=True)
    assert kept < KEPT_BY_WORKER_MB, f"10 bombs left the broker and its walk worker {kept:.0f} MiB larger"
    produce_with_a_real_client(served.address, "snappy")
