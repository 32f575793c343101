"""A consume-transform-produce pipeline with exactly-once semantics, as Kafka's
documentation writes one: a read_committed consumer in a group (a static member, so a
restarted process takes its place at once), a transactional producer, and each batch's
output records and input offsets committed in one transaction
(``send_offsets_to_transaction``). The transformation appends ``!`` to each value.

Run as ``python tests/eos_pipeline.py <bootstrap> <group> <transactional id> <input> <output> <idle s>``;
prints ``produced`` once a transaction's output is flushed to the broker (and then waits
50 ms, the moment a test kills it to leave output whose offsets are not committed),
``committed <n>`` after each transaction, and exits once the input has been idle for
``idle s`` seconds. Any error ends the process with a non-zero status: its
supervisor (the test) starts it again, as one would in production."""

from __future__ import annotations

import sys
import time

from confluent_kafka import Consumer, Producer


def main(bootstrap: str, group: str, txn_id: str, source: str, sink: str, idle_s: str) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.instance.id": f"{txn_id}-member",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
        }
    )
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
    producer.init_transactions(30)
    consumer.subscribe([source])
    last = time.monotonic()
    while time.monotonic() - last < float(idle_s):
        records = [m for m in consumer.consume(100, 0.2) if m.error() is None]
        if not records:
            continue
        last = time.monotonic()
        producer.begin_transaction()
        for m in records:
            producer.produce(sink, m.value() + b"!", key=m.key(), partition=m.partition())
        producer.flush(30)  # the output is in the log, in the open transaction
        print("produced", flush=True)
        time.sleep(0.05)
        producer.send_offsets_to_transaction(
            consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 30
        )
        producer.commit_transaction(30)
        print("committed", len(records), flush=True)
    consumer.close()


if __name__ == "__main__":
    main(*sys.argv[1:])
