"""Produce throughput and latency: brokkr against librdkafka's built-in mock cluster.

A confluent-kafka (librdkafka) Producer in this process sends N keyed records of a fixed
value size to one partition of one topic, first to a real brokkr broker started as a
subprocess, then to librdkafka's in-process mock cluster (``test.mock.num.brokers=1``).
For each target it reports records/s, MB/s (key + value bytes over the wall time from the
first produce() to the end of flush()) and the p50/p99 latency from produce() to the
delivery callback. A short warm-up (connection, metadata, first batches) is excluded.

Why ratios: absolute numbers from a shared, noisy machine (CI runners, laptops, cloud
VMs with neighbours) swing by tens of percent from run to run, so they cannot be compared
across machines or days. The mock cluster is a fixed reference that runs the same client
code on the same machine at the same time; brokkr/mock ratios cancel most of that noise
and are what to track. ``--repeat`` interleaves the targets and reports medians.

    /work/venv/bin/python benchmarks/produce.py [--records N] [--acks all] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

WARMUP_RECORDS = 2000
STARTUP_TIMEOUT_S = 20.0
RUN_TIMEOUT_S = 60.0  # per measured run, produce plus flush
RAW_TIMING_S = 0.3  # per call timed by mb_per_s
METRICS = ("records_per_s", "mb_per_s", "p50_ms", "p99_ms")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def installed_plugins() -> str:
    """The entry-point plugins installed beside brokkr (the test venv has the examples):
    benchmarks block them, to measure brokkr as ``pip install brokkr`` gets it."""
    from importlib.metadata import entry_points

    return ",".join(sorted(ep.name for ep in entry_points(group="brokkr")))


def start_broker(port: int, data_dir: str, stderr, overrides: dict[str, str] | None = None) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "brokkr.core.cli", "--log-level", "WARNING", "serve"]
    cmd += ["--override", f"listeners=PLAINTEXT://127.0.0.1:{port}", "--override", f"log.dirs={data_dir}"]
    overrides = {"brokkr.plugins.disabled": installed_plugins(), **(overrides or {})}
    for key, value in overrides.items():
        cmd += ["--override", f"{key}={value}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=stderr)
    wait_listening(proc, port, "broker")
    return proc


def wait_listening(proc: subprocess.Popen, port: int, what: str) -> None:
    """Return once ``proc`` accepts connections on ``port``; stop it and raise if it exits
    or does not within STARTUP_TIMEOUT_S."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited during startup with code {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    stop_broker(proc)
    raise RuntimeError(f"{what} did not accept connections within {STARTUP_TIMEOUT_S:.0f}s")


def stop_broker(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a process, from Linux's /proc (None elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def minor_faults(pid: int) -> int | None:
    """Minor page faults of a process so far (its threads included), from /proc (None elsewhere).
    On a VM each costs microseconds: fresh memory for every large buffer shows up here."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rpartition(")")[2].split()[7])
    except (OSError, ValueError, IndexError):
        return None


def descendants_cpu_seconds(pid: int) -> float | None:
    """CPU seconds of a process's descendants (brokkr's offload workers): the live ones from
    /proc, plus the children it has already waited for (its cutime + cstime). None off Linux."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rpartition(")")[2].split()[1])
            except (OSError, ValueError, IndexError):
                continue  # ended meanwhile
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
        total = (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier and child not in found}
        found |= frontier
    return total + sum(cpu_seconds(child) or 0.0 for child in found)


def tree_cpu_seconds(pid: int) -> tuple[float, float] | None:
    """(the process's own, its descendants') CPU seconds; None off Linux."""
    own, descendants = cpu_seconds(pid), descendants_cpu_seconds(pid)
    return None if own is None or descendants is None else (own, descendants)


class CpuMeter:
    """A broker's CPU over a timed stretch, in percent of one core: its process tree (brokkr
    and its offload workers) and the workers alone; the broker process's minor page faults
    a second; and this process's own CPU (every thread: the clients where they run here).
    None values off Linux."""

    def __init__(self, pid: int | None):
        self.pid = pid
        self.before = tree_cpu_seconds(pid) if pid else None
        self.faults_before = minor_faults(pid) if pid else None
        self.own_before = time.process_time()
        self.t0 = time.perf_counter()

    def stop(self) -> dict:
        elapsed = time.perf_counter() - self.t0
        result = {
            "seconds": elapsed,
            "broker_cpu_pct": None,
            "workers_cpu_pct": None,
            "broker_faults_per_s": None,
            "own_cpu_pct": 100 * (time.process_time() - self.own_before) / elapsed,
        }
        after = tree_cpu_seconds(self.pid) if self.pid else None
        faults = minor_faults(self.pid) if self.pid else None
        if self.before is None or after is None or faults is None:
            return result
        broker, workers = (100 * (a - b) / elapsed for a, b in zip(after, self.before))
        result.update(
            broker_cpu_pct=broker + workers,
            workers_cpu_pct=workers,
            broker_faults_per_s=(faults - self.faults_before) / elapsed,
        )
        return result


