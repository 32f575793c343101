"""Transactions in the lake: the ``brokkr`` data source reads committed records by default
(``kafka.isolation.level``, as Spark's Kafka source names it), from the files alone, and
the mirror never writes a record of an aborted or still-open transaction."""

from __future__ import annotations

import time

import pytest
from brokkr.plugins.sinks.spark import mirror
from brokkr.plugins.sinks.spark.datasource import plan_splits, read_split
from brokkr.plugins.sinks.spark.sink import sink_of

from tests.txn_wire import COMMITTED, UNVERIFIED, B, build_log, end_txn

pytest.importorskip("pyspark")

EVERYTHING = [b"p0", b"a1", b"a2", b"b1", b"c1", b"c2", b"a3", b"p1", b"b2"]


def written(brokkr_broker_factory, tmp_path, stop: bool = True):
    logs = tmp_path / "logs"
    broker = brokkr_broker_factory({"log.dirs": str(logs), **UNVERIFIED})
    broker.call(broker.broker.create_topic, "rc")
    build_log(broker)
    if stop:
        broker.stop()  # a producer snapshot at the log end, with B's open transaction in it
    return broker, logs


def values(df) -> list[bytes]:
    return [bytes(r.value) for r in df.orderBy("offset").collect()]


def test_the_data_source_reads_committed_records_by_default(brokkr_broker_factory, tmp_path, spark):
    _, logs = written(brokkr_broker_factory, tmp_path)
    reader = spark.read.format("brokkr")
    assert values(reader.load(str(logs))) == COMMITTED
    assert values(reader.option("kafka.isolation.level", "read_uncommitted").load(str(logs))) == EVERYTHING
    with pytest.raises(Exception, match="read_committed or read_uncommitted"):
        spark.read.format("brokkr").option("kafka.isolation.level", "serializable").load(str(logs)).collect()


def rows_read(path, **kwargs) -> list[bytes]:
    return [v.as_py() for split in plan_splits(path, **kwargs) for batch in read_split(split) for v in batch["value"]]


def test_without_a_snapshot_the_headers_are_replayed(brokkr_broker_factory, tmp_path):
    """As after a SIGKILL: no snapshot at the log end; the open transaction is found by
    replaying the batch headers (no Spark needed: the reader's own functions)."""
    broker, logs = written(brokkr_broker_factory, tmp_path, stop=False)
    assert not list((logs / "rc-0").glob("*.snapshot"))
    assert rows_read(logs) == COMMITTED
    assert rows_read(logs, read_committed=False) == EVERYTHING
    end_txn(broker, B, True, [("rc", 0)])
    assert rows_read(logs) == [*COMMITTED, b"b2"]
    assert rows_read(logs, starting_offset=5, ending_offset=12) == [b"c1", b"c2", b"p1"]


def test_the_mirror_writes_committed_records_only(brokkr_broker_factory, tmp_path, spark):
    _, logs = written(brokkr_broker_factory, tmp_path)
    lake = tmp_path / "lake"
    m = mirror.Mirror(spark, str(lake))
    done = list(mirror.backfill(m, logs))
    assert [(r.start, r.end) for r in done] == [(0, 12)]  # up to the last stable offset only
    assert m.commits.mirrored_offset("rc", 0) == 12
    assert values(spark.read.parquet(str(lake / "rc"))) == COMMITTED


class Recorder:
    """A mirror that records the ranges it is asked for."""

    def __init__(self):
        self.ranges = []

    def mirror(self, r):
        self.ranges.append((r.start, r.end))


def test_the_sink_hands_the_mirror_ranges_up_to_the_last_stable_offset_only(brokkr_broker_factory, tmp_path):
    """The sink's work file carries the last stable offset; the mirror process cuts closed
    segments and the active one there."""
    logs = tmp_path / "logs"
    config = {"log.dirs": str(logs), "brokkr.sink.lake": str(tmp_path / "lake"), "brokkr.sink.poll.ms": "100"}
    config.update({"log.segment.bytes": "300", **UNVERIFIED})
    broker = brokkr_broker_factory(config)
    sink = sink_of(broker.broker)
    broker.call(sink.stop)  # no mirror process: this test reads the work file itself
    broker.call(broker.broker.create_topic, "rc")
    build_log(broker)
    partition = broker.broker.partition("rc", 0)
    assert partition.last_stable_offset == 12 and len(partition.log.segments()) > 2
    broker.call(lambda: sink._refresh(sink._work_document()))
    recorder = Recorder()
    deadline = time.monotonic() + 0.5  # a few passes over the work file
    mirror.follow(recorder, sink.work_file, 0.05, 0, lambda: time.monotonic() > deadline)
    assert max(end for _, end in recorder.ranges) == 12
    covered = sorted(set(recorder.ranges))
    assert covered[0][0] == 0 and all(a[1] >= b[0] for a, b in zip(covered, covered[1:]))
