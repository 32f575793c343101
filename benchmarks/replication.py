"""Replication on a ZooKeeper cluster: acks=all against acks=1, latency, failover, scaling.

One command, four measurements, each against a reference taken in the same run:

1. throughput of acks=all against acks=1 on one RF=3 topic (``min.insync.replicas=2``) of
   a 3-broker cluster (runs alternate, medians compared);
2. p50/p99 delivery latency of acks=all (and acks=1, the reference) at about half the
   acks=all maximum measured in 1, from a rate-limited producer;
3. failover: time from SIGKILL of the partition leader to the first acknowledged record
   of an idempotent acks=all producer producing continuously; bounded below by
   ``zookeeper.session.timeout.ms`` (reported), median of several kills;
4. total throughput of a 2-broker cluster, two RF=1 topics each led by a different broker,
   against one broker without ZooKeeper taking the same two topics;
5. creation of a topic of ``--create-partitions`` (1000) partitions, RF=2, on a 2-broker
   cluster: the time until every partition has a leader and both replicas in sync, and the
   longest round trip of an ApiVersions probe (loop_lag.py's, every 2 ms) to the broker
   that is not the controller, against the probe's longest before the creation.

ZooKeeper (Debian's package, tickTime 500 ms) and every broker (``python -m
brokkr.core.cli serve``) are subprocesses on free ports with temporary directories, all
stopped in ``finally`` blocks. The load generator is librdkafka (confluent-kafka) in this
process, as in produce.py.

    .venv-test/bin/python benchmarks/replication.py [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from functools import partial
from pathlib import Path

from brokkr.core.testing import ZOOKEEPER_JAR, zookeeper_chroot, zookeeper_server
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from produce import cpu_seconds, free_port, percentile_ms, stop_broker

ZOOKEEPER_TICK_MS = 500  # core/testing.zookeeper_server: sessions from 1 s (2 ticks) to 10 s (20 ticks)
#: Cluster settings as core/testing.py's CLUSTER_SETTINGS (the session timeout is an option).
CLUSTER_SETTINGS = {
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.backoff.ms": "100",
    "group.initial.rebalance.delay.ms": "0",
}
EXTRA_SETTINGS: dict[str, str] = {}  # --broker-setting
STARTUP_TIMEOUT_S = 30.0
RUN_TIMEOUT_S = 120.0  # per measured run
STALE_S = 0.1  # failover: delivery reports this soon after the SIGKILL are answers already on their way
WARMUP_RECORDS = 2000


class Fail(Exception):
    """The benchmark cannot go on (a broker died, a wait timed out, a record failed)."""


# -- processes ---------------------------------------------------------------------------


class Broker:
    """A ``brokkr serve`` subprocess; node_id None: a single broker without ZooKeeper."""

    def __init__(self, root: Path, name: str, node_id: int | None = None, zookeeper: str | None = None, **settings):
        self.name, self.node_id, self.port = name, node_id, free_port()
        self.overrides = {"listeners": f"PLAINTEXT://127.0.0.1:{self.port}", "log.dirs": str(root / name)}
        if node_id is not None:
            self.overrides.update({"node.id": str(node_id), "zookeeper.connect": zookeeper, **CLUSTER_SETTINGS})
        self.overrides.update({k: str(v) for k, v in settings.items()})
        self.overrides.update(EXTRA_SETTINGS)
        self.log = open(root / f"{name}.log", "a+")
        self.proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> Broker:
        cmd = [sys.executable, "-m", "brokkr.core.cli", "--log-level", "WARNING", "serve"]
        for key, value in self.overrides.items():
            cmd += ["--override", f"{key}={value}"]
        self.log.write(f"--- {time.strftime('%H:%M:%S')} start\n")
        self.log.flush()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            if self.proc.poll() is not None:
                raise Fail(f"broker {self.name} exited during startup ({self.proc.returncode}):\n{self.tail()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError:
                if time.monotonic() > deadline:
                    raise Fail(f"broker {self.name} did not listen within {STARTUP_TIMEOUT_S:.0f}s") from None
                time.sleep(0.1)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None:
            stop_broker(self.proc)

    def cpu(self) -> float:
        return (cpu_seconds(self.proc.pid) or 0.0) if self.alive() else 0.0

    def tail(self, chars: int = 4000) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()[-chars:]


def wait_for(what: str, check, timeout: float = 30.0, step=None):
    """Poll check() until it returns something true; step() (if any) runs in between."""
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise Fail(f"timed out after {timeout:.0f}s waiting for {what}")
        if step is None:
            time.sleep(0.05)
        else:
            until = time.monotonic() + 0.1
            while time.monotonic() < until:
                step()
    return value


def partition_state(admin: AdminClient, topic: str) -> tuple[int, list[int]] | None:
    """(leader, ISR) of partition 0 of topic, once it has a leader."""
    try:
        md = admin.list_topics(topic, timeout=2)
    except KafkaException:
        return None
    t = md.topics.get(topic)
    if t is None or t.error is not None or 0 not in t.partitions or t.partitions[0].leader < 0:
        return None
    return t.partitions[0].leader, sorted(t.partitions[0].isrs)


def start_cluster(root: Path, zk: str, name: str, n: int, **settings) -> tuple[list[Broker], AdminClient]:
    connect = zookeeper_chroot(zk, name)
    brokers = [Broker(root, f"{name}-{i}", i, connect, **settings) for i in range(1, n + 1)]
    for b in brokers:
        b.start()
    admin = AdminClient({"bootstrap.servers": ",".join(b.bootstrap for b in brokers)})
    wait_for(f"{n} live brokers", lambda: len(admin.list_topics(timeout=5).brokers) == n)
    return brokers, admin


def create_topic(
    admin: AdminClient, topic: str, rf: int = 1, config: dict | None = None, on: int | None = None
) -> tuple[int, list[int]]:
    """A one-partition topic (on one given broker if `on`); waits until it has a leader (with
    every replica in sync) and returns (leader, ISR)."""
    if on is None:
        new = NewTopic(topic, num_partitions=1, replication_factor=rf, config=config or {})
    else:
        new = NewTopic(topic, num_partitions=1, replica_assignment=[[on]], config=config or {})
    admin.create_topics([new], operation_timeout=15, request_timeout=20)[topic].result(30)
    return wait_for(f"{topic} to have a leader", lambda: (s := partition_state(admin, topic)) and len(s[1]) == rf and s)


# -- load --------------------------------------------------------------------------------


def producer(bootstrap: str, args: argparse.Namespace, **extra) -> Producer:
    config = {
        "bootstrap.servers": bootstrap,
        "linger.ms": args.linger_ms,
        "batch.size": args.batch_size,
        "compression.type": "none",
        "enable.idempotence": False,
        # Kafka's Java producer default (librdkafka's is 1000000): requests a broker holds
        # for long do not pile up behind each other, batches grow instead
        "max.in.flight.requests.per.connection": 5,
        "log_level": 3,
    }
    config.update(extra)
    return Producer(config)


def produce_all(
    p: Producer, topics: list[str], n: int, value: bytes, latencies: list, errors: list, max_seconds: float = 0
) -> int:
    """n records as fast as the client takes them, round robin over topics (partition 0).
    After max_seconds (if set) it stops producing and drops what the client still queues
    (what is in flight is awaited); returns the number of records delivered."""
    delivered = 0

    def report(t0: float, err, msg) -> None:
        nonlocal delivered
        if err is None:
            delivered += 1
            latencies.append(time.perf_counter() - t0)
        elif err.code() not in (KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT):
            errors.append(str(err))

    deadline = time.monotonic() + RUN_TIMEOUT_S
    cap = time.monotonic() + max_seconds if max_seconds else float("inf")
    k = len(topics)
    capped = False
    for i in range(n):
        while not capped:
            try:
                p.produce(
                    topics[i % k], value, b"key-%d" % i, partition=0, on_delivery=partial(report, time.perf_counter())
                )
                break
            except BufferError:  # the client's queue is full: serve callbacks until it drains
                p.poll(0.005)
                capped = time.monotonic() > cap
                if time.monotonic() > deadline:
                    p.purge()
                    raise Fail(f"producer queue stayed full for {RUN_TIMEOUT_S:.0f}s") from None
        if i % 256 == 0:
            p.poll(0)
            capped = capped or time.monotonic() > cap
        if capped:
            p.purge(in_queue=True, in_flight=False, blocking=True)
            break
    remaining = p.flush(max(0.0, deadline - time.monotonic()))
    if remaining:
        p.purge()
        raise Fail(f"{remaining} record(s) undelivered after {RUN_TIMEOUT_S:.0f}s")
    return delivered


def throughput_run(
    bootstrap: str, topics: list[str], acks: str, args, cpu_of: dict[str, list[Broker]], batch_size: int
) -> dict:
    """Warm-up, then args.records records (or what args.max_seconds allow): records/s,
    latency, CPU of each group of brokers and of this process."""
    p = producer(bootstrap, args, acks=acks, **{"batch.size": batch_size})
    value = b"x" * args.value_size
    errors: list[str] = []
    produce_all(p, topics, WARMUP_RECORDS, value, [], errors, args.max_seconds)
    latencies: list[float] = []
    before = {g: sum(b.cpu() for b in bs) for g, bs in cpu_of.items()}
    client_before = time.process_time()
    start = time.perf_counter()
    delivered = produce_all(p, topics, args.records, value, latencies, errors, args.max_seconds)
    elapsed = time.perf_counter() - start
    client = time.process_time() - client_before
    cpu = {g: 100 * (sum(b.cpu() for b in bs) - before[g]) / elapsed for g, bs in cpu_of.items()}
    latencies.sort()
    return {
        "records": delivered,
        "capped": delivered < args.records,
        "records_per_s": delivered / elapsed,
        "mb_per_s": delivered * args.value_size / elapsed / 1e6,
        "p50_ms": percentile_ms(latencies, 0.5),
        "p99_ms": percentile_ms(latencies, 0.99),
        "cpu_pct": {**cpu, "client": 100 * client / elapsed},
        "seconds": elapsed,
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
    }


class Pacer:
    """Produces `rate` records/s to partition 0 of topic, scheduled from the start time
    (a late loop catches up with a burst), recording each record's produce and delivery
    times; step() produces what is due and serves callbacks for up to a millisecond."""

    def __init__(self, p: Producer, topic: str, rate: float, value: bytes):
        self.p, self.topic, self.rate, self.value = p, topic, rate, value
        self.sent = 0
        self.produced_at: list[float] = []
        self.acked: list[tuple[float, int]] = []  # (delivery time, sequence number)
        self.errors: list[str] = []
        self.t0 = time.perf_counter()

    def _delivered(self, err, msg) -> None:
        seq = int(msg.key())  # the key is the sequence number: one callback for every record
        if err is not None:
            self.errors.append(f"record {seq}: {err}")
        else:
            self.acked.append((time.perf_counter(), seq))

    def step(self) -> None:
        # Locals: at a few hundred thousand records/s this loop's own cost decides whether
        # the client keeps its pace on a small machine.
        clock, produce, produced_at = time.perf_counter, self.p.produce, self.produced_at
        topic, value, delivered = self.topic, self.value, self._delivered
        seq, due = self.sent, int((clock() - self.t0) * self.rate) + 1
        try:
            while seq < due:
                produce(topic, value, b"%09d" % seq, partition=0, on_delivery=delivered)
                produced_at.append(clock())
                seq += 1
        except BufferError:
            pass
        self.sent = seq
        self.p.poll(0.001)

    def run_for(self, seconds: float) -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            self.step()


def paced_latency(p: Producer, topic: str, rate: float, seconds: float, value: bytes) -> dict:
    """`rate` records/s for `seconds` through a warmed-up producer; then every record is
    awaited (bounded) and the produce->delivery latencies summarized."""
    pacer = Pacer(p, topic, rate, value)
    pacer.run_for(seconds)
    elapsed = time.perf_counter() - pacer.t0
    if p.flush(RUN_TIMEOUT_S):
        p.purge()
        raise Fail(f"latency run at {rate:,.0f}/s: records undelivered after {RUN_TIMEOUT_S:.0f}s")
    if pacer.errors:
        raise Fail(f"latency run at {rate:,.0f}/s: {len(pacer.errors)} delivery error(s), first: {pacer.errors[0]}")
    latencies = sorted(t - pacer.produced_at[seq] for t, seq in pacer.acked)
    return {
        "target_records_per_s": rate,
        "records_per_s": pacer.sent / elapsed,
        "records": pacer.sent,
        "p50_ms": percentile_ms(latencies, 0.5),
        "p99_ms": percentile_ms(latencies, 0.99),
        "max_ms": latencies[-1] * 1000,
    }


def latency_run(bootstrap: str, topic: str, acks: str, rate: float, args) -> dict:
    p = producer(bootstrap, args, acks=acks)
    value = b"x" * args.value_size
    produce_all(p, [topic], WARMUP_RECORDS, value, [], [], args.max_seconds)
    return paced_latency(p, topic, rate, args.latency_seconds, value)


# -- the four measurements ----------------------------------------------------------------


def median(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def cluster_acks(root: Path, zk: str, args, out: dict) -> None:
    """1 and 2: acks=all against acks=1 on an RF=3 topic, throughput then latency."""
    brokers, admin = start_cluster(root, zk, "acks", 3, **{"zookeeper.session.timeout.ms": args.session_timeout_ms})
    bootstrap = ",".join(b.bootstrap for b in brokers)
    try:
        runs: dict[str, list[dict]] = {"acks=1": [], "acks=all": []}
        for r in range(args.repeat):
            topic = f"rf3-{r}"
            leader, _ = create_topic(admin, topic, rf=3, config={"min.insync.replicas": "2"})
            groups = {"leader": [b for b in brokers if b.node_id == leader]}
            groups["followers"] = [b for b in brokers if b.node_id != leader]
            for acks in ("1", "all") if r % 2 == 0 else ("all", "1"):  # ABBA: drifts hit both alike
                run = throughput_run(bootstrap, [topic], acks, args, groups, args.batch_size)
                run["leader"] = leader
                runs[f"acks={acks}"].append(run)
                check_alive(brokers)
                log(f"  throughput run {r + 1}/{args.repeat} acks={acks}: {run['records_per_s']:,.0f} records/s")
        out["throughput"] = {"runs": runs, "median": {k: summarize(v) for k, v in runs.items()}}
        out["throughput"]["ratio_all_over_1"] = (
            out["throughput"]["median"]["acks=all"]["records_per_s"]
            / out["throughput"]["median"]["acks=1"]["records_per_s"]
        )
        rate = args.latency_fraction * out["throughput"]["median"]["acks=all"]["records_per_s"]
        topic = "rf3-latency"
        leader, _ = create_topic(admin, topic, rf=3, config={"min.insync.replicas": "2"})
        lat: dict[str, list[dict]] = {"acks=all": [], "acks=1": []}
        for r in range(args.repeat):
            for acks in ("all", "1") if r % 2 == 0 else ("1", "all"):
                run = latency_run(bootstrap, topic, acks, rate, args)
                lat[f"acks={acks}"].append(run)
                check_alive(brokers)
                log(
                    f"  latency run {r + 1}/{args.repeat} acks={acks} at {rate:,.0f}/s: "
                    f"p50 {run['p50_ms']:.2f} ms, p99 {run['p99_ms']:.2f} ms"
                )
        out["latency"] = {
            "target_records_per_s": rate,
            "fraction_of_acks_all_max": args.latency_fraction,
            "runs": lat,
            "median": {
                k: {m: median(v, m) for m in ("records_per_s", "p50_ms", "p99_ms", "max_ms")} for k, v in lat.items()
            },
        }
    finally:
        stop_all(brokers)
        out["broker_logs"].update({b.name: b.tail(2000) for b in brokers if b.tail(2000).strip()})


def failover(root: Path, zk: str, args, out: dict) -> None:
    """3: SIGKILL the leader of an RF=3 topic under an idempotent acks=all producer."""
    brokers, admin = start_cluster(root, zk, "failover", 3, **{"zookeeper.session.timeout.ms": args.session_timeout_ms})
    bootstrap = ",".join(b.bootstrap for b in brokers)
    by_id = {b.node_id: b for b in brokers}
    topic = "failover"
    kills: list[dict] = []
    try:
        create_topic(admin, topic, rf=3, config={"min.insync.replicas": "2"})
        p = producer(
            bootstrap,
            args,
            **{"enable.idempotence": True, "acks": "all", "message.timeout.ms": 300000, "retry.backoff.ms": 50},
        )
        pacer = Pacer(p, topic, args.failover_rate, b"x" * args.value_size)
        watcher = Watcher(bootstrap, topic)
        watcher.start()
        pacer.run_for(1.0)
        for k in range(args.kills):
            leader, isr = wait_for("a leader", lambda: partition_state(admin, topic), step=pacer.step)
            controller = admin.describe_cluster(request_timeout=5).result(10).controller
            pacer.run_for(1.0)  # steady state
            victim = by_id[leader]
            acked_before = len(pacer.acked)
            t_kill = time.perf_counter()
            victim.proc.send_signal(signal.SIGKILL)
            first_seq = pacer.sent  # the first record produced after the kill
            deadline = t_kill + 4 * args.session_timeout_ms / 1000 + 30
            first_ack = first_new = None
            stale = 0  # delivery reports in the first STALE_S: answers the leader sent before it died
            seen = acked_before
            while first_new is None:
                pacer.step()
                while first_new is None and seen < len(pacer.acked):  # callbacks run in step(): after the kill
                    t, seq = pacer.acked[seen]
                    seen += 1
                    if t - t_kill < STALE_S:
                        stale += 1
                    elif first_ack is None:
                        first_ack = t
                    if seq >= first_seq:
                        first_new = t
                if time.perf_counter() > deadline:
                    raise Fail(
                        f"kill {k + 1}: no record acknowledged {deadline - t_kill:.0f}s after SIGKILL of "
                        f"leader {leader}; (leader, ISR) seen since: {watcher.since(t_kill)}"
                    )
                if pacer.errors:
                    raise Fail(f"kill {k + 1}: delivery error: {pacer.errors[0]}")
            victim.proc.wait(10)
            new_leader = wait_for("the new leader", lambda: partition_state(admin, topic), step=pacer.step)[0]
            kill = {
                "killed": leader,
                "was_controller": controller is not None and controller.id == leader,
                "isr_before": isr,
                "new_leader": new_leader,
                "first_ack_s": first_ack - t_kill,
                "first_new_record_ack_s": first_new - t_kill,
                "acks_within_stale_window": stale,
                "leader_visible_s": (v - t_kill) if (v := watcher.new_leader_after(t_kill, leader)) else None,
                "timeline": watcher.since(t_kill),
            }
            kills.append(kill)
            log(
                f"  kill {k + 1}/{args.kills}: leader {leader}{' (controller)' if kill['was_controller'] else ''} "
                f"-> {new_leader}, first ack after {kill['first_ack_s']:.3f}s; (leader, ISR) seen: {kill['timeline']}"
            )
            # A restarted broker whose old session still lives would be refused; it is gone by now.
            wait_for(f"broker {leader} to restart", lambda v=victim: _try_start(v), timeout=60, step=pacer.step)
            wait_for("the ISR to heal", lambda: (s := partition_state(admin, topic)) and len(s[1]) == 3,
                     timeout=60, step=pacer.step)  # fmt: skip
        pacer.run_for(0.5)
        if p.flush(RUN_TIMEOUT_S):
            raise Fail("failover: records still undelivered at the end")
        if pacer.errors:
            raise Fail(f"failover: {len(pacer.errors)} delivery error(s), first: {pacer.errors[0]}")
        watcher.done.set()
        check = verify_log(bootstrap, topic, pacer.sent)
        out["failover"] = {
            "zookeeper.session.timeout.ms": args.session_timeout_ms,
            "zookeeper_tick_ms": ZOOKEEPER_TICK_MS,
            "producer_rate": args.failover_rate,
            "kills": kills,
            "median_first_ack_s": statistics.median(k["first_ack_s"] for k in kills),
            "min_first_ack_s": min(k["first_ack_s"] for k in kills),
            "max_first_ack_s": max(k["first_ack_s"] for k in kills),
            "median_leader_visible_s": statistics.median(
                k["leader_visible_s"] for k in kills if k["leader_visible_s"] is not None
            )
            if any(k["leader_visible_s"] is not None for k in kills)
            else None,
            "records_sent": pacer.sent,
            "records_acked": len(pacer.acked),
            "log_check": check,
        }
    finally:
        stop_all(brokers)
        out["broker_logs"].update({b.name: b.tail(2000) for b in brokers if b.tail(2000).strip()})


class Watcher(threading.Thread):
    """Polls the partition's (leader, ISR) every 50 ms on its own AdminClient, keeping the
    changes with their times, so failover can tell when the new leader became visible."""

    def __init__(self, bootstrap: str, topic: str):
        super().__init__(daemon=True)
        self.admin, self.topic = AdminClient({"bootstrap.servers": bootstrap}), topic
        self.changes: list[tuple[float, tuple[int, list[int]] | None]] = []
        self.done = threading.Event()

    def run(self) -> None:
        last = "unset"
        while not self.done.wait(0.05):
            state = partition_state(self.admin, self.topic)
            if state != last:
                self.changes.append((time.perf_counter(), state))
                last = state

    def new_leader_after(self, t: float, old: int) -> float | None:
        return next((when for when, s in self.changes if when > t and s and s[0] != old), None)

    def since(self, t: float) -> str:
        return ", ".join(f"+{when - t:.2f}s {s}" for when, s in self.changes if when > t - 1) or "no change"


def _try_start(broker: Broker) -> bool:
    try:
        broker.start()
        return True
    except Fail as exc:
        log(f"  (restart of {broker.name} refused, retrying: {str(exc).splitlines()[-1]})")
        return False


def verify_log(bootstrap: str, topic: str, sent: int) -> str:
    """Every produced record in the log once and in order (keys are sequence numbers)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-check", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    keys: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(keys) < sent and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                keys.append(msg.key())
    finally:
        consumer.close()
    want = [b"%09d" % i for i in range(sent)]
    if keys == want:
        return f"ok: {sent} records, each once, in order"
    seen = {int(k) for k in keys}
    raise Fail(
        f"failover log check: read {len(keys)} records ({len(seen)} distinct) of {sent} sent; "
        f"missing {sorted(set(range(sent)) - seen)[:10]}..., "
        f"first out of place at {next((i for i, (a, b) in enumerate(zip(keys, want)) if a != b), None)}"
    )


