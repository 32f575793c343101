"""Produce latency of a well-behaved client alone, and while other connections send the
worst requests brokkr knows of, in the same run (issue: hardening).

The well-behaved client sends one acks=1 Produce of 10 x 100 B records at a time to a
`brokkr serve` subprocess and times each answer. The attacks, each on connections of their
own, run in turn for --seconds each:

- zstd:    tiny zstd batches of 500,000 empty records with offset deltas all 0 (a walk and
           a rebuild each), back to back;
- stalled: 50 connections each declaring a 99 MB frame and sending 1 MB of it;
- unread:  10 connections pipelining 20 fetches of 4 MB each and never reading them.

    .venv-test/bin/python benchmarks/attack_latency.py [--seconds 10] [--repeat 3]

Reports p50/p99/max of the well-behaved client per phase, the ratio of each phase's p99 to
the quiet phase's, and the broker's RSS. Phases alternate quiet/attack, --repeat times,
and medians are reported.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))

from brokkr.core.protocol.frames import encode_request  # noqa: E402
from brokkr.core.protocol.records import build_batch  # noqa: E402
from brokkr.core.testing import RawClient  # noqa: E402
from produce import free_port, start_broker, stop_broker  # noqa: E402
from wire import FETCH, METADATA, PRODUCE, empty_records_batch, fetch_body, metadata_body, produce_body  # noqa: E402


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def attack_zstd(address: str, stop: threading.Event) -> None:
    frame = encode_request(PRODUCE, 9, 1, "attacker", produce_body("bomb", empty_records_batch(500_000)))
    with RawClient(address, timeout=120) as c:
        while not stop.is_set():
            c.sock.sendall(frame)
            c.receive_frame()


def attack_stalled(address: str, stop: threading.Event) -> None:
    host, port = address.rsplit(":", 1)
    socks = []
    for _ in range(50):
        s = socket.create_connection((host, int(port)))
        s.sendall(struct.pack(">i", 99_000_000) + bytes(1 << 20))
        socks.append(s)
    stop.wait()
    for s in socks:
        s.close()


def attack_unread(address: str, stop: threading.Event) -> None:
    host, port = address.rsplit(":", 1)
    frame = encode_request(FETCH, 12, 1, "attacker", fetch_body("big", max_bytes=4 << 20, partition_max_bytes=4 << 20))
    socks = []
    for _ in range(10):
        s = socket.create_connection((host, int(port)))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.sendall(frame * 20)
        socks.append(s)
    stop.wait()
    for s in socks:
        s.close()


ATTACKS = {"zstd": attack_zstd, "stalled": attack_stalled, "unread": attack_unread}


def measure(address: str, seconds: float) -> list[float]:
    frame_body = produce_body("healthy", build_batch([(b"k%d" % i, b"v" * 100) for i in range(10)]))
    latencies = []
    with RawClient(address, timeout=60) as c:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            start = time.perf_counter()
            c.request(PRODUCE, 9, frame_body)
            latencies.append(time.perf_counter() - start)
            time.sleep(0.005)
    return latencies


def summary(latencies: list[float]) -> dict:
    ordered = sorted(latencies)
    return {
        "p50_ms": 1000 * ordered[len(ordered) // 2],
        "p99_ms": 1000 * ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
        "max_ms": 1000 * ordered[-1],
        "requests": len(ordered),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        proc = start_broker(port, tmp, sys.stderr, {"connections.max.idle.ms": "600000"})
        address = f"127.0.0.1:{port}"
        try:
            with RawClient(address) as c:
                for t in ("healthy", "bomb", "big"):
                    c.request(METADATA, 12, metadata_body(t))
                for _ in range(40):
                    c.request(PRODUCE, 9, produce_body("big", build_batch([(b"k", b"x" * 1000)] * 100)))
            results: dict[str, list[dict]] = {"quiet": [], **{name: [] for name in ATTACKS}}
            rss: dict[str, float] = {}
            for _ in range(args.repeat):
                for name, attack in ATTACKS.items():
                    results["quiet"].append(summary(measure(address, args.seconds)))
                    stop = threading.Event()
                    attacker = threading.Thread(target=attack, args=(address, stop), daemon=True)
                    attacker.start()
                    time.sleep(0.5)
                    results[name].append(summary(measure(address, args.seconds)))
                    rss[name] = max(rss.get(name, 0.0), rss_mb(proc.pid))
                    stop.set()
                    attacker.join(timeout=150)
            time.sleep(1)
            rss["after"] = rss_mb(proc.pid)
        finally:
            stop_broker(proc)
    medians = {
        phase: {key: statistics.median(r[key] for r in runs) for key in runs[0]} for phase, runs in results.items()
    }
    print(f"{'phase':<10} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'p99 / quiet':>12} {'broker RSS MB':>14}")
    for phase, m in medians.items():
        ratio = m["p99_ms"] / medians["quiet"]["p99_ms"]
        print(
            f"{phase:<10} {m['p50_ms']:8.2f} {m['p99_ms']:8.2f} {m['max_ms']:8.2f} {ratio:12.2f} "
            f"{rss.get(phase, float('nan')):14.0f}"
        )
    print(f"broker RSS after the attacks: {rss['after']:.0f} MB (cpus: {os.cpu_count()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
