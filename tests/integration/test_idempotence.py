"""Idempotent producers with real clients: confluent-kafka delivers every record exactly
once and in order while the broker restarts on the same port and log dirs (stopped, and
SIGKILLed); kafka-python's default producer is idempotent."""

from __future__ import annotations

import time

from brokkr.core.plugins import hookimpl
from confluent_kafka import TopicPartition
from serve import Served

from .conftest import (
    DEFAULT_TIMEOUT,
    DeliveryReports,
    ck_consume,
    ck_consumer,
    ck_create_topic,
    ck_flush,
    ck_producer,
    kp_consume,
    kp_producer,
)

PER_ROUND = 2000


def high_watermark(bootstrap: str, topic: str) -> int:
    consumer = ck_consumer(bootstrap)
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=DEFAULT_TIMEOUT, cached=False)[1]
    finally:
        consumer.close()


class HeldAcks:
    """acks=all writes are stored but never acknowledged (as if the followers never caught
    up): their producer must retry them, from another broker run."""

    @hookimpl
    def brokkr_produce_complete(self):
        return False


def test_confluent_idempotent_producer_delivers_exactly_once_across_restarts(
    brokkr_broker_factory, tmp_path, topic_name
):
    """Numbered records, acks=all, through four broker runs on one port and log dir: the
    first stores a batch without acknowledging it and is stopped (so the producer retries
    that batch against the second, which must recognise it from the producer snapshot);
    the third is SIGKILLed mid-flight (its state is replayed from the log)."""
    data = tmp_path / "data"
    broker = brokkr_broker_factory({"log.dirs": str(data)}, plugins=[HeldAcks()])
    port = broker.listeners[0].port
    same_place = {"log.dirs": str(data), "listeners": f"PLAINTEXT://127.0.0.1:{port}"}
    bootstrap = f"127.0.0.1:{port}"
    ck_create_topic(bootstrap, topic_name)
    reports = DeliveryReports()
    producer = ck_producer(
        bootstrap,
        **{
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 1,
            "message.timeout.ms": 120000,
            "reconnect.backoff.ms": 20,
            "reconnect.backoff.max.ms": 200,
        },
    )
    values: list[bytes] = []

    def produce_round() -> None:
        """Queue the next numbered records; many are in flight when this returns."""
        for _ in range(PER_ROUND):
            values.append(b"%06d" % len(values))
            producer.produce(topic_name, value=values[-1], on_delivery=reports)
            producer.poll(0)

    produce_round()
    partition = broker.broker.topics[topic_name].partitions[0]
    deadline = time.monotonic() + DEFAULT_TIMEOUT
    while broker.call(lambda: partition.log.log_end_offset) == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    held = broker.call(lambda: partition.log.log_end_offset)
    assert held > 0, "a batch is stored, unacknowledged"
    broker.stop()  # the producer must retry the held batch and those behind it
    produce_round()  # queued while no broker listens
    broker = brokkr_broker_factory(same_place)
    ck_flush(producer, 60)
    assert high_watermark(bootstrap, topic_name) == len(values), f"the {held} held records are not stored twice"
    produce_round()
    broker.stop()
    served = Served(*(f"--override={k}={v}" for k, v in same_place.items()), cwd=tmp_path)
    try:
        produce_round()
        ck_flush(producer, 60)
        produce_round()
    finally:
        served.kill()  # SIGKILL: no producer snapshot at the log end; the state is replayed
    broker = brokkr_broker_factory(same_place)
    produce_round()
    ck_flush(producer, 90)

    assert reports.errors == []
    assert len(reports.reports) == len(values)
    assert high_watermark(bootstrap, topic_name) == len(values), "nothing stored twice"
    records = ck_consume(bootstrap, topic_name, len(values), timeout=60)
    assert [r.value for r in records] == values, "every record exactly once, in order"


def test_kafka_python_default_producer_is_idempotent(brokkr_broker, topic_name):
    bootstrap = brokkr_broker.bootstrap_servers
    ck_create_topic(bootstrap, topic_name)
    producer = kp_producer(bootstrap)  # kafka-python 3.x: enable_idempotence and acks=all by default
    try:
        for i in range(10):
            producer.send(topic_name, value=b"v%d" % i, partition=0)
            if i % 3 == 0:
                producer.flush(timeout=DEFAULT_TIMEOUT)
        producer.flush(timeout=DEFAULT_TIMEOUT)
        producer_id = producer._transaction_manager.producer_id_and_epoch.producer_id
    finally:
        producer.close(timeout=5)

    partition = brokkr_broker.broker.topics[topic_name].partitions[0]
    state = brokkr_broker.call(
        lambda: {pid: (e.producer_epoch, e.last_seq) for pid, e in partition.producers.producers.items()}
    )
    assert state == {producer_id: (0, 9)}, "the partition tracks kafka-python's producer id and sequences"
    assert [r.value for r in kp_consume(bootstrap, topic_name, 10)] == [b"v%d" % i for i in range(10)]
