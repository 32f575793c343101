"""The performance issue's evidence: brokkr against librdkafka's mock cluster, every scenario
in one run, one table of ratios and goals.

Scenarios (details and the reasons for them in benchmarks/README.md):

- produce-1k-1m: 1 KB records, 1 MB batches;   - produce-100b-16k: 100 B records, 16 KB batches;
- produce-lz4, produce-zstd: 1 KB JSON-ish records, 1 MB batches, compressed by the producer;
- consume-100b: a fresh consumer reads 100 B records from the beginning of 8 partitions;
- latency-half-load: p50/p99 produce latency at half the lower of the two produce-100b-16k rates;
- partitions-1000: 100 B records round robin over a 1000-partition topic;
- connections-500: 500 producers (in 4 client processes) connected at once, all producing.

Both targets run in processes of their own, reached over loopback TCP from the same clients:
brokkr started as produce.py starts it, the mock through mock_cluster.py. Every scenario runs
``--repeat`` rounds, brokkr and the mock alternating (ABBA), and reports medians; the ratio is
brokkr/mock. Broker CPU is measured over each timed stretch, for brokkr's whole process tree
(its offload workers decompress and walk large compressed batches on other cores), and so
is the clients' own CPU: a client near all it may use is what sets the pace.

With ``--pin`` the targets share one CPU and the clients have the others, as a broker on a
machine of its own: the ratios then say whether a target keeps up with its clients, where
by default (every process on every CPU) they also say how much CPU it takes from them.

    .venv-test/bin/python benchmarks/suite.py [--repeat N] [--only NAME[,NAME]] [--quick] [--pin] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import queue
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

import attrs
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition
from mock_cluster import MockCluster  # benchmarks/ is the script's directory
from produce import (
    WARMUP_RECORDS,
    CpuMeter,
    cpu_seconds,
    create_topic,
    free_port,
    new_producer,
    produce_batch,
    record_values,
    run_once,
    start_broker,
    stop_broker,
)
from replication import Fail, paced_latency

RUN_TIMEOUT_S = 120.0  # any one wait of a run
CONNECT_TIMEOUT_S = 90.0  # for all producers of the connections scenario to connect
CLIENT_PROCESSES = 4  # of the connections scenario
CONNECT_GROUP = 25  # producers of a client process connecting at once


class BrokerDied(Exception):
    """A target's process ended: nothing after it can be measured."""


@attrs.define
class Target:
    """One side of the comparison: where it listens, which process to measure, how to
    make a topic, and the topics prepared once and reused across rounds."""

    name: str
    bootstrap: str
    pid: int
    make_topic: Callable[[str, int], None]  # (name, partitions)
    alive: Callable[[], bool]
    kept: dict[str, str] = attrs.Factory(dict)
    made: int = 0

    @property
    def client(self) -> dict:
        return {"bootstrap.servers": self.bootstrap}

    def new_topic(self, label: str, partitions: int = 1) -> str:
        self.made += 1
        topic = f"{label}-{self.made}"
        self.make_topic(topic, partitions)
        return topic


def produce_settings(
    records: int,
    value_size: int,
    batch_size: int,
    compression: str = "none",
    values: str = "filler",
    partitions: int = 1,
) -> argparse.Namespace:
    """produce.py's options for one scenario: acks=1 and linger.ms=5 as there, librdkafka's
    defaults for everything not named."""
    return argparse.Namespace(
        records=records,
        value_size=value_size,
        acks="1",
        linger_ms=5,
        batch_size=batch_size,
        compression=compression,
        values=values,
        partitions=partitions,
    )


# -- the scenarios -----------------------------------------------------------------------