def create_topic(bootstrap: str, topic: str, config: dict[str, str] | None = None, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # keep a reference: the futures need it alive
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1, config=config or {})],
        operation_timeout=10,
        request_timeout=15,
    )
    futures[topic].result(timeout=15)


def event_records(count: int, value_size: int, seed: int = 7) -> list[tuple[bytes, bytes]]:
    """Keyed records whose values repeat words and fields, as JSON-ish events do."""
    rng = random.Random(seed)
    words = [b"user", b"order", b"click", b"view", b"cart", b"price", b"region", b"session", b"status", b"item"]
    records = []
    for i in range(count):
        value = bytearray()
        while len(value) < value_size:
            value += b'"%s":%d,' % (rng.choice(words), rng.randrange(100_000))
        records.append((b"key-%d" % i, bytes(value[:value_size])))
    return records


def mb_per_s(call, size: int) -> float:
    """MB/s of ``call``, which handles ``size`` bytes, called over and over for
    RAW_TIMING_S (a codec's or a checksum's raw speed)."""
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < RAW_TIMING_S:
        call()
        n += 1
    return n * size / (time.perf_counter() - start) / 1e6


def record_values(kind: str, value_size: int) -> list[bytes]:
    """The values a run cycles through: one filler value, or 1000 JSON-ish events (which
    compress as real data does, where a filler would compress to almost nothing)."""
    if kind == "events":
        return [value for _, value in event_records(1000, value_size)]
    return [b"x" * value_size]


def new_producer(client_config: dict, args: argparse.Namespace, **overrides) -> Producer:
    """librdkafka's defaults but for what args sets (acks, linger.ms, batch.size, compression)."""
    return Producer(
        {
            **client_config,
            "acks": args.acks,
            "linger.ms": args.linger_ms,
            "batch.size": args.batch_size,
            "compression.type": args.compression,
            "enable.idempotence": False,
            "log_level": 4,  # warnings and worse; hides the mock cluster's startup notice
            **overrides,
        }
    )


def produce_batch(
    producer: Producer,
    topic: str,
    n: int,
    values: list[bytes],
    latencies: list,
    errors: list,
    partitions: int = 1,
) -> None:
    """Produce n records round robin over the first `partitions` partitions, the values in
    turn, recording each one's produce->delivery latency."""

    def delivered(t0: float, err, msg) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            latencies.append(time.perf_counter() - t0)

    deadline = time.monotonic() + RUN_TIMEOUT_S
    count = len(values)
    for i in range(n):
        key, value, partition = b"key-%d" % i, values[i % count], i % partitions
        while True:
            try:
                producer.produce(
                    topic, value, key, partition=partition, on_delivery=partial(delivered, time.perf_counter())
                )
                break
            except BufferError:  # the client's queue is full: serve callbacks until it drains
                producer.poll(0.01)
                if time.monotonic() > deadline:
                    producer.purge()
                    raise TimeoutError(f"producer queue stayed full for {RUN_TIMEOUT_S:.0f}s") from None
        if i % 256 == 0:
            producer.poll(0)
    remaining = producer.flush(max(0.0, deadline - time.monotonic()))
    if remaining:
        producer.purge()  # so that destroying the producer does not wait for them
        raise TimeoutError(f"{remaining} record(s) still undelivered after {RUN_TIMEOUT_S:.0f}s")


def run_once(target: str, client_config: dict, topic: str, args: argparse.Namespace, pid: int | None) -> dict:
    """One warm-up plus one measured run; pid is the broker process whose CPU time (its own
    and its descendants') to report."""
    producer = new_producer(client_config, args)
    values = record_values(args.values, args.value_size)
    errors: list[str] = []
    produce_batch(producer, topic, WARMUP_RECORDS, values, [], errors, args.partitions)
    latencies: list[float] = []
    meter = CpuMeter(pid)
    produce_batch(producer, topic, args.records, values, latencies, errors, args.partitions)
    cpu = meter.stop()
    elapsed = cpu["seconds"]
    payload = sum(len(b"key-%d" % i) + len(values[i % len(values)]) for i in range(args.records))
    latencies.sort()
    return {
        "target": target,
        "records_per_s": args.records / elapsed,
        "mb_per_s": payload / elapsed / 1e6,
        "p50_ms": percentile_ms(latencies, 0.50),
        "p99_ms": percentile_ms(latencies, 0.99),
        **cpu,
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
    }


def percentile_ms(ordered: list[float], q: float) -> float:
    """The q-quantile (nearest rank) of sorted latencies in seconds, in milliseconds."""
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def median_of(runs: list[dict]) -> dict:
    out = {m: statistics.median(r[m] for r in runs) for m in METRICS}
    for key in ("broker_cpu_pct", "workers_cpu_pct"):
        cpu = [r[key] for r in runs if r.get(key) is not None]
        out[key] = statistics.median(cpu) if cpu else None
    out["errors"] = sum(r["errors"] for r in runs)
    return out


