"""Child processes for the transaction tests that SIGKILL something: a broker whose
markers never get written (so a transaction stays in PrepareCommit until it is killed)
and a transactional producer that kills itself with its transaction open.

Run as ``python tests/txn_processes.py broker <log dir> [port] [never|written]`` (prints
``listening <address>``),
``python tests/txn_processes.py producer <bootstrap> <transactional id> <timeout ms>``
(prints ``produced`` once its records are acknowledged, then SIGKILLs itself) or
``python tests/txn_processes.py pipeline <bootstrap>``: an exactly-once
consume-transform-produce loop from topic ``in`` to ``out`` (group ``pipe``, transactional
id ``pipe``), one transaction per poll, until nothing arrives for 3 s (or it is killed)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys


def broker(log_dir: str, port: str = "0", markers: str = "never") -> None:
    """A broker; with ``markers=never`` it never writes a transaction marker."""
    from brokkr.core.broker import Broker
    from brokkr.plugins.transactions.markers import MarkerWriter

    async def never(self, *args):  # the broker dies before any marker is written
        await asyncio.Event().wait()

    if markers == "never":
        MarkerWriter.write = never

    async def main():
        b = Broker(
            {
                "listeners": f"PLAINTEXT://127.0.0.1:{port}",
                "group.initial.rebalance.delay.ms": 0,
                "log.dirs": log_dir,
                "num.partitions": 3,
                "transaction.state.log.num.partitions": 5,
            }
        )
        await b.start()
        print("listening", b.bootstrap_servers, flush=True)
        await b.wait_stopped()

    asyncio.run(main())


def producer(bootstrap: str, txn_id: str, timeout_ms: str) -> None:
    from confluent_kafka import Producer

    p = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": txn_id, "transaction.timeout.ms": int(timeout_ms)}
    )
    p.init_transactions(10)
    p.begin_transaction()
    for i in range(5):
        p.produce("a", b"open-%d" % i, partition=0)
    assert p.flush(10) == 0
    print("produced", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def pipeline(bootstrap: str) -> None:
    import time

    from confluent_kafka import Consumer, Producer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "pipe",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    consumer.assign([TopicPartition("in", i) for i in range(3)])  # from the group's committed offsets
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "pipe", "transaction.timeout.ms": 10000})
    try:
        producer.init_transactions(30)
    except Exception:  # the broker is away (being restarted): the test starts us again
        sys.exit(2)
    idle_since = time.monotonic()
    while time.monotonic() - idle_since < 3:
        messages = [m for m in consumer.consume(20, 0.2) if not m.error()]
        if not messages:
            continue
        idle_since = time.monotonic()
        producer.begin_transaction()
        for m in messages:
            producer.produce("out", b"out-" + m.value(), partition=m.partition())
        producer.send_offsets_to_transaction(
            consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 30
        )
        producer.commit_transaction(30)
    print("idle", flush=True)


if __name__ == "__main__":
    {"broker": broker, "producer": producer, "pipeline": pipeline}[sys.argv[1]](*sys.argv[2:])