def produce_scenario(settings: Callable[[argparse.Namespace], argparse.Namespace], label: str, partitions: int = 1):
    """A produce throughput run through produce.py's run_once; a 1-partition topic is fresh
    for every run, a many-partition one is made once per target and reused."""

    def run(suite: Suite, target: Target, round_: int) -> dict:
        if partitions == 1:
            topic = target.new_topic(label)
        elif label not in target.kept:
            target.kept[label] = topic = target.new_topic(label, partitions)
        else:
            topic = target.kept[label]
        result = run_once(target.name, target.client, topic, settings(suite.opts), target.pid)
        if result["errors"]:
            raise Fail(f"{result['errors']} delivery error(s), first: {result['first_error']}")
        return result

    return run


def consume(suite: Suite, target: Target, round_: int) -> dict:
    """A fresh consumer, connected and with the topic's metadata before the clock starts,
    assigned every partition from the beginning; timed until it has read every record."""
    partitions, per_partition = suite.consume_shape()
    total = partitions * per_partition
    topic = target.kept.get("consume") or fill_consume_topic(target, partitions, per_partition)
    consumer = Consumer(
        {
            **target.client,
            "group.id": "brokkr-bench",  # required by the client; nothing is committed
            "enable.auto.commit": False,
            # The whole data set fits the client's prefetch queue: with the default 100,000,
            # a target that fills it faster than Python drains it is paused for
            # fetch.queue.backoff.ms (1 s), which measured the client, not the broker.
            "queued.min.messages": 1_000_000,
            "log_level": 4,
        }
    )
    try:
        consumer.list_topics(topic, timeout=10)
        meter = CpuMeter(target.pid)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        read, deadline = 0, time.monotonic() + RUN_TIMEOUT_S
        while read < total:
            if time.monotonic() > deadline:
                raise Fail(f"read {read} of {total} records in {RUN_TIMEOUT_S:.0f}s")
            batch = consumer.consume(10_000, timeout=1.0)
            bad = [m.error() for m in batch if m.error()]
            if bad:
                raise Fail(f"consume error: {bad[0]}")
            read += len(batch)
        cpu = meter.stop()
        extra = consumer.consume(10_000, timeout=0.2)  # more than was written would be duplicates
    finally:
        consumer.close()
    if read + len(extra) != total:
        raise Fail(f"read {read + len(extra)} records, {total} were written")
    payload = sum(len(b"key-%d" % i) + 100 for i in range(total))
    return {"records_per_s": total / cpu["seconds"], "mb_per_s": payload / cpu["seconds"] / 1e6, **cpu}


def fill_consume_topic(target: Target, partitions: int, per_partition: int) -> str:
    """Write the consume scenario's records once per target, and check that all of them are
    there (the mock keeps about 5 MB per partition and drops the oldest beyond that).

    The batches are large (linger.ms=1000; about 600 KB): the mock answers a Fetch with one
    batch per partition, brokkr with up to max.partition.fetch.bytes (1 MiB) of them, so with
    large batches the mock's answer carries most of what brokkr's does and the comparison
    hinges less on how the producer happened to cut its batches."""
    topic = target.new_topic("consume", partitions)
    settings = produce_settings(partitions * per_partition, 100, 1_000_000, partitions=partitions)
    settings.linger_ms = 1000
    producer, errors = new_producer(target.client, settings), []
    produce_batch(producer, topic, settings.records, record_values("filler", 100), [], errors, partitions)
    if errors:
        raise Fail(f"filling {topic}: {len(errors)} delivery error(s), first: {errors[0]}")
    consumer = Consumer({**target.client, "group.id": "brokkr-bench", "log_level": 4})
    try:
        for p in range(partitions):
            marks = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if marks != (0, per_partition):
                raise Fail(f"{topic}[{p}] holds offsets {marks}, not (0, {per_partition}): sized past the mock's log")
    finally:
        consumer.close()
    target.kept["consume"] = topic
    return topic


def latency(suite: Suite, target: Target, round_: int) -> dict:
    """The produce-100b-16k producer, warmed up, paced at half load (replication.py's Pacer)."""
    settings = produce_settings(WARMUP_RECORDS, 100, 16384)
    topic = target.new_topic("latency")
    producer, errors = new_producer(target.client, settings), []
    produce_batch(producer, topic, WARMUP_RECORDS, record_values("filler", 100), [], errors)
    if errors:
        raise Fail(f"warm-up: {len(errors)} delivery error(s), first: {errors[0]}")
    meter = CpuMeter(target.pid)
    result = paced_latency(producer, topic, suite.half_load(), suite.opts.latency_seconds, b"x" * 100)
    return {**result, **meter.stop()}


