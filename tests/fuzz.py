"""A seeded mutation fuzzer for a running broker: valid frames of every served API (and
produce frames with compressed batches of extreme record counts), mutated (bit flips,
interesting integers, truncation, growth, splices, forged sizes) and sent on a few
connections, while a real client keeps producing and its latency is measured.

    python tests/fuzz.py --frames 200000 --seed 7      # a long run against a fresh broker

It starts ``brokkr serve`` itself (a temporary log dir), prints what it measured, and
exits non-zero if the broker died, a real client's produce took more than
``--max-latency`` seconds, or the broker's memory stayed more than ``--max-growth-mb``
above its baseline once the fuzzing connections were gone. ``tests/test_fuzz.py`` runs a
short one in the suite.
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
from pathlib import Path

import attrs

sys.path.insert(0, str(Path(__file__).parent))

from brokkr.core.apis.builtin import brokkr_apis  # noqa: E402
from brokkr.core.protocol.frames import encode_request, request_spec  # noqa: E402
from brokkr.core.protocol.records import build_batch, encode_record  # noqa: E402
from brokkr.core.testing import RawClient  # noqa: E402
from serve import Served  # noqa: E402
from wire import (  # noqa: E402
    METADATA,
    PRODUCE,
    compressed_batch,
    empty_records_batch,
    fetch_body,
    metadata_body,
    produce_body,
)

GZIP = 1
INTERESTING = [0, 1, 0x7F, 0x80, 0xFF, 0x7FFF, 0x8000, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF]


def seed_frames() -> list[bytes]:
    """Valid frames: every served API at its lowest and highest version with default
    fields, plus produce, fetch and metadata frames that carry data."""
    frames = []
    for api in sorted(brokkr_apis(), key=lambda a: a.key):
        key = api.key
        for version in {api.min_version, api.max_version}:
            try:
                frames.append(encode_request(key, version, 1, "fuzz", request_spec(key).cls()))
            except Exception:  # a default that does not encode in this version
                continue
    now = int(time.time() * 1000)
    batches = [
        build_batch([(b"k%d" % i, b"v" * i) for i in range(20)], timestamp=now),
        compressed_batch(gzip.compress(b"".join(encode_record(i, 0, b"k", b"v" * 1000) for i in range(5))), 5, GZIP),
        empty_records_batch(200_000),
        empty_records_batch(1000, declared=2**31 - 1),  # claims two billion records
    ]
    for b in batches:
        frames.append(encode_request(PRODUCE, 9, 1, "fuzz", produce_body("fuzz", b)))
    frames.append(encode_request(1, 12, 1, "fuzz", fetch_body("fuzz", max_wait_ms=10)))
    frames.append(encode_request(METADATA, 12, 1, "fuzz", metadata_body("fuzz", "other")))
    return frames


def mutate(frame: bytes, rng: random.Random) -> tuple[bytes, bool]:
    """A mutated frame, and whether its size prefix is forged (it then lies about the
    bytes that follow)."""
    data = bytearray(frame)
    forged = False
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


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


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


class Fuzzer:
    def __init__(self, address: str, seed: int, connections: int = 4):
        self.host, port = address.rsplit(":", 1)
        self.port = int(port)
        self.rng = random.Random(seed)
        self.seeds = seed_frames()
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
        frame, forged = mutate(self.rng.choice(self.seeds), self.rng)
        self.report.frames += 1
        if forged:
            with socket.create_connection((self.host, self.port), timeout=5) as s:
                s.sendall(frame)
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
            report.baseline_rss_mb = report.peak_rss_mb = rss_mb(served.proc.pid)
            for n in range(frames):
                fuzzer.send_one()
                if n % check_every == 0:
                    report.max_latency = max(report.max_latency, produce_latency(served.address, 1))
                    report.peak_rss_mb = max(report.peak_rss_mb, rss_mb(served.proc.pid))
                    if served.proc.poll() is not None:
                        break
            fuzzer.close()
            time.sleep(1)
            report.alive = served.proc.poll() is None
            if report.alive:
                report.max_latency = max(report.max_latency, produce_latency(served.address, 5))
                report.end_rss_mb = rss_mb(served.proc.pid)
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
    ok = ok and growth <= args.max_growth_mb
    print("ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