def scaling(root: Path, zk: str, args, out: dict) -> None:
    """4: two RF=1 topics on a 2-broker cluster (one each) against both on one broker."""
    single = Broker(root, "single")
    cluster: list[Broker] = []
    try:
        single.start()
        single_admin = AdminClient({"bootstrap.servers": single.bootstrap})
        cluster, admin = start_cluster(
            root, zk, "scale", 2, **{"zookeeper.session.timeout.ms": args.session_timeout_ms}
        )
        bootstrap = ",".join(b.bootstrap for b in cluster)
        runs: dict[str, list[dict]] = {"single": [], "cluster": []}
        for r in range(args.repeat):
            topics = [f"s{r}-a", f"s{r}-b"]
            for t in topics:
                create_topic(single_admin, t)
            leaders = [create_topic(admin, t, on=node)[0] for t, node in zip(topics, (1, 2))]
            if sorted(leaders) != [1, 2]:
                raise Fail(f"topics {topics} are led by {leaders}, not by brokers 1 and 2")
            for target in ("single", "cluster") if r % 2 == 0 else ("cluster", "single"):
                if target == "single":
                    run = throughput_run(
                        single.bootstrap, topics, "1", args, {"brokers": [single]}, args.scaling_batch_size
                    )
                else:
                    run = throughput_run(bootstrap, topics, "1", args, {"brokers": cluster}, args.scaling_batch_size)
                runs[target].append(run)
                check_alive([single, *cluster])
                log(f"  scaling run {r + 1}/{args.repeat} {target}: {run['records_per_s']:,.0f} records/s")
        out["scaling"] = {"runs": runs, "median": {k: summarize(v) for k, v in runs.items()}}
        out["scaling"]["ratio_cluster_over_single"] = (
            out["scaling"]["median"]["cluster"]["records_per_s"] / out["scaling"]["median"]["single"]["records_per_s"]
        )
    finally:
        stop_all([single, *cluster])
        out["broker_logs"].update({b.name: b.tail(2000) for b in [single, *cluster] if b.tail(2000).strip()})


