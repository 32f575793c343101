"""Produce with a real client to an embedded broker that mirrors into a Parquet lake through
Spark, then query the lake with Spark SQL.

    pip install -e '.[spark]' confluent-kafka
    python examples/spark_mirror/mirror_and_query.py [WORKDIR]
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from brokkr.core.broker import BrokerThread
from brokkr.plugins.sinks.spark.mirror import CommitLog, default_commit_dir, spark_session
from confluent_kafka import Producer


def main() -> None:
    work = Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="brokkr-spark-mirror-"))
    lake = work / "lake"
    config = {
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "log.dirs": str(work / "logs"),
        "num.partitions": "2",
        "log.segment.bytes": "65536",
        "brokkr.sink.lake": str(lake),  # turns the Spark sink on
        "brokkr.sink.spark.master": "local[2]",
        "brokkr.sink.active.interval.ms": "1000",  # also mirror the active segment every second
    }
    with BrokerThread(config) as broker:
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "compression.type": "zstd"})
        for i in range(1000):
            producer.produce("orders", key=f"customer-{i % 10}".encode(), value=f'{{"amount": {i}}}'.encode())
        producer.flush()
        del producer  # no reconnection attempts once the broker is gone
        ends = {p.index: p.high_watermark for p in broker.broker.topics["orders"].partitions}
        print(f"produced 1000 records to {broker.bootstrap_servers}; log end offsets {ends}")
        commits = CommitLog(default_commit_dir(str(lake)))
        deadline = time.monotonic() + 120
        while any(commits.mirrored_offset("orders", p) < end for p, end in ends.items()):
            if time.monotonic() > deadline:
                raise SystemExit("the mirror did not catch up in time")
            time.sleep(0.5)
        print(f"mirrored into {lake}")

    spark = spark_session("local[2]", "brokkr-example")
    spark.read.parquet(str(lake / "orders")).createOrReplaceTempView("orders")
    spark.sql(
        """SELECT CAST(key AS STRING) AS customer, count(*) AS orders,
                  sum(get_json_object(CAST(value AS STRING), '$.amount')) AS total
           FROM orders GROUP BY customer ORDER BY customer"""
    ).show()
    spark.stop()


if __name__ == "__main__":
    main()