def print_table(summary: dict, ratios: dict, args: argparse.Namespace, out) -> None:
    print(
        f"\nproduce: {args.records} records x {args.value_size} B values, acks={args.acks}, "
        f"linger.ms={args.linger_ms}, batch.size={args.batch_size}, compression.type={args.compression}, "
        f"{args.values} values, median of {args.repeat} run(s)",
        file=out,
    )
    header = f"{'target':<14}{'records/s':>12}{'MB/s':>9}{'p50 ms':>10}{'p99 ms':>10}{'broker CPU':>12}{'errors':>8}"
    print(header, file=out)
    print("-" * len(header), file=out)
    for target, m in summary.items():
        cpu = "-" if m["broker_cpu_pct"] is None else f"{m['broker_cpu_pct']:.0f}%"
        print(
            f"{target:<14}{m['records_per_s']:>12,.0f}{m['mb_per_s']:>9.2f}{m['p50_ms']:>10.2f}"
            f"{m['p99_ms']:>10.2f}{cpu:>12}{m['errors']:>8}",
            file=out,
        )
    print(
        f"{'brokkr/mock':<14}{ratios['records_per_s']:>12.3f}{ratios['mb_per_s']:>9.3f}"
        f"{ratios['p50_ms']:>10.2f}{ratios['p99_ms']:>10.2f}",
        file=out,
    )
    print(
        "(throughput ratios: higher is better; latency ratios: lower is better, 1.0 = as fast as the mock;\n"
        " broker CPU is of one core: well under 100% means the client, not brokkr, set the pace)",
        file=out,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000, help="measured records per run (default 200000)")
    parser.add_argument("--value-size", type=int, default=100, help="value bytes per record (default 100)")
    parser.add_argument("--acks", default="1", choices=["0", "1", "all", "-1"], help="producer acks (default 1)")
    parser.add_argument("--linger-ms", type=float, default=5, help="producer linger.ms (default 5)")
    parser.add_argument("--batch-size", type=int, default=1_000_000, help="producer batch.size (default 1000000)")
    parser.add_argument(
        "--compression",
        default="none",
        choices=["none", "gzip", "snappy", "lz4", "zstd"],
        help="producer compression.type",
    )
    parser.add_argument(
        "--values",
        default="filler",
        choices=["filler", "events"],
        help="'x' * size, or JSON-ish events (default filler)",
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs per target; medians are reported (default 3)")
    parser.set_defaults(partitions=1)  # the in-process mock auto-creates its topics: partition 0 only
    parser.add_argument(
        "--json", metavar="PATH", help="also write the results as JSON to PATH ('-': stdout, table to stderr)"
    )
    args = parser.parse_args(argv)

    runs: dict[str, list[dict]] = {"brokkr": [], "mock": []}
    broker_log = tempfile.TemporaryFile(mode="w+")
    broker = None
    with tempfile.TemporaryDirectory(prefix="brokkr-bench-") as data_dir:
        port = free_port()
        bootstrap = f"127.0.0.1:{port}"
        try:
            broker = start_broker(port, data_dir, broker_log)
            for r in range(args.repeat):  # interleaved, so slow drifts hit both targets alike
                topic = f"bench-{os.getpid()}-{r}"
                create_topic(bootstrap, topic)
                runs["brokkr"].append(run_once("brokkr", {"bootstrap.servers": bootstrap}, topic, args, broker.pid))
                runs["mock"].append(run_once("mock", {"test.mock.num.brokers": 1}, topic, args, None))
                if broker.poll() is not None:
                    raise RuntimeError(f"broker exited with code {broker.returncode} during the benchmark")
        except (KafkaException, TimeoutError, RuntimeError) as exc:
            print(f"benchmark failed: {exc}", file=sys.stderr)
            return 1
        finally:
            if broker is not None:
                stop_broker(broker)
            broker_log.seek(0)
            broker_stderr = broker_log.read()
            broker_log.close()
            if broker_stderr.strip():
                code = broker.returncode if broker is not None else None
                print(f"--- broker stderr (exit code {code}) ---\n{broker_stderr.rstrip()}", file=sys.stderr)

    summary = {target: median_of(rs) for target, rs in runs.items()}
    ratios = {m: summary["brokkr"][m] / summary["mock"][m] for m in METRICS}
    print_table(summary, ratios, args, sys.stderr if args.json == "-" else sys.stdout)  # keep stdout pure JSON
    if args.json:
        doc = {
            "config": vars(args),
            "runs": runs,
            "median": summary,
            "ratio_brokkr_over_mock": ratios,
            "broker_stderr": broker_stderr,
        }
        text = json.dumps(doc, indent=2, default=str)
        if args.json == "-":
            print(text)
        else:
            with open(args.json, "w") as f:
                f.write(text + "\n")
    return 0 if all(m["errors"] == 0 for m in summary.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