def creation(root: Path, zk: str, args, out: dict) -> None:
    """5: a topic of args.create_partitions partitions, RF=2, on a 2-broker cluster."""
    rounds = []
    for r in range(args.repeat):
        settings = {"zookeeper.session.timeout.ms": args.session_timeout_ms}
        brokers, admin = start_cluster(root, zk, f"create{r}", 2, **settings)
        try:
            rounds.append(creation_run(brokers, admin, args.create_partitions))
        finally:
            stop_all(brokers)
            out["broker_logs"].update({b.name: b.tail(2000) for b in brokers if b.tail(2000).strip()})
        last = rounds[-1]
        log(f"  creation run {r + 1}/{args.repeat}: {last['seconds']:.2f} s, probe {last['probe_max_ms']:.1f} ms")
    out["creation"] = {
        "partitions": args.create_partitions,
        "runs": rounds,
        "median": {k: statistics.median(r[k] for r in rounds) for k in rounds[0]},
    }


def creation_run(brokers: list[Broker], admin: AdminClient, n: int) -> dict:
    """Create topic "wide" (n partitions, RF=2) while loop_lag.py's probe times ApiVersions
    round trips to the broker that is not the controller."""
    from loop_lag import Probe

    def complete() -> bool:
        t = admin.list_topics("wide", timeout=10).topics.get("wide")
        return (
            t is not None
            and t.error is None
            and len(t.partitions) == n
            and all(p.leader >= 0 and len(p.isrs) == 2 for p in t.partitions.values())
        )

    def create(_seconds: float) -> None:
        new = NewTopic("wide", num_partitions=n, replication_factor=2)
        admin.create_topics([new], operation_timeout=60, request_timeout=60)["wide"].result(RUN_TIMEOUT_S)
        wait_for(f"{n} partitions with leaders and full ISRs", complete, timeout=RUN_TIMEOUT_S)

    controller = admin.list_topics(timeout=10).controller_id
    probe = Probe(next(b for b in brokers if b.node_id != controller).bootstrap, 0.002)
    probe.start()
    try:
        idle = probe.measure(1.0)
        started = time.monotonic()
        during = probe.measure(0, load=create)
        return {"seconds": time.monotonic() - started, "probe_max_ms": max(during), "idle_probe_max_ms": max(idle)}
    finally:
        probe.done.set()