def connections(suite: Suite, target: Target, round_: int) -> dict:
    """`--connections` producers split over CLIENT_PROCESSES spawned processes. Each producer
    delivers one record first (so it is connected, with metadata); the connections the
    target holds are counted; then, at one signal, every producer sends its records. Timed
    from the signal to the last delivery in any process."""
    n, each = suite.opts.connections, suite.opts.scaled(400)
    topic = target.new_topic("connections")
    ctx = multiprocessing.get_context("spawn")  # no fork of a process running librdkafka threads
    reports, go = ctx.Queue(), ctx.Event()
    shares = [n // CLIENT_PROCESSES + (i < n % CLIENT_PROCESSES) for i in range(CLIENT_PROCESSES)]
    procs = [
        ctx.Process(target=connection_client, args=(target.bootstrap, topic, share, each, reports, go), daemon=True)
        for share in shares
        if share
    ]
    try:
        t0 = time.perf_counter()
        for proc in procs:
            proc.start()
        collect(reports, len(procs), "ready", CONNECT_TIMEOUT_S)
        connect_s = time.perf_counter() - t0
        held = established_connections(int(target.bootstrap.rpartition(":")[2]))
        if held < n:
            raise Fail(f"{target.name} holds {held} connections, {n} producers connected")
        meter = CpuMeter(target.pid)
        clients_before = clients_cpu_seconds(procs)
        start = time.monotonic()
        go.set()
        done = collect(reports, len(procs), "done", RUN_TIMEOUT_S)
        cpu = meter.stop()
        clients = clients_cpu_seconds(procs)
        if None in (clients, clients_before):
            cpu["own_cpu_pct"] = None
        else:
            cpu["own_cpu_pct"] = 100 * (clients - clients_before) / cpu["seconds"]
        for proc in procs:
            proc.join(timeout=30)
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5)
    delivered = sum(d["delivered"] for d in done)
    if delivered != n * each:
        raise Fail(f"{delivered} of {n * each} records delivered")
    elapsed = max(d["end"] for d in done) - start
    return {
        "records_per_s": delivered / elapsed,
        "connections": held,
        "connect_s": connect_s,
        **cpu,
        "seconds": elapsed,
    }


def clients_cpu_seconds(procs) -> float | None:
    """The CPU seconds of the client processes so far (None off Linux)."""
    seconds = [cpu_seconds(proc.pid) for proc in procs]
    return None if None in seconds else sum(seconds)


def collect(reports, count: int, phase: str, timeout: float) -> list[dict]:
    deadline, out = time.monotonic() + timeout, []
    while len(out) < count:
        try:
            kind, info = reports.get(timeout=max(0.1, deadline - time.monotonic()))
        except queue.Empty:
            raise Fail(f"{len(out)} of {count} client processes {phase} after {timeout:.0f}s") from None
        if kind == "error":
            raise Fail(f"client process: {info}")
        out.append(info)
    return out


