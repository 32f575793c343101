"""Raw pipelined Produce requests, shared by the benchmarks that drive a broker without a
client library (codecs.py, security.py). Run alone, it measures the broker's CPU per
Produce request, the per-request cost with no client library beside it:

    .venv-test/bin/python benchmarks/raw_produce.py --records 10 --requests 20000

and, under the same client in the same run (``--against``, runs alternating), the CPU per
request of two references: librdkafka's mock cluster (``mock_cluster.py``) and the least a
Python server can do per request (``floor_server.py``: a file write and a fixed answer,
nothing decoded). The ratios say how far brokkr is from the mock, and how much of the
mock's cost any Python server pays before doing any of Kafka's work.

``--in-process`` skips the sockets: a broker in this process answers the same frame
through ``handle_frame_with_throttle`` (the dispatcher and everything after it), timed by
this process's CPU clock. Its runs mostly agree within a few percent where the socket
figures spread by 10-20%, so it is the one to compare two checkouts with.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from brokkr.core.broker import Broker
from brokkr.core.context import ANONYMOUS, ConnectionInfo
from brokkr.core.dispatch import handle_frame_with_throttle
from brokkr.core.errors import ErrorCode
from brokkr.core.protocol.frames import decode_response, encode_request, request_spec
from brokkr.core.protocol.records import build_batch
from brokkr.core.testing import RawClient
from mock_cluster import MockCluster
from produce import cpu_seconds, create_topic, free_port, start_broker, stop_broker, wait_listening

PRODUCE = 0
PRODUCE_VERSION = 9
RUN_TIMEOUT_S = 120.0
TARGETS = ("brokkr", "mock", "floor")
FLOOR_SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "floor_server.py")


def produce_frame(
    topic: str, batch: bytes, client_id: str = "brokkr-bench", partitions: int = 1, first: int = 0
) -> bytes:
    """One Produce v9 request (acks=1) of ``batch`` to each of partitions
    first..first+partitions-1 of ``topic``."""
    spec = request_spec(PRODUCE)
    data = [spec.struct("PartitionProduceData")(index=first + i, records=batch) for i in range(partitions)]
    topic_data = spec.struct("TopicProduceData")(name=topic, partition_data=data)
    body = spec.cls(acks=1, timeout_ms=30000, topic_data=[topic_data])
    return encode_request(PRODUCE, PRODUCE_VERSION, 1, client_id, body)


def timed_run(bootstrap: str, pid: int, frame: bytes, warmup: int, requests: int, in_flight: int, connections: int = 1):
    """(seconds, broker CPU % of one core or None) for ``requests`` pipelined sends of
    ``frame``, after ``warmup`` untimed ones, shared out over ``connections`` connections,
    each from a thread of its own with up to ``in_flight`` unanswered."""
    with contextlib.ExitStack() as stack, ThreadPoolExecutor(connections) as pool:
        clients = [stack.enter_context(RawClient(bootstrap, timeout=RUN_TIMEOUT_S)) for _ in range(connections)]

        def send_all(n: int) -> None:
            shares = [n // connections + (i < n % connections) for i in range(connections)]
            list(pool.map(send_requests, clients, [frame] * connections, shares, [in_flight] * connections))

        send_all(warmup)
        cpu_before = cpu_seconds(pid)
        start = time.perf_counter()
        send_all(requests)
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


async def in_process_runs(log_dir: str, partitions: int, frames: list[bytes], requests: int, runs: int) -> list[float]:
    """Microseconds of this process's CPU per request, one figure a run, answering
    ``frames`` in turn through the dispatcher of a broker in this process (its built-in
    plugins only, as the benchmarks run ``brokkr serve``; a topic of ``partitions``),
    after 2000 untimed requests."""
    broker = Broker({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": log_dir}, entry_points=False)
    await broker.start()
    try:
        broker.create_topic("raw", partitions)
        conn = ConnectionInfo("raw-1", "PLAINTEXT", "PLAINTEXT", "127.0.0.1", 0)
        bodies = [memoryview(frame)[4:] for frame in frames]  # the size prefix is the channel's
        for i in range(max(2000, len(bodies))):
            await handle_frame_with_throttle(broker, conn, ANONYMOUS, bodies[i % len(bodies)])
        figures = []
        for _ in range(runs):
            start = time.process_time()
            for i in range(requests):
                response, _ = await handle_frame_with_throttle(broker, conn, ANONYMOUS, bodies[i % len(bodies)])
            figures.append((time.process_time() - start) / requests * 1e6)
        _, answer = decode_response(PRODUCE, PRODUCE_VERSION, memoryview(response)[4:])
        failed = [p for t in answer.responses for p in t.partition_responses if p.error_code]
        if failed:
            raise RuntimeError(f"produce failed: {ErrorCode(failed[0].error_code).name}: {failed[0].error_message}")
        return figures
    finally:
        await broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description="Broker CPU per pipelined Produce request (brokkr serve, acks=1).")
    parser.add_argument("--records", type=int, default=10, help="records of 100 B per partition (10)")
    parser.add_argument("--partitions", type=int, default=1, help="partitions each request writes to (1)")
    parser.add_argument("--requests", type=int, default=20000, help="timed requests per run (20000)")
    parser.add_argument("--in-flight", type=int, default=20, help="requests sent ahead of their answers (20)")
    parser.add_argument(
        "--connections",
        type=int,
        default=1,
        help="connections sharing the requests, each with --in-flight unanswered (1); with --in-flight 1, many "
        "keep the broker busy with requests that each arrive alone, as many producers do",
    )
    parser.add_argument("--runs", type=int, default=3, help="timed runs; their median is reported (3)")
    parser.add_argument("--log-dirs", default=None, help="segment files here (default: a new temporary directory)")
    parser.add_argument(
        "--against",
        help="references run under the same client, runs alternating: mock (librdkafka's mock cluster), floor "
        "(floor_server.py, the least a Python server does per request: one partition a request only), or none "
        "(default: mock,floor; mock with --partitions)",
    )
    parser.add_argument(
        "--in-process", action="store_true", help="no sockets: this process's CPU per request through the dispatcher"
    )
    parser.add_argument(
        "--spread",
        type=int,
        default=0,
        help="with --in-process: requests take turns over this many partitions, each to its own (as librdkafka "
        "sends a topic of many partitions)",
    )
    args = parser.parse_args()
    if args.spread and (not args.in_process or args.partitions != 1):
        parser.error("--spread needs --in-process, and one partition a request")
    if args.connections < 1 or (args.connections > 1 and args.in_process):
        parser.error("--connections needs a positive count, and sockets (not --in-process)")
    if args.against is None:
        args.against = "none" if args.in_process else "mock,floor" if args.partitions == 1 else "mock"
    args.against = [] if args.against == "none" else args.against.split(",")
    if any(t not in TARGETS[1:] for t in args.against):
        parser.error(f"--against takes mock, floor, both (comma-separated) or none, not {','.join(args.against)}")
    if args.against and args.in_process:
        parser.error("--against needs sockets (not --in-process)")
    if args.partitions != 1 and "floor" in args.against:
        parser.error("the floor server answers one partition a request: --against mock with --partitions")
    batch = build_batch([(b"key-%d" % i, b"x" * 100) for i in range(args.records)], timestamp=int(time.time() * 1000))
    if args.spread:
        frames = [produce_frame("raw", batch, first=i) for i in range(args.spread)]
        described = f"{len(frames[0]):,} B requests of {args.records} records, in turn to {args.spread} partitions"
    else:
        frames = [produce_frame("raw", batch, partitions=args.partitions)]
        described = f"{len(frames[0]):,} B requests of {args.records} records to each of {args.partitions} partition(s)"
    if args.log_dirs:
        run(args, frames, described, args.log_dirs)
    else:
        with tempfile.TemporaryDirectory(prefix="brokkr-raw-") as log_dir:  # megabytes a run: not left behind
            run(args, frames, described, log_dir)


def run(args, frames: list[bytes], described: str, log_dir: str) -> None:
    if args.in_process:
        topic_partitions = args.spread or args.partitions
        runs = asyncio.run(in_process_runs(log_dir, topic_partitions, frames, args.requests, args.runs))
        median = statistics.median(runs)
        print(f"in process, us a request: {', '.join(f'{r:.1f}' for r in runs)}")
        print(f"{described}: median {median:.1f} us a request, {median / args.partitions:.1f} us a partition")
        return
    targets = ["brokkr", *args.against]
    per_request: dict[str, list[float]] = {t: [] for t in targets}
    with contextlib.ExitStack() as stack:
        running = {t: stack.enter_context(started(t, log_dir, args.partitions)) for t in targets}
        for round_ in range(args.runs):
            order = targets if round_ % 2 == 0 else targets[::-1]  # alternating, as suite.py does
            for target in order:
                bootstrap, pid = running[target]
                warmup = 2000 if round_ == 0 else 0  # untimed, before the target's first timed run
                elapsed, cpu = timed_run(
                    bootstrap, pid, frames[0], warmup, args.requests, args.in_flight, args.connections
                )
                per_request[target].append(cpu / 100 * elapsed / args.requests * 1e6)
                print(
                    f"{target}: {args.requests / elapsed:,.0f} requests/s, CPU {cpu:.0f}%: "
                    f"{per_request[target][-1]:.1f} us a request"
                )
    medians = {t: statistics.median(v) for t, v in per_request.items()}
    print(f"{described}: median CPU a request (us), of {args.runs} alternating run(s)")
    for target in targets:
        ratio = "" if target == "brokkr" else f"   brokkr/{target} {medians['brokkr'] / medians[target]:.2f}"
        print(f"  {target:<7}{medians[target]:8.1f} us, {medians[target] / args.partitions:.1f} a partition{ratio}")


@contextlib.contextmanager
def started(target: str, log_dir: str, partitions: int):
    """(bootstrap, pid) of a running ``target`` with topic ``raw`` of ``partitions``
    partitions; stopped on exit."""
    if target == "mock":
        with MockCluster() as mock:
            mock.create_topic("raw", partitions)
            yield mock.bootstrap, mock.pid
        return
    port = free_port()
    if target == "brokkr":
        proc = start_broker(port, log_dir, None)
    else:
        proc = subprocess.Popen([sys.executable, FLOOR_SERVER, str(port), os.path.join(log_dir, "floor.log")])
        wait_listening(proc, port, FLOOR_SERVER)
    try:
        bootstrap = f"127.0.0.1:{port}"
        if target == "brokkr":
            create_topic(bootstrap, "raw", partitions=partitions)
        yield bootstrap, proc.pid
    finally:
        stop_broker(proc)


if __name__ == "__main__":
    main()