def summarize(runs: list[dict]) -> dict:
    s = {m: median(runs, m) for m in ("records_per_s", "mb_per_s", "p50_ms", "p99_ms")}
    s["cpu_pct"] = {g: statistics.median(r["cpu_pct"][g] for r in runs) for g in runs[0]["cpu_pct"]}
    s["errors"] = sum(r["errors"] for r in runs)
    return s


def check_alive(brokers: list[Broker]) -> None:
    for b in brokers:
        if not b.alive():
            raise Fail(f"broker {b.name} exited ({b.proc.returncode}) during the benchmark:\n{b.tail()}")


def stop_all(brokers: list[Broker]) -> None:
    for b in brokers:
        try:
            b.stop()
        except Exception as exc:  # keep stopping the others
            log(f"stopping {b.name} failed: {exc}")


# -- output --------------------------------------------------------------------------------

_report = sys.stdout


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def report(out: dict, args) -> None:
    def say(text: str = "") -> None:
        print(text, file=_report)

    m = out["machine"]
    say(
        f"\nreplication: {args.records} records x {args.value_size} B per throughput run, linger.ms={args.linger_ms}, "
        f"batch.size={args.batch_size}, median of {args.repeat} run(s)"
    )
    say(
        f"machine: {m['cpus']} CPU(s) ({m['platform']}); ZooKeeper, every broker and the client share them, "
        "so brokers compete for cores"
    )
    cpu_cols = lambda c: "  ".join(f"{g} {v:.0f}%" for g, v in c.items())  # noqa: E731
    if "throughput" in out:
        t = out["throughput"]
        say("\n1. throughput, 3 brokers, RF=3, min.insync.replicas=2, one partition")
        header = f"{'acks':<12}{'records/s':>12}{'MB/s':>8}{'p50 ms':>9}{'p99 ms':>9}{'errors':>8}  CPU (of one core)"
        say(header)
        say("-" * len(header))
        for k, s in t["median"].items():
            say(
                f"{k:<12}{s['records_per_s']:>12,.0f}{s['mb_per_s']:>8.2f}{s['p50_ms']:>9.2f}{s['p99_ms']:>9.2f}"
                f"{s['errors']:>8}  {cpu_cols(s['cpu_pct'])}"
            )
        say(f"{'all/1':<12}{t['ratio_all_over_1']:>12.3f}   (Kafka: about 0.7)")
    if "latency" in out:
        lt = out["latency"]
        say(
            f"\n2. latency at {lt['target_records_per_s']:,.0f} records/s ({lt['fraction_of_acks_all_max']:.0%} of the "
            f"acks=all maximum), {args.latency_seconds:g} s per run, produce() to delivery callback"
        )
        header = f"{'acks':<12}{'records/s':>12}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}"
        say(header)
        say("-" * len(header))
        for k, s in lt["median"].items():
            say(f"{k:<12}{s['records_per_s']:>12,.0f}{s['p50_ms']:>9.2f}{s['p99_ms']:>9.2f}{s['max_ms']:>9.1f}")
        a, b = lt["median"]["acks=all"], lt["median"]["acks=1"]
        say(f"{'all/1':<12}{'':>12}{a['p50_ms'] / b['p50_ms']:>9.2f}{a['p99_ms'] / b['p99_ms']:>9.2f}")
    if "failover" in out:
        f = out["failover"]
        say(
            f"\n3. failover: SIGKILL of the leader, idempotent acks=all producer at {f['producer_rate']:,} records/s, "
            f"zookeeper.session.timeout.ms={f['zookeeper.session.timeout.ms']} (tickTime {f['zookeeper_tick_ms']} ms)"
        )
        for i, k in enumerate(f["kills"], 1):
            visible = "-" if k["leader_visible_s"] is None else f"{k['leader_visible_s']:.2f} s"
            say(
                f"  kill {i}: leader {k['killed']}{' (also controller)' if k['was_controller'] else ''} -> "
                f"{k['new_leader']}: new leader in metadata {visible}, first ack {k['first_ack_s']:.3f} s, "
                f"first ack of a record produced after the kill {k['first_new_record_ack_s']:.3f} s"
            )
        say(
            f"  median {f['median_first_ack_s']:.3f} s "
            f"(min {f['min_first_ack_s']:.3f}, max {f['max_first_ack_s']:.3f}) = "
            f"{f['median_first_ack_s'] * 1000 / f['zookeeper.session.timeout.ms']:.2f} x the session timeout "
            f"(new leader in metadata: median {f['median_leader_visible_s'] or float('nan'):.2f} s); "
            f"log: {f['log_check']}"
        )
    if "scaling" in out:
        sc = out["scaling"]
        say("\n4. scaling, acks=1, two one-partition RF=1 topics written round robin by one producer")
        header = f"{'target':<30}{'records/s':>12}{'MB/s':>8}{'p50 ms':>9}{'p99 ms':>9}{'errors':>8}  CPU"
        say(header)
        say("-" * len(header))
        names = {"single": "1 broker, no ZooKeeper", "cluster": "2 brokers, one topic each"}
        for k, s in sc["median"].items():
            say(
                f"{names[k]:<30}{s['records_per_s']:>12,.0f}{s['mb_per_s']:>8.2f}{s['p50_ms']:>9.2f}{s['p99_ms']:>9.2f}"
                f"{s['errors']:>8}  {cpu_cols(s['cpu_pct'])}"
            )
        say(f"{'cluster/single':<30}{sc['ratio_cluster_over_single']:>12.3f}   (ideal with spare cores: 2.0)")
    if "creation" in out:
        c = out["creation"]
        say(f"\n5. creation of a topic of {c['partitions']} partitions, RF=2, 2 brokers")
        for i, r in enumerate(c["runs"], 1):
            say(
                f"  run {i}: every leader and full ISR in {r['seconds']:.2f} s; the other broker's longest probe "
                f"{r['probe_max_ms']:.1f} ms (before the creation: {r['idle_probe_max_ms']:.1f} ms)"
            )
        med = c["median"]
        say(f"  median {med['seconds']:.2f} s, longest probe {med['probe_max_ms']:.1f} ms")
    if "error" in out:
        say(f"\nFAILED: {out['error']}")


