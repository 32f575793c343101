"""Segment storage under real clients: many segments, restarts, a SIGKILL, a torn tail,
retention and DeleteRecords."""

from __future__ import annotations

import os
import struct
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, TopicPartition
from serve import Served

from .conftest import (
    DEFAULT_TIMEOUT,
    DeliveryReports,
    ck_admin,
    ck_consume,
    ck_consumer,
    ck_create_topic,
    ck_describe_topic_configs,
    ck_flush,
    ck_poll,
    ck_producer,
    kp_consumer,
    now_ms,
)


def log_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.log"))


def watermarks(bootstrap: str, topic: str) -> tuple[int, int]:
    consumer = ck_consumer(bootstrap)
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=DEFAULT_TIMEOUT)
    finally:
        consumer.close()


def read_from(bootstrap: str, topic: str, offset: int, count: int, **extra):
    consumer = ck_consumer(bootstrap, **extra)
    try:
        consumer.assign([TopicPartition(topic, 0, offset)])
        return ck_poll(consumer, count)
    finally:
        consumer.close()


def produce_numbered(bootstrap: str, topic: str, count: int, first_ts: int, per_batch: int = 1) -> None:
    """Records ``v00000``... with timestamps 10 ms apart, ``per_batch`` to a batch."""
    producer = ck_producer(bootstrap, **{"linger.ms": 0})
    reports = DeliveryReports()
    for i in range(count):
        producer.produce(topic, value=b"v%05d" % i, key=b"k%d" % i, timestamp=first_ts + i * 10, on_delivery=reports)
        if (i + 1) % per_batch == 0:
            ck_flush(producer)
    ck_flush(producer)
    assert not reports.errors


def test_clients_read_across_segments_from_any_offset_and_timestamp_and_after_a_restart(
    brokkr_broker_factory, topic_name, tmp_path
):
    data = tmp_path / "data"
    broker = brokkr_broker_factory({"log.dirs": str(data)})
    ck_create_topic(broker.bootstrap_servers, topic_name, config={"segment.bytes": "2048", "retention.ms": "-1"})
    first_ts = now_ms() - 60_000
    produce_numbered(broker.bootstrap_servers, topic_name, 300, first_ts, per_batch=7)
    assert len(log_files(data / f"{topic_name}-0")) >= 4

    def check(bootstrap: str) -> None:
        for offset in (0, 1, 57, 150, 299):
            [first, *_] = read_from(bootstrap, topic_name, offset, 1)
            assert (first.offset, first.value, first.timestamp) == (offset, b"v%05d" % offset, first_ts + offset * 10)
        consumer = ck_consumer(bootstrap)
        try:
            for i in (0, 42, 299):  # one lookup per request: a partition may appear once in ListOffsets
                [found] = consumer.offsets_for_times([TopicPartition(topic_name, 0, first_ts + i * 10 - 5)], timeout=10)
                assert found.offset == i
            late = consumer.offsets_for_times([TopicPartition(topic_name, 0, first_ts + 10**6)], timeout=10)
            assert late[0].offset == -1, "no record that late: the end (-1), as Kafka answers"
        finally:
            consumer.close()
        from kafka import TopicPartition as KTP

        kp = kp_consumer(bootstrap)
        try:
            tp = KTP(topic_name, 0)
            assert kp.offsets_for_times({tp: first_ts + 1234})[tp].offset == 124
            kp.assign([tp])
            kp.seek(tp, 200)
            batch = kp.poll(timeout_ms=5000, max_records=5)[tp]
            assert [m.offset for m in batch] == list(range(200, 200 + len(batch))) and batch
        finally:
            kp.close()
        records = ck_consume(bootstrap, topic_name, 300)
        assert [r.offset for r in records] == list(range(300))

    check(broker.bootstrap_servers)
    broker.stop()
    restarted = brokkr_broker_factory({"log.dirs": str(data)})
    check(restarted.bootstrap_servers)
    configs = ck_describe_topic_configs(restarted.bootstrap_servers, topic_name)
    assert configs["segment.bytes"].value == "2048" and configs["retention.ms"].value == "-1"
    assert watermarks(restarted.bootstrap_servers, topic_name) == (0, 300)


def test_every_acknowledged_record_survives_a_sigkill_exactly_once(tmp_path, topic_name):
    args = ("--override", "listeners=PLAINTEXT://127.0.0.1:0", "--override", "log.segment.bytes=65536")
    served = Served(*args, cwd=tmp_path)
    acked: dict[int, bytes] = {}
    stop = threading.Event()
    reports = DeliveryReports()

    def on_delivery(err, msg):
        reports(err, msg)
        if err is None:
            acked[msg.offset()] = msg.value()

    producer = ck_producer(served.address, acks=1, **{"linger.ms": 1, "message.timeout.ms": 3000})

    def produce() -> None:
        i = 0
        while not stop.is_set():
            try:
                producer.produce(topic_name, value=b"value-%08d" % i, on_delivery=on_delivery)
                i += 1
            except BufferError:
                pass
            producer.poll(0.0005 if i % 100 == 0 else 0)

    writer = threading.Thread(target=produce, daemon=True)
    writer.start()
    deadline = time.monotonic() + 30
    while len(acked) < 20_000 and time.monotonic() < deadline:
        time.sleep(0.05)
    served.proc.kill()  # SIGKILL: no flush, no checkpoint, no clean-shutdown marker
    served.proc.wait(timeout=10)
    time.sleep(0.3)
    stop.set()
    writer.join(timeout=10)
    producer.flush(10)
    assert len(acked) >= 1000, f"only {len(acked)} records acknowledged before the kill"
    assert not (tmp_path / "data" / ".kafka_cleanshutdown").exists()

    restarted = Served(*args, cwd=tmp_path)
    try:
        low, high = watermarks(restarted.address, topic_name)
        assert low == 0 and high >= max(acked) + 1
        records = ck_consume(restarted.address, topic_name, high, timeout=60)
        assert [r.offset for r in records] == list(range(high)), "contiguous offsets"
        stored = {r.offset: r.value for r in records}
        assert all(stored[offset] == value for offset, value in acked.items()), "every acknowledged record, in place"
        values = [r.value for r in records]
        assert len(set(values)) == len(values), "nothing twice"
    finally:
        restarted.proc.terminate()
        restarted.proc.wait(timeout=10)
    assert "recover" in restarted.output()


