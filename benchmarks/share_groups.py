"""Share-group consumption (KIP-932) beside a classic consumer group, same topic, same run.

A `brokkr serve` subprocess holds one topic of --partitions partitions with --records
records of 100 B (produced once, in batches of up to 1,000). Each round reads all of them:

- classic: one confluent-kafka Consumer (classic protocol, a new group each round,
  auto.offset.reset=earliest, auto commit) until it has every record;
- share:   one confluent-kafka ShareConsumer (implicit acknowledgement: each poll accepts the
  records of the one before, written to ``__share_group_state`` before it is answered), in
  a new share group each round with share.auto.offset.reset=earliest, until it has every record.

Records per second of each, medians over --repeat rounds (alternating), and the ratio
share/classic. The share path does more per record by design (acquire, lock, acknowledge,
write the state), so a ratio below 1 is expected.

    .venv/bin/python benchmarks/share_groups.py [--records 200000] [--partitions 1] [--repeat 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid

from confluent_kafka import Consumer, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType
from produce import free_port, start_broker, stop_broker  # benchmarks/ is the script's directory

TOPIC = "share-bench"
QUIET = {"log_level": 3}


def prepare(bootstrap: str, records: int, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    admin.create_topics([NewTopic(TOPIC, partitions, 1)])[TOPIC].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.num.messages": 1000, **QUIET})
    value = b"x" * 100
    for i in range(records):
        while True:
            try:
                producer.produce(TOPIC, value=value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(60):
        raise RuntimeError("could not produce the records")


def classic(bootstrap: str, records: int, timeout: float) -> float:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"classic-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            **QUIET,
        }
    )
    c.subscribe([TOPIC])
    try:
        return _consume(lambda: c.consume(1000, 0.5), records, timeout)
    finally:
        c.close()


def share(bootstrap: str, records: int, timeout: float) -> float:
    group = f"share-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    entry = ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)
    for f in admin.incremental_alter_configs(
        [ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])]
    ).values():
        f.result(30)
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, **QUIET})
    c.subscribe([TOPIC])
    try:
        return _consume(lambda: c.poll(0.5), records, timeout)
    finally:
        c.close()


def _consume(poll, records: int, timeout: float) -> float:
    """Records per second from the first record received to the last."""
    got, first, deadline = 0, None, time.monotonic() + timeout
    while got < records:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {got} of {records} records within {timeout} s")
        for m in poll() or []:
            if m.error() is None:
                first = first or time.monotonic()
                got += 1
    return got / max(time.monotonic() - first, 1e-9)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--json")
    args = parser.parse_args()

    port = free_port()
    with tempfile.TemporaryDirectory() as data:
        proc = start_broker(
            port,
            data,
            sys.stderr,
            {
                "share.coordinator.state.topic.num.partitions": "1",
                "offsets.topic.num.partitions": "1",
                "group.initial.rebalance.delay.ms": "0",
            },
        )
        bootstrap = f"127.0.0.1:{port}"
        try:
            prepare(bootstrap, args.records, args.partitions)
            runs: dict[str, list[float]] = {"classic": [], "share": []}
            for _ in range(args.repeat):
                runs["classic"].append(classic(bootstrap, args.records, args.timeout))
                runs["share"].append(share(bootstrap, args.records, args.timeout))
        finally:
            stop_broker(proc)
    result = {name: statistics.median(values) for name, values in runs.items()}
    result["ratio"] = result["share"] / result["classic"]
    print(f"{args.records} records x 100 B, {args.partitions} partition(s), median of {args.repeat}:")
    print(f"  classic consumer group: {result['classic']:>10,.0f} records/s")
    print(f"  share group:            {result['share']:>10,.0f} records/s")
    print(f"  share/classic:          {result['ratio']:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": runs, **result}, f, indent=2)


if __name__ == "__main__":
    main()
