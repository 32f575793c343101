"""A seeded mutation fuzzer for a running broker: valid frames of every served API (and
produce frames with compressed batches of extreme record counts), mutated (bit flips,
interesting integers, truncation, growth, splices, forged sizes, and record counts and
offset ranges rewritten under a valid CRC) and sent on a few connections, while a real
client keeps producing and its latency is measured.

Three kinds of produce requests are also sent once as they are, then among the seeds:
batches that lie about their records (counts and offset deltas, uncompressed and
compressed), decompression bombs of every codec (a few hundred KB that inflate to
hundreds of MB; sent rarely, each costs the broker a bounded decompression), and
appends to the internal topics ``__consumer_offsets`` and ``__transaction_state``.

    python tests/fuzz.py --frames 200000 --seed 7      # a long run against a fresh broker

It starts ``brokkr serve`` itself (a temporary log dir), prints what it measured, and
exits non-zero if the broker died, a real client's produce took more than
``--max-latency`` seconds, the broker's memory stayed more than ``--max-growth-mb``
above its baseline once the fuzzing connections were gone, it took an append to an
internal topic, or the fuzzed topic's log, read back, holds a batch whose records are not
the ones its header counts. ``tests/test_fuzz.py`` runs a short one in the suite.
"""

from __future__ import annotations

import argparse
import gzip
import random
import socket
import struct
import sys
import tempfile
import time
import zlib
from pathlib import Path

import attrs
import crc32c
import lz4.frame
import snappy
import zstandard

sys.path.insert(0, str(Path(__file__).parent))

from brokkr.core.apis.builtin import brokkr_apis  # noqa: E402
from brokkr.core.errors import CorruptRequest, ErrorCode  # noqa: E402
from brokkr.core.protocol.frames import encode_request, request_spec  # noqa: E402
from brokkr.core.protocol.records import (  # noqa: E402
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    HEADER_SIZE,
    LAST_OFFSET_DELTA_OFFSET,
    LOG_OVERHEAD,
    build_batch,
    encode_batch,
    encode_record,
    iter_batches_untrusted,
    scan_records_untrusted,
)
from brokkr.core.testing import RawClient  # noqa: E402
from brokkr.plugins.codecs.gzip import GzipCodec  # noqa: E402
from brokkr.plugins.codecs.lz4 import Lz4Codec  # noqa: E402
from brokkr.plugins.codecs.snappy import XERIAL_BLOCK_SIZE, XERIAL_HEADER, SnappyCodec  # noqa: E402
from brokkr.plugins.codecs.zstd import ZstdCodec  # noqa: E402
from serve import Served  # noqa: E402
from waiting import wait_for  # noqa: E402
from wire import (  # noqa: E402
    FETCH,
    METADATA,
    PRODUCE,
    ZSTD,
    compressed_batch,
    empty_records_batch,
    fetch_body,
    metadata_body,
    produce_body,
    records_section,
)

GZIP, SNAPPY, LZ4 = 1, 2, 3
INTERESTING = [0, 1, 0x7F, 0x80, 0xFF, 0x7FFF, 0x8000, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF]
INTERNAL_TOPICS = ("__consumer_offsets", "__transaction_state")
FIND_COORDINATOR = 10
RECORD_COUNT_OFFSET = 57  # in a batch header (see brokkr.core.protocol.records)
MIB = 1 << 20
#: The share of mutated frames that are decompression bombs (each costs the broker a
#: decompression up to socket.request.max.bytes, a tenth of a second or so).
BOMB_SHARE = 0.004

#: A seed: a frame, and where the record batch it carries starts in it (-1: none).
Seed = tuple[bytes, int]


def produce_seed(topic: str, batch: bytes) -> Seed:
    frame = encode_request(PRODUCE, 9, 1, "fuzz", produce_body(topic, batch))
    return frame, frame.find(batch)