def connection_client(bootstrap: str, topic: str, producers: int, each: int, reports, go) -> None:
    """One client process of the connections scenario (runs in a spawned child)."""
    settings = produce_settings(each, 100, 1_000_000)
    errors, delivered = [], 0

    def report(err, msg) -> None:
        nonlocal delivered
        if err is None:
            delivered += 1
        else:
            errors.append(str(err))

    clients, value = [], b"x" * 100
    try:
        deadline = time.monotonic() + CONNECT_TIMEOUT_S
        while len(clients) < producers:  # a few at a time: hundreds at once time out on the mock
            size = min(CONNECT_GROUP, producers - len(clients))
            group = [new_producer({"bootstrap.servers": bootstrap}, settings) for _ in range(size)]
            clients += group
            for p in group:
                p.produce(topic, value, b"hello", partition=0, on_delivery=report)
            for p in group:
                p.flush(max(0.0, deadline - time.monotonic()))
        if delivered != producers or errors:
            raise Fail(f"{delivered} of {producers} producers connected; errors: {errors[:1]}")
        reports.put(("ready", {"producers": producers}))
        if not go.wait(CONNECT_TIMEOUT_S):
            return
        delivered = 0
        for i in range(each):
            key = b"key-%d" % i
            for p in clients:
                p.produce(topic, value, key, partition=0, on_delivery=report)
            if i % 64 == 63:
                for p in clients:
                    p.poll(0)
        deadline = time.monotonic() + RUN_TIMEOUT_S
        for p in clients:  # each flush returns once that producer's records are acknowledged
            p.flush(max(0.0, deadline - time.monotonic()))
        end = time.monotonic()  # CLOCK_MONOTONIC: one clock for every process of the machine
        if errors:
            raise Fail(f"{len(errors)} delivery error(s), first: {errors[0]}")
        reports.put(("done", {"end": end, "delivered": delivered}))
    except Exception as exc:
        reports.put(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        for p in clients:
            p.purge()
            p.flush(0)


def established_connections(port: int) -> int:
    """Established TCP connections whose local port is `port` (the server's side), from
    Linux's /proc/net/tcp{,6}; -1 elsewhere."""
    count = 0
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(path) as f:
                next(f)
                for line in f:
                    local, _, state = line.split()[1:4]
                    count += state == "01" and int(local.rpartition(":")[2], 16) == port
        except OSError:
            return -1
    return count


@attrs.frozen
class Row:
    measure: str  # column text; {rate} is replaced by the latency scenario's rate
    key: str  # in each run's result
    goal: tuple[str, float] | None = None  # (">=" or "<=", bound) on brokkr/mock


@attrs.frozen
class Scenario:
    name: str
    run: Callable[[Suite, Target, int], dict]
    rows: tuple[Row, ...]
    needs: tuple[str, ...] = ()


THROUGHPUT = (Row("records/s", "records_per_s", (">=", 1.0)),)
SCENARIOS = {
    s.name: s
    for s in [
        Scenario(
            "produce-1k-1m",
            produce_scenario(lambda o: produce_settings(o.scaled(200_000), 1000, 1_000_000), "produce-1k"),
            THROUGHPUT,
        ),
        Scenario(
            "produce-100b-16k",
            produce_scenario(lambda o: produce_settings(o.scaled(400_000), 100, 16384), "produce-100b"),
            THROUGHPUT,
        ),
        Scenario(
            "produce-lz4",
            produce_scenario(lambda o: produce_settings(o.scaled(100_000), 1000, 1_000_000, "lz4", "events"), "lz4"),
            THROUGHPUT,
        ),
        Scenario(
            "produce-zstd",
            produce_scenario(lambda o: produce_settings(o.scaled(100_000), 1000, 1_000_000, "zstd", "events"), "zstd"),
            THROUGHPUT,
        ),
        Scenario("consume-100b", consume, THROUGHPUT),
        Scenario(
            "latency-half-load",
            latency,
            (Row("p50 ms at {rate}/s", "p50_ms"), Row("p99 ms at {rate}/s", "p99_ms", ("<=", 1.5))),
            needs=("produce-100b-16k",),
        ),
        Scenario(
            "partitions-1000",
            produce_scenario(
                lambda o: produce_settings(o.scaled(200_000), 100, 1_000_000, partitions=1000), "p1000", 1000
            ),
            THROUGHPUT,
        ),
        Scenario("connections-500", connections, THROUGHPUT),
    ]
}


# -- running and reporting -----------------------------------------------------------------


@attrs.define
class Suite:
    opts: argparse.Namespace
    runs: dict[str, dict[str, list[dict]]] = attrs.Factory(dict)
    failures: dict[str, str] = attrs.Factory(dict)

    def consume_shape(self) -> tuple[int, int]:
        """(partitions, records per partition): 30,000 records of 100 B are about 4.1 MB of
        batches, inside the mock's 5 MB per partition."""
        return (8, 30_000) if not self.opts.quick else (2, 10_000)

    def median(self, scenario: str, target: str, key: str) -> float:
        return statistics.median(r[key] for r in self.runs[scenario][target])

    def half_load(self) -> float:
        """Half the lower of the two targets' produce-100b-16k medians: one offered load that
        both can carry."""
        return 0.5 * min(self.median("produce-100b-16k", t, "records_per_s") for t in ("brokkr", "mock"))

    def run(self, scenario: Scenario, targets: dict[str, Target]) -> None:
        self.runs[scenario.name] = {name: [] for name in targets}
        failed = [need for need in scenario.needs if need in self.failures]
        if failed:
            self.failures[scenario.name] = f"needs {', '.join(failed)}, which failed"
            return
        for r in range(self.opts.repeat):
            order = ("brokkr", "mock") if r % 2 == 0 else ("mock", "brokkr")  # ABBA: drifts hit both alike
            for name in order:
                target = targets[name]
                try:
                    result = scenario.run(self, target, r)
                except (Fail, KafkaException, TimeoutError, RuntimeError) as exc:
                    if not target.alive():
                        raise BrokerDied(f"{name} exited during {scenario.name}") from exc
                    self.failures[scenario.name] = f"{name}, round {r + 1}: {exc}"
                    log(f"  {scenario.name} {name} round {r + 1} FAILED: {exc}")
                    return
                if not target.alive():
                    raise BrokerDied(f"{name} exited during {scenario.name}")
                self.runs[scenario.name][name].append(result)
                log(f"  {scenario.name} round {r + 1}/{self.opts.repeat} {name}: {describe(scenario, result)}")


def describe(scenario: Scenario, result: dict) -> str:
    figures = ", ".join(f"{row.key} {result[row.key]:,.2f}" for row in scenario.rows)
    if "connections" in result:
        figures += f" ({result['connections']} connections held, all connected in {result['connect_s']:.1f}s)"
    if "target_records_per_s" in result:
        figures += f" (paced at {result['target_records_per_s']:,.0f}/s, achieved {result['records_per_s']:,.0f}/s)"
    cpu = result.get("broker_cpu_pct")
    if cpu is not None:
        figures += (
            f", broker CPU {cpu:.0f}% (workers {result['workers_cpu_pct']:.0f}%), "
            f"{result['broker_faults_per_s']:,.0f} page faults/s"
        )
    if result.get("own_cpu_pct") is not None:
        figures += f", clients' CPU {result['own_cpu_pct']:.0f}%"
    return figures


def summarize(suite: Suite) -> list[dict]:
    rows = []
    for name, by_target in suite.runs.items():
        scenario = SCENARIOS[name]
        if name in suite.failures or not all(by_target.values()):
            rows.append({"scenario": name, "failed": suite.failures.get(name, "no runs")})
            continue
        for row in scenario.rows:
            brokkr, mock = (suite.median(name, t, row.key) for t in ("brokkr", "mock"))
            ratio = brokkr / mock if mock else float("nan")
            met = None
            if row.goal:
                op, bound = row.goal
                met = ratio >= bound if op == ">=" else ratio <= bound
            cpu = {
                f"{t}_{key}": statistics.median(v)
                if (v := [r[key] for r in by_target[t] if r.get(key) is not None])
                else None
                for t in ("brokkr", "mock")
                for key in ("broker_cpu_pct", "workers_cpu_pct", "own_cpu_pct")
            }
            rate = f"{suite.half_load():,.0f}" if "{rate}" in row.measure else ""
            rows.append(
                {
                    "scenario": name,
                    "measure": row.measure.format(rate=rate),
                    "brokkr": brokkr,
                    "mock": mock,
                    "ratio": ratio,
                    "goal": f"{row.goal[0]} {row.goal[1]}" if row.goal else None,
                    "met": met,
                    **cpu,
                }
            )
    return rows


def pin_cpus() -> tuple[set[int], set[int]]:
    """``--pin``'s (targets' CPUs, clients' CPUs): the last CPU this process may run on for
    the targets (they take turns, one measured at a time), every other one for the clients."""
    if not hasattr(os, "sched_setaffinity"):
        raise SystemExit("--pin needs CPU affinity (Linux's sched_setaffinity)")
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit(f"--pin needs at least 2 CPUs to run on; this process may use {len(cpus)}")
    return {cpus[-1]}, set(cpus[:-1])


def cpu_list(cpus: set[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))


def print_table(rows: list[dict], opts: argparse.Namespace, out) -> None:
    pinned = ""
    if opts.pin:
        pinned = f"; targets on CPU {cpu_list(opts.pinned[0])}, clients on CPU {cpu_list(opts.pinned[1])}"
    print(
        f"\nbrokkr vs librdkafka's mock cluster, median of {opts.repeat} alternating run(s) per target"
        f"{' (--quick)' if opts.quick else ''}{pinned}",
        file=out,
    )
    header = (
        f"{'scenario':<19}{'measure':<24}{'brokkr':>12}{'mock':>12}{'brokkr/mock':>12}  {'goal':<7}{'met':<9}"
        f"{'brokkr CPU (workers)':>21}{'mock CPU':>10}{'clients':>12}"
    )
    print(header, file=out)
    print("-" * len(header), file=out)
    for row in rows:
        if "failed" in row:
            print(f"{row['scenario']:<19}FAILED: {row['failed']}", file=out)
            continue
        met = "-" if row["met"] is None else ("met" if row["met"] else "not met")
        cpu = pct(row["brokkr_broker_cpu_pct"])
        if row["brokkr_workers_cpu_pct"] is not None:
            cpu += f" ({pct(row['brokkr_workers_cpu_pct'])})"
        print(
            f"{row['scenario']:<19}{row['measure']:<24}{row['brokkr']:>12,.2f}{row['mock']:>12,.2f}"
            f"{row['ratio']:>12.3f}  {row['goal'] or '-':<7}{met:<9}{cpu:>21}{pct(row['mock_broker_cpu_pct']):>10}"
            f"{pct(row['brokkr_own_cpu_pct']) + ' / ' + pct(row['mock_own_cpu_pct']):>12}",
            file=out,
        )
    print(
        "(CPU: of one core, over the timed stretch; brokkr's includes its offload worker processes,\n"
        " shown in brackets; clients: the clients' own, beside brokkr / beside the mock.\n"
        " Throughput ratios: higher is better; latency ratios: lower is better.)",
        file=out,
    )


#: A paced run that sent less than this share of its pace measured the client's backlog.
PACE_KEPT = 0.97


def behind_pace(suite: Suite) -> list[str]:
    """A warning per paced scenario in which the client fell behind its pace: its
    latencies then include the client's own backlog, not only the broker's answer."""
    warnings = []
    for name, by_target in suite.runs.items():
        runs = [r for results in by_target.values() for r in results if "target_records_per_s" in r]
        behind = [r for r in runs if r["records_per_s"] < PACE_KEPT * r["target_records_per_s"]]
        if behind:
            worst = min(behind, key=lambda r: r["records_per_s"] / r["target_records_per_s"])
            warnings.append(
                f"{name}: the client fell behind its pace in {len(behind)} of {len(runs)} runs (down to "
                f"{worst['records_per_s']:,.0f} of {worst['target_records_per_s']:,.0f}/s): those latencies include "
                "the client's backlog, not only the broker's answer"
            )
    return warnings


def pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}%"


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def selected(only: list[str] | None) -> list[Scenario]:
    if not only:
        return list(SCENARIOS.values())
    names = {n.strip() for item in only for n in item.split(",") if n.strip()}
    unknown = names - SCENARIOS.keys()
    if unknown:
        raise SystemExit(f"unknown scenario(s): {', '.join(sorted(unknown))}; known: {', '.join(SCENARIOS)}")
    for name in list(names):
        names |= set(SCENARIOS[name].needs)
    return [s for s in SCENARIOS.values() if s.name in names]  # in the table's order, needs first


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, help="rounds per scenario, targets alternating (3; --quick: 1)")
    parser.add_argument(
        "--only", action="append", metavar="NAME[,NAME]", help=f"only these scenarios: {', '.join(SCENARIOS)}"
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run: a tenth of the records, 1 round")
    parser.add_argument("--latency-seconds", type=float, help="length of a latency run (5; --quick: 2)")
    parser.add_argument("--connections", type=int, default=500, help="producers in connections-500 (500)")
    parser.add_argument(
        "--pin", action="store_true", help="run both targets on one CPU and the clients on the others (Linux)"
    )
    parser.add_argument("--json", metavar="PATH", help="also write config, every run, medians and ratios as JSON")
    opts = parser.parse_args(argv)
    opts.repeat = opts.repeat or (1 if opts.quick else 3)
    opts.latency_seconds = opts.latency_seconds or (2.0 if opts.quick else 5.0)
    opts.scaled = (lambda n: n // 10) if opts.quick else (lambda n: n)
    scenarios = selected(opts.only)
    opts.pinned = pin_cpus() if opts.pin else None

    suite = Suite(opts)
    broker_log, mock_log = tempfile.TemporaryFile(mode="w+"), tempfile.TemporaryFile(mode="w+")
    broker = mock = None
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="brokkr-suite-") as data_dir:
        try:
            port = free_port()
            if opts.pin:  # the targets inherit this CPU set; the clients, started later, the other
                os.sched_setaffinity(0, opts.pinned[0])
            broker = start_broker(port, data_dir, broker_log)
            mock = MockCluster(stderr=mock_log)
            if opts.pin:
                os.sched_setaffinity(0, opts.pinned[1])
            targets = {
                "brokkr": Target(
                    "brokkr",
                    f"127.0.0.1:{port}",
                    broker.pid,
                    lambda topic, n: create_topic(f"127.0.0.1:{port}", topic, partitions=n),
                    lambda: broker.poll() is None,
                ),
                "mock": Target("mock", mock.bootstrap, mock.pid, mock.create_topic, mock.alive),
            }
            for scenario in scenarios:
                log(f"{scenario.name} ({time.monotonic() - started:.0f}s)")
                suite.run(scenario, targets)
        except (BrokerDied, Fail, KafkaException, RuntimeError, TimeoutError) as exc:
            suite.failures["suite"] = str(exc)
            log(f"suite stopped: {exc}")
        finally:
            if broker is not None:
                stop_broker(broker)
            if mock is not None:
                mock.stop()
            stderr = {}
            for name, f in (("brokkr", broker_log), ("mock", mock_log)):
                f.seek(0)
                stderr[name] = f.read()
                f.close()
                if stderr[name].strip():
                    log(f"--- {name} stderr ---\n{stderr[name].rstrip()}")

    rows = summarize(suite)
    if "suite" in suite.failures:
        rows.append({"scenario": "suite", "failed": suite.failures["suite"]})
    print_table(rows, opts, sys.stdout)
    for warning in behind_pace(suite):
        print(warning)
    log(f"suite took {time.monotonic() - started:.0f}s")
    if opts.json:
        doc = {
            "config": {k: v for k, v in vars(opts).items() if k not in ("scaled", "pinned")},
            "machine": {"cpus": os.cpu_count(), "loadavg": os.getloadavg()},
            "pinned": {"targets": sorted(opts.pinned[0]), "clients": sorted(opts.pinned[1])} if opts.pin else None,
            "table": rows,
            "runs": suite.runs,
            "failures": suite.failures,
            "stderr": stderr,
        }
        with open(opts.json, "w") as f:
            f.write(json.dumps(doc, indent=2, default=str) + "\n")
    return 1 if suite.failures else 0


if __name__ == "__main__":
    sys.exit(main())
