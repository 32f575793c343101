"""Consumer groups: brokkr against librdkafka's mock cluster (which serves groups), same run.

- join: N confluent-kafka consumers (default 50, classic protocol, librdkafka's defaults but
  the ``roundrobin`` assignor) subscribe to the same ceil(N/4) topics of 4 partitions in one
  group; the time from the first ``subscribe()`` until every member holds at least one
  partition and every partition has exactly one owner (the group is Stable with everyone
  in it). Topics are auto-created by producing to them, with 4 partitions on both brokers
  (the mock serves no CreateTopics and gives auto-created topics 4 partitions; brokkr runs
  with ``num.partitions=4``). Both coordinators apply their default
  initial rebalance delay (brokkr's ``group.initial.rebalance.delay.ms`` is Kafka's 3000;
  the mock's is its own default), which dominates; ``--no-initial-delay`` sets brokkr's to 0
  and reports the time the join itself takes.
- commits: one consumer in the group (``assign()``) commits offsets M times synchronously
  (``commit(asynchronous=False)``, a round trip each), then M times asynchronously followed
  by one synchronous commit: commits per second.

The mock cluster runs inside this process; its address comes from a client's metadata, so
the consumers connect to it as to any broker. Runs alternate and medians are reported,
with brokkr/mock ratios (join: mock time / brokkr time, so above 1 means brokkr is faster).

    .venv-test/bin/python benchmarks/groups.py [--members 50] [--commits 2000] [--repeat 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from produce import free_port, start_broker, stop_broker  # benchmarks/ is the script's directory

PARTITIONS = 4  # of an auto-created topic, on the mock and (num.partitions) on brokkr


def create_topics(bootstrap: str, topics: list[str]) -> None:
    """Auto-create ``topics`` by producing a record to each."""
    producer = Producer({"bootstrap.servers": bootstrap, "log_level": 3})
    for topic in topics:
        producer.produce(topic, b"x")
    if producer.flush(30):
        raise RuntimeError("could not create the topics")


def join_time(bootstrap: str, members: int, timeout: float = 120.0) -> float:
    run, group = uuid.uuid4().hex[:8], f"g-{uuid.uuid4().hex[:8]}"
    topics = [f"join-{run}-{i}" for i in range(-(-members // PARTITIONS))]
    create_topics(bootstrap, topics)
    config = {"group.id": group, "partition.assignment.strategy": "roundrobin", "log_level": 3}
    consumers = [Consumer({"bootstrap.servers": bootstrap, **config}) for _ in range(members)]
    try:
        start = time.monotonic()
        for c in consumers:
            c.subscribe(topics)
        while True:
            for c in consumers:
                c.poll(0)
            owned = [[(tp.topic, tp.partition) for tp in c.assignment()] for c in consumers]
            held = [tp for a in owned for tp in a]
            if all(owned) and len(held) == len(set(held)) == len(topics) * PARTITIONS:
                return time.monotonic() - start
            if time.monotonic() - start > timeout:
                raise RuntimeError(f"the group did not settle in {timeout:.0f} s")
            time.sleep(0.005)
    finally:
        for c in consumers:
            c.close()


def commit_rates(bootstrap: str, commits: int) -> tuple[float, float]:
    topic, group = f"commit-{uuid.uuid4().hex[:8]}", f"c-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap, [topic])
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False, "log_level": 3}
    )
    consumer.assign([TopicPartition(topic, 0)])
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)  # warm-up: coordinator found
        start = time.monotonic()
        for i in range(commits):
            consumer.commit(offsets=[TopicPartition(topic, 0, i)], asynchronous=False)
        sync_rate = commits / (time.monotonic() - start)
        start = time.monotonic()
        for i in range(commits):
            consumer.commit(offsets=[TopicPartition(topic, 0, i)], asynchronous=True)
            consumer.poll(0)
        consumer.commit(offsets=[TopicPartition(topic, 0, commits)], asynchronous=False)
        async_rate = commits / (time.monotonic() - start)
        return sync_rate, async_rate
    finally:
        consumer.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=50)
    parser.add_argument("--commits", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-initial-delay", action="store_true", help="brokkr's group.initial.rebalance.delay.ms=0")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)

    overrides = {"num.partitions": str(PARTITIONS)}
    if args.no_initial_delay:
        overrides["group.initial.rebalance.delay.ms"] = "0"
    port = free_port()
    runs: dict[str, list[dict]] = {"brokkr": [], "mock": []}
    with tempfile.TemporaryDirectory() as data, open(f"{data}.log", "w") as log:
        broker = start_broker(port, data, log, overrides)
        mock = Producer({"test.mock.num.brokers": 1, "log_level": 3})
        try:
            (mock_broker,) = mock.list_topics(timeout=10).brokers.values()
            targets = {"brokkr": f"127.0.0.1:{port}", "mock": f"{mock_broker.host}:{mock_broker.port}"}
            for _ in range(args.repeat):
                for name, bootstrap in targets.items():
                    joined = join_time(bootstrap, args.members)
                    sync_rate, async_rate = commit_rates(bootstrap, args.commits)
                    runs[name].append(
                        {"join_s": joined, "sync_commits_per_s": sync_rate, "async_commits_per_s": async_rate}
                    )
                    print(f"{name:>7}: join {joined:.2f} s, commits {sync_rate:.0f}/s sync, {async_rate:.0f}/s async")
        finally:
            stop_broker(broker)
    median = {name: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for name, rs in runs.items()}
    ratios = {
        "join_speed (mock time / brokkr time)": median["mock"]["join_s"] / median["brokkr"]["join_s"],
        "sync_commits_per_s": median["brokkr"]["sync_commits_per_s"] / median["mock"]["sync_commits_per_s"],
        "async_commits_per_s": median["brokkr"]["async_commits_per_s"] / median["mock"]["async_commits_per_s"],
    }
    print(f"\nmedians of {args.repeat} alternating runs, {args.members} members, {args.commits} commits")
    for name, values in median.items():
        print(f"{name:>7}: " + ", ".join(f"{k} {v:.2f}" for k, v in values.items()))
    print("brokkr/mock (higher is better): " + ", ".join(f"{k} {v:.3f}" for k, v in ratios.items()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "runs": runs, "median": median, "ratios": ratios}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