def lie_batches() -> list[bytes]:
    """Batches whose headers lie about their records, CRC valid (issue 34): three records
    counted as 2^31-1, 1000, 4, 2 or 1 (the offset range agreeing), offset deltas out of
    order or past the last one, a byte after the last record; uncompressed, gzip and zstd.
    Every one is refused but the compressed ones with deltas out of order, which Kafka
    renumbers."""
    three = records_section(0, 1, 2)
    lies = [(three, count) for count in (2**31 - 1, 1000, 4, 2, 1)]
    lies += [(records_section(0, 2, 1), 3), (records_section(0, 1, 2**31 - 2), 3), (three + b"\x00", 3)]
    batches = []
    for section, count in lies:
        batches.append(bytes(encode_batch(section, record_count=count)))
        batches.append(compressed_batch(gzip.compress(section), count, GZIP))
        batches.append(compressed_batch(zstandard.ZstdCompressor().compress(section), count, ZSTD))
    return batches


def bomb_batches() -> list[bytes]:
    """Decompression bombs of every codec, each batch counting one record: gzip, lz4 and
    xerial snappy inflating to 256 MiB, zstd (no content size in its frame) to 1 GiB, and
    a raw snappy block declaring 4 GiB. Snappy cannot beat about 21:1, so its real bomb
    is the large one (12 MiB); the others take at most about a MiB."""
    zero = bytes(MIB)
    deflater = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    first = deflater.compress(zero) + deflater.flush(zlib.Z_SYNC_FLUSH)
    more = deflater.compress(zero) + deflater.flush(zlib.Z_SYNC_FLUSH)  # reads only a window of zeros: repeatable
    crc = 0
    for _ in range(256):
        crc = zlib.crc32(zero, crc)
    # a final empty block, then the gzip trailer: CRC-32 and size of the 256 MiB
    gzip_bomb = first + more * 255 + b"\x03\x00" + struct.pack("<II", crc, (256 * MIB) & 0xFFFFFFFF)
    block = snappy.compress(bytes(XERIAL_BLOCK_SIZE))  # starts with its length, 32768: three bytes of varint
    snappy_bomb = XERIAL_HEADER + (struct.pack(">i", len(block)) + block) * (256 * MIB // XERIAL_BLOCK_SIZE)
    declared = bytes([0xFF, 0xFF, 0xFF, 0xFF, 0x0F]) + block[3:]  # 4 GiB - 1 claimed, 32 KiB held
    lz4_frames = lz4.frame.LZ4FrameCompressor(block_linked=False, content_checksum=False)
    lz4_bomb = lz4_frames.begin() + b"".join(lz4_frames.compress(zero) for _ in range(256)) + lz4_frames.flush()
    zstd_frames = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    zstd_bomb = b"".join(zstd_frames.compress(zero) for _ in range(1024)) + zstd_frames.flush()
    bombs = [(gzip_bomb, GZIP), (snappy_bomb, SNAPPY), (declared, SNAPPY), (lz4_bomb, LZ4), (zstd_bomb, ZSTD)]
    return [compressed_batch(data, 1, codec) for data, codec in bombs]


def internal_appends() -> list[tuple[str, bytes]]:
    """(topic, batch) appends to the internal topics, which the broker must refuse."""
    return [(topic, build_batch([(b"\x00\x01junk", b"junk")] * 3)) for topic in INTERNAL_TOPICS]


def seed_frames() -> list[Seed]:
    """Valid frames: every served API at its lowest and highest version with default
    fields, plus produce, fetch and metadata frames that carry data, batches that lie
    about their records, and appends to the internal topics (the bombs are apart:
    :func:`bomb_batches`)."""
    frames = []
    for api in sorted(brokkr_apis(), key=lambda a: a.key):
        key = api.key
        for version in {api.min_version, api.max_version}:
            try:
                frames.append((encode_request(key, version, 1, "fuzz", request_spec(key).cls()), -1))
            except Exception:  # a default that does not encode in this version
                continue
    now = int(time.time() * 1000)
    batches = [
        build_batch([(b"k%d" % i, b"v" * i) for i in range(20)], timestamp=now),
        compressed_batch(gzip.compress(b"".join(encode_record(i, 0, b"k", b"v" * 1000) for i in range(5))), 5, GZIP),
        empty_records_batch(200_000),
        empty_records_batch(1000, declared=2**31 - 1),  # claims two billion records
        *lie_batches(),
    ]
    frames += [produce_seed("fuzz", b) for b in batches]
    frames += [produce_seed(topic, b) for topic, b in internal_appends()]
    frames.append((encode_request(1, 12, 1, "fuzz", fetch_body("fuzz", max_wait_ms=10)), -1))
    frames.append((encode_request(METADATA, 12, 1, "fuzz", metadata_body("fuzz", "other")), -1))
    return frames


def lie(data: bytearray, at: int, rng: random.Random) -> None:
    """Rewrite the record count and the last offset delta of the batch at ``at`` (the
    offset range agreeing with the count, or not) and make its CRC valid again."""
    count = rng.choice(INTERESTING + [2, 3, 4, 1000]) & 0xFFFFFFFF
    last_delta = (count - 1 if rng.random() < 0.7 else rng.choice(INTERESTING)) & 0xFFFFFFFF
    struct.pack_into(">I", data, at + RECORD_COUNT_OFFSET, count)
    struct.pack_into(">I", data, at + LAST_OFFSET_DELTA_OFFSET, last_delta)
    (length,) = struct.unpack_from(">i", data, at + 8)  # batch_length: the bytes after LOG_OVERHEAD
    crc = crc32c.crc32c(memoryview(data)[at + ATTRIBUTES_OFFSET : at + LOG_OVERHEAD + length])
    struct.pack_into(">I", data, at + CRC_OFFSET, crc)


def mutate(frame: bytes, rng: random.Random, batch_at: int = -1) -> tuple[bytes, bool]:
    """A mutated frame, and whether its size prefix is forged (it then lies about the
    bytes that follow). A frame carrying a batch at ``batch_at`` may first have its batch
    lie about its records, under a valid CRC."""
    data = bytearray(frame)
    forged = False
    if batch_at >= 0 and rng.random() < 0.3:
        lie(data, batch_at, rng)
        if rng.random() < 0.5:
            return bytes(data), False
    for _ in range(rng.randint(1, 4)):
        kind = rng.randrange(7)
        if kind == 0 and len(data) > 4:  # flip a bit
            i = rng.randrange(4, len(data))
            data[i] ^= 1 << rng.randrange(8)
        elif kind == 1 and len(data) > 8:  # an interesting integer
            width = rng.choice((1, 2, 4))
            i = rng.randrange(4, len(data) - width)
            value = rng.choice(INTERESTING) & ((1 << (8 * width)) - 1)
            data[i : i + width] = value.to_bytes(width, "big")
        elif kind == 2 and len(data) > 8:  # truncate
            del data[rng.randrange(8, len(data)) :]
        elif kind == 3:  # grow
            data += rng.randbytes(rng.randint(1, 64))
        elif kind == 4 and len(data) > 16:  # splice a chunk elsewhere
            i, j = sorted(rng.sample(range(4, len(data)), 2))
            k = rng.randrange(4, len(data))
            data[k:k] = data[i:j][:256]
        elif kind == 5 and len(data) > 8:  # zero a run
            i = rng.randrange(4, len(data))
            data[i : i + rng.randint(1, 16)] = bytes(min(16, len(data) - i))
        else:  # forge the size prefix
            forged = True
    data[0:4] = struct.pack(">i", len(data) - 4)
    if forged:
        data[0:4] = struct.pack(">i", rng.choice((0, -1, 1 << 20, rng.randrange(1 << 27))))
    return bytes(data), forged


def _exactly(s: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = s.recv(min(n - len(data), 1 << 20))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return bytes(data)


@attrs.define
class Report:
    frames: int = 0
    answered: int = 0
    reconnects: int = 0
    baseline_latency: float = 0.0
    max_latency: float = 0.0
    baseline_rss_mb: float = 0.0
    end_rss_mb: float = 0.0
    peak_rss_mb: float = 0.0
    alive: bool = True
    tracebacks: int = 0  # unexpected errors the broker logged (each a bug: bad input gets an error code)
    internal_appends: int = 0  # appends to internal topics the broker took (each a bug)
    log_problems: list[str] = attrs.Factory(list)  # what reading the fuzzed topic back found wrong


class Fuzzer:
    def __init__(self, address: str, seed: int, connections: int = 4):
        self.host, port = address.rsplit(":", 1)
        self.port = int(port)
        self.rng = random.Random(seed)
        self.seeds = seed_frames()
        self.bomb_batches = bomb_batches()
        self.bombs = [produce_seed("fuzz", b) for b in self.bomb_batches]
        self.socks: list[socket.socket | None] = [None] * connections
        self.report = Report()

    def _sock(self, i: int) -> socket.socket:
        s = self.socks[i]
        if s is None:
            s = socket.create_connection((self.host, self.port), timeout=0.25)
            self.socks[i] = s
            self.report.reconnects += 1
        return s

    def send_one(self) -> None:
        """One mutated frame. A frame with a forged size goes on a connection of its own,
        closed after it; any other waits for its answer (or the broker closing)."""
        seeds = self.bombs if self.rng.random() < BOMB_SHARE else self.seeds
        seed, batch_at = self.rng.choice(seeds)
        frame, forged = mutate(seed, self.rng, batch_at)
        self.report.frames += 1
        if forged:
            with socket.create_connection((self.host, self.port), timeout=5) as s:
                try:
                    s.sendall(frame)
                except OSError:  # a large frame the broker closed on (its size was refused)
                    pass
            return
        i = self.rng.randrange(len(self.socks))
        try:
            s = self._sock(i)
            s.sendall(frame)
            size = struct.unpack(">i", _exactly(s, 4))[0]
            _exactly(s, size)
            self.report.answered += 1
        except (OSError, ConnectionError):  # closed by the broker, or no answer (acks=0)
            self._close(i)

    def _close(self, i: int) -> None:
        s = self.socks[i]
        if s is not None:
            s.close()
        self.socks[i] = None

    def close(self) -> None:
        for i in range(len(self.socks)):
            self._close(i)


def produce_latency(address: str, n: int) -> float:
    """Seconds for one acknowledged produce of a real client (the slowest of ``n``)."""
    with RawClient(address, timeout=30) as c:
        worst = 0.0
        for _ in range(n):
            start = time.perf_counter()
            [t] = c.request(PRODUCE, 9, produce_body("healthy", build_batch([(b"k", b"v")]))).responses
            assert t.partition_responses[0].error_code == 0
            worst = max(worst, time.perf_counter() - start)
        return worst


def create_internal_topics(address: str) -> None:
    """Have the coordinators create ``__consumer_offsets`` and ``__transaction_state``
    (FindCoordinator), so that appends to them reach a partition."""
    spec = request_spec(FIND_COORDINATOR)
    with RawClient(address, timeout=30) as c:
        for key_type, topic in enumerate(INTERNAL_TOPICS):  # 0: a group, 1: a transactional id

            def created(key_type=key_type, topic=topic) -> bool:
                c.request(FIND_COORDINATOR, 4, spec.cls(key_type=key_type, coordinator_keys=["fuzz"]))
                return c.request(METADATA, 12, metadata_body(topic, auto_create=False)).topics[0].error_code == 0

            wait_for(f"{topic} to be created", created, timeout=20)


def send_as_they_are(address: str, appends: list[tuple[str, bytes]]) -> int:
    """Send produce requests of (topic, batch) once unmutated (a mutation mostly breaks a
    CRC before what lies behind it is reached); answers how many appends to internal
    topics were taken."""
    taken = 0
    with RawClient(address, timeout=60) as c:
        for topic, batch in appends:
            [answer] = c.request(PRODUCE, 9, produce_body(topic, batch)).responses
            taken += topic in INTERNAL_TOPICS and answer.partition_responses[0].error_code == ErrorCode.NONE
    return taken


def log_problems(address: str, topic: str, limit: int = 10) -> list[str]:
    """What reading partition 0 of ``topic`` back from offset 0 finds wrong (the first
    ``limit``): a batch whose records are not exactly the ones its header counts, at
    offsets other than its own, or not starting where the one before ended."""
    codecs = {codec.id: codec for codec in (GzipCodec(), SnappyCodec(), Lz4Codec(), ZstdCodec())}
    problems: list[str] = []
    offset = 0
    with RawClient(address, timeout=30) as c:
        while len(problems) < limit:
            request = fetch_body(topic, offset, partition_max_bytes=8 * MIB)
            [part] = c.request(FETCH, 12, request).responses[0].partitions
            if part.error_code != ErrorCode.NONE:
                problems.append(f"fetch at {offset}: error {part.error_code}")
                break
            data = memoryview(part.records or b"")
            headers = list(iter_batches_untrusted(data))
            for header in headers:
                where = f"batch at {header.base_offset}"
                if header.base_offset != offset:
                    problems.append(f"{where}: expected at {offset}")
                section = data[header.position + HEADER_SIZE : header.end]
                try:
                    payload = codecs[header.codec].decompress(section) if header.codec else section
                    if not scan_records_untrusted(header, payload).sequential:
                        problems.append(f"{where}: offset deltas not 0..{header.record_count - 1}")
                except (CorruptRequest, ValueError) as exc:  # ValueError: DecompressionError
                    problems.append(f"{where} ({header.record_count} records counted): {exc}")
                offset = header.last_offset + 1
            if not headers or offset >= part.high_watermark:
                break
    return problems[:limit]


def run(frames: int, seed: int, check_every: int = 250, log_dir: Path | None = None) -> Report:
    with tempfile.TemporaryDirectory() as tmp:
        served = Served(
            "--override",
            "listeners=PLAINTEXT://127.0.0.1:0",
            "--override",
            f"log.dirs={log_dir or Path(tmp) / 'data'}",
            "--override",
            "connections.max.idle.ms=5000",
            cwd=tmp,
        )
        try:
            with RawClient(served.address) as c:
                for t in ("healthy", "fuzz", "other"):
                    c.request(METADATA, 12, metadata_body(t))
            fuzzer = Fuzzer(served.address, seed)
            report = fuzzer.report
            report.baseline_latency = produce_latency(served.address, 20)
            report.baseline_rss_mb = report.peak_rss_mb = served.rss_mb()
            create_internal_topics(served.address)
            unmutated = [("fuzz", b) for b in (*lie_batches(), *fuzzer.bomb_batches)] + internal_appends()
            report.internal_appends = send_as_they_are(served.address, unmutated)
            for n in range(frames):
                fuzzer.send_one()
                if n % check_every == 0:
                    report.max_latency = max(report.max_latency, produce_latency(served.address, 1))
                    report.peak_rss_mb = max(report.peak_rss_mb, served.rss_mb())
                    if served.proc.poll() is not None:
                        break
            fuzzer.close()
            time.sleep(1)
            report.alive = served.proc.poll() is None
            if report.alive:
                report.max_latency = max(report.max_latency, produce_latency(served.address, 5))
                report.end_rss_mb = served.rss_mb()
                report.log_problems = log_problems(served.address, "fuzz")
            report.tracebacks = served.output().count("Traceback")
            if report.tracebacks:
                print(served.output(), file=sys.stderr)
            return report
        finally:
            served.kill()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-latency", type=float, default=1.0, help="seconds a real client's produce may take")
    parser.add_argument("--max-growth-mb", type=float, default=100.0)
    args = parser.parse_args(argv)
    report = run(args.frames, args.seed)
    print(attrs.asdict(report))
    growth = report.end_rss_mb - report.baseline_rss_mb
    ok = report.alive and not report.tracebacks and report.max_latency <= args.max_latency
    ok = ok and growth <= args.max_growth_mb and not report.internal_appends and not report.log_problems
    print("ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
