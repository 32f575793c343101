"""The ``brokkr`` PySpark data source: logs written by a real client through brokkr, and
by Kafka itself, read back with Spark."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from brokkr.core.protocol.records import build_batch
from brokkr.plugins.sinks.spark import BrokkrDataSource
from brokkr.plugins.sinks.spark.datasource import NAME, SCHEMA, plan_splits
from brokkr.plugins.storage.segment.files import LOG_SUFFIX, segment_file
from confluent_kafka import Producer
from pyspark.sql import functions as F

FIXTURES = Path(__file__).parent.parent / "fixtures" / "kafka-logs"
CODECS = ("uncompressed", "gzip", "snappy", "lz4", "zstd")
COLUMNS = ["topic", "partition", "offset", "key", "value", "headers", "ts", "timestampType"]


def rows(df):
    """(topic, partition, offset) -> (key, value, headers, timestamp ms, timestamp type)."""
    out = {}
    for r in df.select(*COLUMNS[:6], F.unix_millis("timestamp").alias("ts"), "timestampType").collect():
        coords = (r.topic, r.partition, r.offset)
        assert coords not in out, f"{coords} read twice"
        headers = [(h.key, None if h.value is None else bytes(h.value)) for h in r.headers]
        key = None if r.key is None else bytes(r.key)
        value = None if r.value is None else bytes(r.value)
        out[coords] = (key, value, headers, r.ts, r.timestampType)
    return out


def produce(broker, topics: dict[str, dict], per_partition: int) -> dict:
    """Records with keys, values, headers and timestamps, in many batches; returns what
    was stored, as :func:`rows` reads it."""
    for name, config in topics.items():
        broker.call(broker.broker.create_topic, name, 2, config)
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "linger.ms": 5,
            "batch.num.messages": 17,
            "enable.idempotence": True,
        }
    )
    expected = {}
    base = int(time.time() * 1000) - 100_000

    def delivered(err, msg, headers):  # librdkafka's delivery reports carry no headers
        assert err is None, err
        append_time = msg.timestamp()[0] == 2  # TIMESTAMP_LOG_APPEND_TIME
        expected[(msg.topic(), msg.partition(), msg.offset())] = (
            msg.key(),
            msg.value(),
            headers,
            msg.timestamp()[1],
            1 if append_time else 0,
        )

    for name in topics:
        for i in range(per_partition * 2):
            key = None if i % 11 == 0 else b"key-%d" % i
            value = None if i % 13 == 0 else (b"value %d " % i) * (1 + i % 7)
            headers = [("h", b"%d" % i), ("empty", None)] if i % 3 == 0 else None
            producer.produce(
                name,
                value,
                key,
                partition=i % 2,
                timestamp=base + i * 10,
                headers=headers,
                on_delivery=lambda err, msg, h=headers or []: delivered(err, msg, h),
            )
            if i % 40 == 39:
                producer.flush(10)
    assert producer.flush(15) == 0
    return expected


def test_a_multi_segment_log_of_every_codec_is_read_exactly_once(spark, brokkr_broker_factory, tmp_path):
    log_dir = tmp_path / "logs"
    broker = brokkr_broker_factory({"log.dirs": str(log_dir), "log.segment.bytes": 4096})
    topics = {f"t-{codec}": {"compression.type": codec} for codec in CODECS}
    topics["t-append-time"] = {"message.timestamp.type": "LogAppendTime", "compression.type": "zstd"}
    topics["big"] = {"segment.bytes": 1 << 20, "index.interval.bytes": 256, "compression.type": "lz4"}
    expected = produce(broker, topics, per_partition=120)
    broker.stop()
    assert len(expected) == len(topics) * 240

    df = spark.read.format("brokkr").load(str(log_dir))
    assert df.schema == SCHEMA
    assert df.rdd.getNumPartitions() > len(topics) * 2  # one per segment, at least
    got = rows(df)
    assert got == expected
    assert {t for _, _, _, _, t in got.values()} == {0, 1}

    # producer fields: idempotent, so sequences follow the offsets from 0 in each partition
    seq = df.filter("topic = 't-gzip' and partition = 1").select("offset", "sequence", "producerId").collect()
    assert sorted((r.offset, r.sequence) for r in seq) == [(i, i) for i in range(120)]
    assert len({r.producerId for r in seq}) == 1 and seq[0].producerId >= 0

    # a topic filter, one partition directory, one segment file
    assert spark.read.format("brokkr").option("topic", "t-zstd,t-lz4").load(str(log_dir)).count() == 480
    one = spark.read.format("brokkr").load(str(log_dir / "t-snappy-0"))
    assert rows(one) == {k: v for k, v in expected.items() if k[:2] == ("t-snappy", 0)}
    assert len(list((log_dir / "t-uncompressed-0").glob("*.log"))) > 1
    first = segment_file(log_dir / "t-uncompressed-0", 0, LOG_SUFFIX)
    offsets = [r.offset for r in spark.read.format("brokkr").load(str(first)).select("offset").collect()]
    assert offsets and sorted(offsets) == list(range(len(offsets))) and len(offsets) < 120

    # offset bounds, per partition, end exclusive
    def bounded():  # a new reader each time: DataFrameReader.option changes the reader
        return spark.read.format("brokkr").option("startingOffset", 23).option("endingOffset", 101)

    got = rows(bounded().option("topic", "t-gzip").load(str(log_dir)))
    assert got == {k: v for k, v in expected.items() if k[0] == "t-gzip" and 23 <= k[2] < 101}

    # a segment split into byte ranges at batch boundaries from its offset index
    big = str(log_dir / "big-0")
    splits = plan_splits(big, max_bytes_per_partition=1024)
    assert len(splits) > 3 and len({s.path for s in splits}) == 1
    split_df = spark.read.format("brokkr").option("maxBytesPerPartition", 1024).load(big)
    assert split_df.rdd.getNumPartitions() == len(splits)
    assert rows(split_df) == {k: v for k, v in expected.items() if k[:2] == ("big", 0)}
    ranged = rows(bounded().option("maxBytesPerPartition", 1024).load(big))
    assert ranged == {k: v for k, v in expected.items() if k[:2] == ("big", 0) and 23 <= k[2] < 101}
    assert len(plan_splits(big, max_bytes_per_partition=1024, starting_offset=60, ending_offset=70)) < len(splits)


def test_kafka_written_transactional_log_skips_the_commit_marker(spark):
    df = spark.read.format("brokkr").load(str(FIXTURES / "_confluent-ksql-default__command_topic-0"))
    [row] = df.collect()
    assert (row.topic, row.partition, row.offset) == ("_confluent-ksql-default__command_topic", 0, 0)
    assert bytes(row.key) == b'"stream/`KSQL_PROCESSING_LOG`/create"'
    assert bytes(row.value).startswith(b'{"statement":"CREATE STREAM KSQL_PROCESSING_LOG')
    assert (row.producerId, row.producerEpoch, row.sequence) == (0, 0, 0)
    assert row.timestampType == 0 and row.headers == []
    ms = df.select(F.unix_millis("timestamp").alias("ms")).first().ms
    assert ms == 1728561475261


def test_kafka_written_gzip_log_decodes(spark):
    df = spark.read.format("brokkr").load(str(FIXTURES / "dspiderTask-2"))
    assert df.count() >= 198
    assert df.filter("value is null").count() == 0
    offsets = sorted(r.offset for r in df.select("offset").collect())
    assert offsets == sorted(set(offsets)) and offsets[0] == 0


def test_a_torn_tail_is_never_read(spark, tmp_path):
    directory = tmp_path / "torn-0"
    directory.mkdir()
    batches = [
        build_batch([(b"k%d" % i, b"v%d" % j) for j in range(3)], base_offset=3 * i, timestamp=1000 + i)
        for i in range(4)
    ]
    log = segment_file(directory, 0, LOG_SUFFIX)
    log.write_bytes(b"".join(batches[:3]) + batches[3][:-5])  # the last batch torn
    df = spark.read.format("brokkr").load(str(tmp_path))
    assert sorted(r.offset for r in df.select("offset").collect()) == list(range(9))
    log.write_bytes(b"".join(batches) + bytes(40))  # a zero-filled end, as a crash may leave
    assert df.count() == 9  # what is read was fixed when the DataFrame was made
    assert spark.read.format("brokkr").load(str(tmp_path)).count() == 12
    shutil.copy(log, segment_file(directory, 12, LOG_SUFFIX))  # a later segment: a zero-filled middle fails
    with pytest.raises(Exception, match="below the minimum"):
        spark.read.format("brokkr").load(str(tmp_path)).count()


def test_registration_and_empty_logs(spark, tmp_path):
    assert BrokkrDataSource.name() == NAME == "brokkr"
    assert spark.read.format("brokkr").load(str(tmp_path)).count() == 0
    with pytest.raises(Exception, match="path"):
        spark.read.format("brokkr").load().count()
