"""Child processes for the transaction tests that SIGKILL something: a broker whose
markers never get written (so a transaction stays in PrepareCommit until it is killed)
and a transactional producer that kills itself with its transaction open.

Run as ``python tests/txn_processes.py broker <log dir>`` (prints ``listening <address>``)
or ``python tests/txn_processes.py producer <bootstrap> <transactional id> <timeout ms>``
(prints ``produced`` once its records are acknowledged, then SIGKILLs itself). The
exactly-once pipeline is tests/eos_pipeline.py."""

from __future__ import annotations

import asyncio
import os
import signal
import sys


def broker(log_dir: str) -> None:
    """A broker that never writes a transaction marker."""
    from brokkr.core.broker import Broker
    from brokkr.plugins.transactions.markers import MarkerWriter

    async def never(self, *args):  # the broker dies before any marker is written
        await asyncio.Event().wait()

    MarkerWriter.write = never

    async def main():
        b = Broker(
            {
                "listeners": "PLAINTEXT://127.0.0.1:0",
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


if __name__ == "__main__":
    {"broker": broker, "producer": producer}[sys.argv[1]](*sys.argv[2:])