def main(argv: list[str] | None = None) -> int:
    global _report
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, help="records per throughput run (200000)")
    parser.add_argument("--value-size", type=int, default=100, help="value bytes per record (100)")
    parser.add_argument("--linger-ms", type=float, default=5, help="producer linger.ms (5)")
    parser.add_argument(
        "--batch-size", type=int, default=1_000_000, help="producer batch.size of parts 1-3 (1000000, librdkafka's)"
    )
    parser.add_argument(
        "--scaling-batch-size",
        type=int,
        default=16384,
        help="producer batch.size of part 4 (16384, Kafka's: small requests load the brokers, not the client)",
    )
    parser.add_argument("--max-seconds", type=float, help="cap on each throughput run; what is delivered counts (30)")
    parser.add_argument(
        "--broker-setting",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting for every broker (repeatable), e.g. replica.fetch.wait.max.ms=50",
    )
    parser.add_argument("--repeat", type=int, help="alternating runs per target, medians reported (3)")
    parser.add_argument("--latency-seconds", type=float, help="length of each latency run (10)")
    parser.add_argument(
        "--latency-fraction", type=float, default=0.5, help="latency runs' rate, of the acks=all maximum (0.5)"
    )
    parser.add_argument("--kills", type=int, help="leader kills in the failover test (5)")
    parser.add_argument("--failover-rate", type=int, default=2000, help="records/s produced during failover (2000)")
    parser.add_argument(
        "--session-timeout-ms", type=int, default=4000, help="zookeeper.session.timeout.ms of every cluster (4000)"
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=["acks", "failover", "scaling", "creation"],
        help="run only these parts (repeatable)",
    )
    parser.add_argument("--create-partitions", type=int, default=1000, help="partitions of part 5's topic (1000)")
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: 20000 records, 2 runs, 2 kills, 3 s latency runs, 10 s cap"
    )
    parser.add_argument("--json", metavar="PATH", help="also write everything as JSON ('-': stdout, table to stderr)")
    args = parser.parse_args(argv)
    full = {"records": 200_000, "repeat": 3, "kills": 5, "latency_seconds": 10.0, "max_seconds": 30.0}
    quick = {"records": 20_000, "repeat": 2, "kills": 2, "latency_seconds": 3.0, "max_seconds": 10.0}
    for key, value in (quick if args.quick else full).items():  # options given explicitly win
        if getattr(args, key) is None:
            setattr(args, key, value)
    try:
        args.settings = dict(s.split("=", 1) for s in args.broker_setting)
    except ValueError:
        parser.error("--broker-setting takes KEY=VALUE")
    if not ZOOKEEPER_JAR.exists() or shutil.which("java") is None:
        print("ZooKeeper is not installed (apt-get install zookeeper)", file=sys.stderr)
        return 2
    if args.json == "-":
        _report = sys.stderr
    EXTRA_SETTINGS.update(args.settings)
    parts = args.only or ["acks", "failover", "scaling", "creation"]
    out: dict = {
        "config": vars(args),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "broker_logs": {},
    }
    started = time.monotonic()
    status = 0
    with tempfile.TemporaryDirectory(prefix="brokkr-repl-bench-") as tmp:
        root = Path(tmp)
        try:
            with open(root / "zookeeper.log", "w") as zk_log, zookeeper_server(root / "zookeeper", zk_log) as zk:
                parts_run = (
                    ("acks", cluster_acks),
                    ("failover", failover),
                    ("scaling", scaling),
                    ("creation", creation),
                )
                for name, fn in parts_run:
                    if name in parts:
                        log(f"{name}...")
                        fn(root, zk, args, out)
        except (Fail, KafkaException) as exc:
            out["error"] = str(exc)
            status = 1
        except Exception as exc:  # a bug here: still report what was measured
            out["error"] = f"{type(exc).__name__}: {exc}"
            status = 1
    out["seconds"] = time.monotonic() - started
    report(out, args)
    if status:
        for name, text in out["broker_logs"].items():
            print(f"--- {name} (stderr, tail) ---\n{text}", file=sys.stderr)
    if args.json:
        text = json.dumps(out, indent=2, default=str)
        if args.json == "-":
            print(text)
        else:
            Path(args.json).write_text(text + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