def test_a_torn_tail_and_a_corrupt_index_are_recovered_by_a_restarted_broker(
    brokkr_broker_factory, topic_name, tmp_path
):
    data = tmp_path / "data"
    broker = brokkr_broker_factory({"log.dirs": str(data), "log.index.interval.bytes": "100"})
    ck_create_topic(broker.bootstrap_servers, topic_name, config={"segment.bytes": "4096"})
    produce_numbered(broker.bootstrap_servers, topic_name, 200, now_ms())
    broker.stop()
    partition_dir = data / f"{topic_name}-0"
    logs = log_files(partition_dir)
    os.truncate(logs[-1], logs[-1].stat().st_size - 5)  # the last batch loses its tail
    index = logs[0].with_suffix(".index")
    index.write_bytes(struct.pack(">ii", 3, 10**6) * (index.stat().st_size // 8))

    restarted = brokkr_broker_factory({"log.dirs": str(data), "log.index.interval.bytes": "100"})
    low, high = watermarks(restarted.bootstrap_servers, topic_name)
    assert low == 0 and high == 199, "only the torn batch (one record: linger.ms=0) is gone"
    records = ck_consume(restarted.bootstrap_servers, topic_name, 199)
    assert [r.value for r in records] == [b"v%05d" % i for i in range(199)]
    assert [r.offset for r in read_from(restarted.bootstrap_servers, topic_name, 17, 1)] == [17]
    produce_numbered(restarted.bootstrap_servers, topic_name, 1, now_ms())
    assert watermarks(restarted.bootstrap_servers, topic_name) == (0, 200)


def test_retention_deletes_the_segments_past_retention_ms(brokkr_broker_factory, topic_name, tmp_path):
    data = tmp_path / "data"
    broker = brokkr_broker_factory({"log.dirs": str(data), "log.retention.check.interval.ms": "200"})
    ck_create_topic(broker.bootstrap_servers, topic_name, config={"segment.bytes": "1024", "retention.ms": "600000"})
    now = now_ms()
    produce_numbered(broker.bootstrap_servers, topic_name, 60, now - 3_600_000)  # an hour old: past retention
    produce_numbered(broker.bootstrap_servers, topic_name, 60, now)
    partition = broker.broker.topics[topic_name].partitions[0]
    deadline = time.monotonic() + 10
    while broker.call(lambda: partition.log.log_start_offset) == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    segments = broker.call(partition.log.segments)
    start = segments[0].base_offset
    # Every segment holding only hour-old records went; the first holding a recent one (offset 60) stays.
    assert 0 < start <= 60 < segments[0].next_offset
    assert all(s.max_timestamp >= now for s in segments)
    assert watermarks(broker.bootstrap_servers, topic_name) == (start, 120)
    assert {p.name for p in log_files(data / f"{topic_name}-0")} == {Path(s.path).name for s in segments}
    records = ck_consume(broker.bootstrap_servers, topic_name, 120 - start)
    assert records[0].offset == start and records[-1].offset == 119
    assert all(r.timestamp >= now for r in records if r.offset >= 60)


def test_delete_records_through_both_admin_clients(brokkr_broker_factory, topic_name):
    broker = brokkr_broker_factory({"log.segment.bytes": "1024"})
    ck_create_topic(broker.bootstrap_servers, topic_name)
    produce_numbered(broker.bootstrap_servers, topic_name, 100, now_ms(), per_batch=5)
    admin = ck_admin(broker.bootstrap_servers)
    [future] = admin.delete_records([TopicPartition(topic_name, 0, 30)], request_timeout=10).values()
    assert future.result(timeout=DEFAULT_TIMEOUT).low_watermark == 30
    assert watermarks(broker.bootstrap_servers, topic_name) == (30, 100)
    [first] = read_from(broker.bootstrap_servers, topic_name, 0, 1, **{"auto.offset.reset": "earliest"})
    assert first.offset == 30, "offset 0 is out of range: the consumer resets to the new start"
    [future] = admin.delete_records([TopicPartition(topic_name, 0, 101)], request_timeout=10).values()
    with pytest.raises(KafkaException, match="OFFSET_OUT_OF_RANGE"):
        future.result(timeout=DEFAULT_TIMEOUT)

    from kafka import TopicPartition as KTP
    from kafka.admin import KafkaAdminClient

    kp_admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers, request_timeout_ms=10000)
    try:
        result = kp_admin.delete_records({KTP(topic_name, 0): 75})
        assert result[KTP(topic_name, 0)]["low_watermark"] == 75
    finally:
        kp_admin.close()
    assert watermarks(broker.bootstrap_servers, topic_name) == (75, 100)
    partition = broker.broker.topics[topic_name].partitions[0]
    assert broker.call(partition.log.segments)[0].base_offset > 0, "segments below the new start are gone"
