"""Transactional produce throughput: brokkr against librdkafka's mock cluster, and against
plain idempotent produce.

A confluent-kafka (librdkafka) Producer in this process sends ``--records`` records of
``--value-size`` bytes to a topic of one partition in three modes:

- ``idempotent``: ``enable.idempotence=true``, no transactions (the baseline);
- ``txn-100`` and ``txn-10000``: a transactional producer committing a transaction every
  100 (or 10,000) records (begin, produce, commit_transaction: AddPartitionsToTxn, EndTxn,
  the markers on every partition).

Each mode runs against a brokkr broker started as a subprocess and against librdkafka's
in-process mock cluster (``test.mock.num.brokers=1``, which serves transactions), the
targets interleaved ``--repeat`` times; medians are reported, with the brokkr/mock ratio
of each mode and brokkr's transactional/idempotent ratio. The clock runs from the first
produce() to the end of the last commit (or flush); init_transactions and one warm-up
transaction are excluded. Ratios, not absolute numbers, are what to compare across
machines (see produce.py).

    .venv-test/bin/python benchmarks/transactions.py [--records N] [--repeat 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import KafkaException, Producer

sys.path.insert(0, str(Path(__file__).parent))
from produce import create_topic, free_port, start_broker, stop_broker  # noqa: E402

MODES = {"idempotent": None, "txn-100": 100, "txn-10000": 10_000}
PARTITIONS = 1


def run_once(target: str, client: dict, topic: str, mode: str, run: int, args: argparse.Namespace) -> dict:
    """One measured run: records/s and transactions/s."""
    per_txn = MODES[mode]
    config = {**client, "linger.ms": 5, "batch.size": 1_000_000, "log_level": 4}
    if per_txn is None:
        config["enable.idempotence"] = True
    else:
        config["transactional.id"] = f"bench-{mode}-{run}"
    producer = Producer(config)
    value = b"x" * args.value_size
    errors: list = []

    def delivered(err, msg) -> None:
        if err is not None:
            errors.append(err)

    def send(n: int, offset: int) -> None:
        for i in range(n):
            while True:
                try:
                    producer.produce(topic, value, key=b"%d" % (offset + i), on_delivery=delivered)
                    break
                except BufferError:
                    producer.poll(0.01)
            producer.poll(0)

    if per_txn is not None:
        producer.init_transactions(30)
        producer.begin_transaction()  # warm-up: connections, metadata, the coordinator
        send(100, 0)
        producer.commit_transaction(30)
    else:
        send(1000, 0)
        producer.flush(30)
    start = time.perf_counter()
    if per_txn is None:
        send(args.records, 0)
        producer.flush(60)
        transactions = 0
    else:
        transactions = 0
        for first in range(0, args.records, per_txn):
            producer.begin_transaction()
            send(min(per_txn, args.records - first), first)
            producer.commit_transaction(60)
            transactions += 1
    elapsed = time.perf_counter() - start
    return {
        "records_per_s": args.records / elapsed,
        "txns_per_s": transactions / elapsed,
        "seconds": elapsed,
        "errors": len(errors),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000, help="measured records per run (default 100000)")
    parser.add_argument("--value-size", type=int, default=100, help="value bytes per record (default 100)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per target and mode; medians (default 3)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    args = parser.parse_args(argv)

    runs: dict[tuple[str, str], list[dict]] = {(t, m): [] for t in ("brokkr", "mock") for m in MODES}
    broker_log = tempfile.TemporaryFile(mode="w+")
    broker = None
    with tempfile.TemporaryDirectory(prefix="brokkr-bench-") as data_dir:
        port = free_port()
        bootstrap = f"127.0.0.1:{port}"
        try:
            broker = start_broker(port, data_dir, broker_log)
            for r in range(args.repeat):  # interleaved, so slow drifts hit every target alike
                for mode in MODES:
                    topic = f"bench-{mode}-{r}"
                    create_topic(bootstrap, topic)
                    runs[("brokkr", mode)].append(
                        run_once("brokkr", {"bootstrap.servers": bootstrap}, topic, mode, r, args)
                    )
                    mock = {"test.mock.num.brokers": 1, "topic.metadata.refresh.interval.ms": 1000}
                    runs[("mock", mode)].append(run_once("mock", mock, topic, mode, r, args))
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
                print(f"--- broker stderr ---\n{broker_stderr.rstrip()}", file=sys.stderr)

    median = {
        key: {m: statistics.median(r[m] for r in rs) for m in ("records_per_s", "txns_per_s", "errors")}
        for key, rs in runs.items()
    }
    print(f"{args.records} records of {args.value_size} B per run, {PARTITIONS} partition, median of {args.repeat}")
    print(f"{'mode':<12}{'brokkr rec/s':>14}{'mock rec/s':>14}{'brokkr/mock':>13}{'vs idempotent':>15}{'txn/s':>9}")
    for mode in MODES:
        b, m = median[("brokkr", mode)], median[("mock", mode)]
        vs = b["records_per_s"] / median[("brokkr", "idempotent")]["records_per_s"]
        print(
            f"{mode:<12}{b['records_per_s']:>14,.0f}{m['records_per_s']:>14,.0f}"
            f"{b['records_per_s'] / m['records_per_s']:>13.3f}{vs:>15.3f}{b['txns_per_s']:>9.1f}"
        )
    if args.json:
        doc = {
            "config": vars(args),
            "runs": {f"{t}/{m}": rs for (t, m), rs in runs.items()},
            "median": {f"{t}/{m}": v for (t, m), v in median.items()},
        }
        Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
    return 0 if all(v["errors"] == 0 for v in median.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
