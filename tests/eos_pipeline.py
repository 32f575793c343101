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
supervisor (the test) starts it again, as one would in production.

A liveness watchdog bounds each transaction: librdkafka can block in
``send_offsets_to_transaction`` past its timeout when the group coordinator's broker
went down at the wrong moment (librdkafka issue #5456: the coordinator request's timeout
is never checked), a hang in the client, not in any broker. As a supervisor's liveness
check would, SIGALRM (its default action ends the process) restarts such a process."""

from __future__ import annotations

import signal
import sys
import time

from confluent_kafka import Consumer, Producer

#: Longer than a transaction ever takes here, shorter than the test's wait for progress.
WATCHDOG_S = 40


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
    signal.alarm(WATCHDOG_S)
    producer.init_transactions(30)
    signal.alarm(0)
    consumer.subscribe([source])
    last = time.monotonic()
    while time.monotonic() - last < float(idle_s):
        records = [m for m in consumer.consume(100, 0.2) if m.error() is None]
        if not records:
            continue
        last = time.monotonic()
        signal.alarm(WATCHDOG_S)
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
        signal.alarm(0)
        print("committed", len(records), flush=True)
    signal.alarm(WATCHDOG_S)
    consumer.close()


if __name__ == "__main__":
    main(*sys.argv[1:])
