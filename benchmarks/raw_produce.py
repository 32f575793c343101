"""Raw pipelined Produce requests, shared by the benchmarks that drive a broker without a
client library (codecs.py, security.py). Run alone, it measures the broker's CPU per
Produce request, the per-request cost with no client library beside it:

    .venv/bin/python benchmarks/raw_produce.py --records 10 --requests 20000
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from brokkr.core.errors import ErrorCode
from brokkr.core.protocol.frames import encode_request, request_spec
from brokkr.core.protocol.records import build_batch
from brokkr.core.testing import RawClient
from produce import cpu_seconds, create_topic, free_port, start_broker, stop_broker

PRODUCE = 0
PRODUCE_VERSION = 9
RUN_TIMEOUT_S = 120.0


def produce_frame(topic: str, batch: bytes, client_id: str = "brokkr-bench", partitions: int = 1) -> bytes:
    """One Produce v9 request (acks=1) of ``batch`` to each of partitions 0..partitions-1 of ``topic``."""
    spec = request_spec(PRODUCE)
    data = [spec.struct("PartitionProduceData")(index=i, records=batch) for i in range(partitions)]
    topic_data = spec.struct("TopicProduceData")(name=topic, partition_data=data)
    body = spec.cls(acks=1, timeout_ms=30000, topic_data=[topic_data])
    return encode_request(PRODUCE, PRODUCE_VERSION, 1, client_id, body)


def timed_run(bootstrap: str, pid: int, frame: bytes, warmup: int, requests: int, in_flight: int):
    """(seconds, broker CPU % of one core or None) for ``requests`` pipelined sends of
    ``frame``, after ``warmup`` untimed ones."""
    with RawClient(bootstrap, timeout=RUN_TIMEOUT_S) as client:
        send_requests(client, frame, warmup, in_flight)
        cpu_before = cpu_seconds(pid)
        start = time.perf_counter()
        send_requests(client, frame, requests, in_flight)
        elapsed = time.perf_counter() - start
        cpu_after = cpu_seconds(pid)
    cpu = None if cpu_before is None or cpu_after is None else 100 * (cpu_after - cpu_before) / elapsed
    return elapsed, cpu


def send_requests(client: RawClient, frame: bytes, n: int, in_flight: int) -> None:
    """Send ``frame`` n times, keeping up to ``in_flight`` unanswered; every answer must be a
    success, unthrottled."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    sent = answered = 0
    while answered < n:
        while sent < n and sent - answered < in_flight:
            client.sock.sendall(frame)
            sent += 1
        _, response = client.receive(PRODUCE, PRODUCE_VERSION)
        part = next((p for p in response.responses[0].partition_responses if p.error_code), None)
        if part is not None or response.throttle_time_ms:
            part = part or response.responses[0].partition_responses[0]
            raise RuntimeError(
                f"produce failed: {ErrorCode(part.error_code).name}: {part.error_message}, "
                f"throttled {response.throttle_time_ms} ms"
            )
        answered += 1
        if time.monotonic() > deadline:
            raise TimeoutError(f"{n - answered} request(s) unanswered after {RUN_TIMEOUT_S:.0f}s")


def main() -> None:
    parser = argparse.ArgumentParser(description="Broker CPU per pipelined Produce request (brokkr serve, acks=1).")
    parser.add_argument("--records", type=int, default=10, help="records of 100 B per partition (10)")
    parser.add_argument("--partitions", type=int, default=1, help="partitions each request writes to (1)")
    parser.add_argument("--requests", type=int, default=20000, help="timed requests per run (20000)")
    parser.add_argument("--in-flight", type=int, default=20, help="requests sent ahead of their answers (20)")
    parser.add_argument("--runs", type=int, default=3, help="timed runs; their median is reported (3)")
    parser.add_argument("--log-dirs", default=None, help="segment files here (default: a new temporary directory)")
    args = parser.parse_args()
    port = free_port()
    proc = start_broker(port, args.log_dirs or tempfile.mkdtemp(prefix="brokkr-raw-"), None)
    try:
        bootstrap = f"127.0.0.1:{port}"
        create_topic(bootstrap, "raw", partitions=args.partitions)
        batch = build_batch(
            [(b"key-%d" % i, b"x" * 100) for i in range(args.records)], timestamp=int(time.time() * 1000)
        )
        frame = produce_frame("raw", batch, partitions=args.partitions)
        per_request = []
        for run in range(args.runs):
            warmup = 2000 if run == 0 else 0  # untimed, before the first run's clock starts
            elapsed, cpu = timed_run(bootstrap, proc.pid, frame, warmup, args.requests, args.in_flight)
            per_request.append(cpu / 100 * elapsed / args.requests * 1e6)
            print(
                f"{args.requests / elapsed:,.0f} requests/s, broker CPU {cpu:.0f}%: {per_request[-1]:.1f} us a request"
            )
        median = statistics.median(per_request)
        print(
            f"{len(frame):,} B requests of {args.records} records to each of {args.partitions} partition(s): "
            f"median {median:.1f} us of broker CPU a request, {median / args.partitions:.1f} us a partition"
        )
    finally:
        stop_broker(proc)


if __name__ == "__main__":
    main()
