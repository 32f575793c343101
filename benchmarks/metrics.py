"""Produce throughput with the Prometheus endpoint on against off, in the same run.

Two `brokkr serve` subprocesses, one with `brokkr.metrics.port` set (scraped every second
while measured, as Prometheus would), one without, take the same raw pipelined Produce v9
requests (raw_produce.py); runs alternate between them, and medians are compared.

    .venv-test/bin/python benchmarks/metrics.py [--requests 20000] [--records 100] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
import urllib.request

from brokkr.core.protocol.records import build_batch
from produce import create_topic, free_port, start_broker, stop_broker
from raw_produce import produce_frame, timed_run


def scrape_every_second(port: int, stop: threading.Event) -> None:
    while not stop.wait(1.0):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            r.read()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--records", type=int, default=100, help="records of 100 B per request")
    parser.add_argument("--in-flight", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    frame = produce_frame("bench", build_batch([(b"key-%d" % i, b"v" * 100) for i in range(args.records)]))
    results: dict[str, list[float]] = {"off": [], "on": []}
    with tempfile.TemporaryDirectory(prefix="brokkr-bench-") as data_dir:
        ports = {mode: free_port() for mode in results}
        metrics_port = free_port()
        overrides = {"off": {}, "on": {"brokkr.metrics.port": str(metrics_port)}}
        brokers = {
            mode: start_broker(ports[mode], f"{data_dir}/{mode}", sys.stderr, overrides[mode]) for mode in results
        }
        try:
            for mode in results:
                create_topic(f"127.0.0.1:{ports[mode]}", "bench")
            for run in range(args.repeat):
                for mode in ("off", "on") if run % 2 == 0 else ("on", "off"):
                    stop = threading.Event()
                    scraper = threading.Thread(target=scrape_every_second, args=(metrics_port, stop), daemon=True)
                    if mode == "on":
                        scraper.start()
                    elapsed, _ = timed_run(
                        f"127.0.0.1:{ports[mode]}", brokers[mode].pid, frame, 1000, args.requests, args.in_flight
                    )
                    stop.set()
                    results[mode].append(args.requests / elapsed)
                    time.sleep(0.5)
        finally:
            for proc in brokers.values():
                stop_broker(proc)
    off, on = statistics.median(results["off"]), statistics.median(results["on"])
    print(f"requests/s, medians of {args.repeat} alternating runs ({args.records} x 100 B records a request)")
    print(f"metrics off: {off:10.0f}")
    print(f"metrics on:  {on:10.0f}   ratio on/off: {on / off:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
