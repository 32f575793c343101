"""Compression end to end with real clients: every producer codec crossed with every topic
``compression.type``, written by confluent-kafka (librdkafka) and by kafka-python and read
back by both, and LogAppendTime on compressed batches.

The matrix is written and read once per module (one broker, one topic per case, one
consumer per client for all topics); each test then checks its own case.
"""

from __future__ import annotations

import collections
import itertools
import time
from typing import NamedTuple

import pytest
from brokkr.core.broker import BrokerThread
from brokkr.core.compression import COMPRESSION_TYPE_IDS
from brokkr.core.plugins import hookimpl
from brokkr.core.protocol.frames import request_spec
from brokkr.core.protocol.records import iter_batches_untrusted
from brokkr.core.testing import EPHEMERAL, RawClient
from confluent_kafka import OFFSET_BEGINNING, TopicPartition
from confluent_kafka.admin import NewTopic
from wire import API_VERSIONS, FETCH, fetch_body

from .conftest import (
    DEFAULT_TIMEOUT,
    LOG_APPEND_TIME,
    DeliveryReports,
    Rec,
    Spec,
    assert_records_match,
    ck_admin,
    ck_consumer,
    ck_create_topic,
    ck_flush,
    ck_producer,
    ck_rec,
    kp_consumer,
    kp_producer,
    kp_rec,
    now_ms,
    record_specs,
)

pytestmark = [
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]

CLIENTS = ("confluent", "kafka-python")
PRODUCER_CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
TOPIC_TYPES = ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")
CODEC_IDS = {"none": 0, **COMPRESSION_TYPE_IDS}


FIND_COORDINATOR = 10


def matrix_topic(client: str, codec: str, topic_type: str) -> str:
    return f"matrix-{client}-{codec}-{topic_type}"


def codec_sent(client: str, codec: str, api_keys: set[int]) -> str:
    """The codec ``client`` really writes when asked for ``codec``. librdkafka enables lz4
    only for brokers that advertise FindCoordinator (its feature map dates lz4 support by
    that API) and otherwise sends lz4 batches uncompressed."""
    if client == "confluent" and codec == "lz4" and FIND_COORDINATOR not in api_keys:
        return "none"
    return codec


class ReceivedCodecs:
    """A plugin that notes the codec of every batch produced, per topic, and validates nothing."""

    def __init__(self) -> None:
        self.by_topic: dict[str, set[int]] = collections.defaultdict(set)

    @hookimpl(tryfirst=True)
    def brokkr_validate_records(self, partition, records):
        self.by_topic[partition.topic.name].update(h.codec for h in iter_batches_untrusted(records))


class Written(NamedTuple):
    specs: list[Spec]
    window: tuple[int, int]  # the client clock while the producer stamped records
    errors: list  # delivery errors


class Matrix(NamedTuple):
    written: dict[str, Written]
    read: dict[str, dict[str, list[Rec]]]  # reader -> topic -> records
    sent_codecs: dict[str, set[int]]  # topic -> codecs of the batches produced
    stored_codecs: dict[str, set[int]]  # topic -> codecs of its stored batches
    api_keys: set[int]  # the APIs the broker advertises


def produce(client: str, bootstrap: str, codec: str, topics: list[str]) -> dict[str, Written]:
    """The record specs to each of ``topics`` with one producer of ``client`` using ``codec``."""
    specs = record_specs(null_header_values=client == "confluent")
    before = now_ms()
    if client == "confluent":
        reports = DeliveryReports()
        producer = ck_producer(bootstrap, **{"compression.type": codec})
        for t, s in itertools.product(topics, specs):
            producer.produce(
                t, key=s.key, value=s.value, headers=s.headers, partition=0, on_delivery=reports, **_stamp(s)
            )
        ck_flush(producer)
        errors = reports.errors
    else:
        producer = kp_producer(bootstrap, compression_type=None if codec == "none" else codec)
        try:
            futures = [
                producer.send(t, key=s.key, value=s.value, headers=s.headers, partition=0, timestamp_ms=s.timestamp)
                for t, s in itertools.product(topics, specs)
            ]
            producer.flush(timeout=DEFAULT_TIMEOUT)
            errors = [f.exception for f in futures if f.failed()]
        finally:
            producer.close(timeout=5)
    window = (before, now_ms())
    return {t: Written(specs, window, errors) for t in topics}


def _stamp(spec: Spec) -> dict:
    return {} if spec.timestamp is None else {"timestamp": spec.timestamp}


def read_confluent(bootstrap: str, topics: list[str], count: int) -> dict[str, list[Rec]]:
    consumer = ck_consumer(bootstrap)
    out: dict[str, list[Rec]] = {t: [] for t in topics}
    try:
        consumer.assign([TopicPartition(t, 0, OFFSET_BEGINNING) for t in topics])
        deadline = time.monotonic() + 3 * DEFAULT_TIMEOUT
        while sum(map(len, out.values())) < count and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None:
                assert msg.error() is None, msg.error()
                out[msg.topic()].append(ck_rec(msg))
    finally:
        consumer.close()
    return out


def read_kafka_python(bootstrap: str, topics: list[str], count: int) -> dict[str, list[Rec]]:
    from kafka import TopicPartition as KTP

    consumer = kp_consumer(bootstrap)
    out: dict[str, list[Rec]] = {t: [] for t in topics}
    try:
        partitions = [KTP(t, 0) for t in topics]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        deadline = time.monotonic() + 3 * DEFAULT_TIMEOUT
        while sum(map(len, out.values())) < count and time.monotonic() < deadline:
            for tp, messages in consumer.poll(timeout_ms=1000).items():
                out[tp.topic].extend(kp_rec(m) for m in messages)
    finally:
        consumer.close()
    return out


def stored_codecs(bootstrap: str, topic: str) -> set[int]:
    with RawClient(bootstrap) as c:
        records = c.request(FETCH, 12, fetch_body(topic)).responses[0].partitions[0].records
    return {h.codec for h in iter_batches_untrusted(records)}


def advertised_api_keys(bootstrap: str) -> set[int]:
    with RawClient(bootstrap) as c:
        return {k.api_key for k in c.request(API_VERSIONS, 0, request_spec(API_VERSIONS).cls()).api_keys}


@pytest.fixture(scope="module")
def matrix(tmp_path_factory) -> Matrix:
    received = ReceivedCodecs()
    config = {"listeners": EPHEMERAL, "log.dirs": str(tmp_path_factory.mktemp("matrix"))}
    with BrokerThread(config, plugins=[received]) as broker:
        bs = broker.bootstrap_servers
        new = [
            NewTopic(matrix_topic(client, codec, tt), 1, 1, config={"compression.type": tt})
            for client, codec, tt in itertools.product(CLIENTS, PRODUCER_CODECS, TOPIC_TYPES)
        ]
        admin = ck_admin(bs)
        for future in admin.create_topics(new, request_timeout=10).values():
            future.result(timeout=DEFAULT_TIMEOUT)
        written: dict[str, Written] = {}
        for client, codec in itertools.product(CLIENTS, PRODUCER_CODECS):
            written.update(produce(client, bs, codec, [matrix_topic(client, codec, tt) for tt in TOPIC_TYPES]))
        topics = list(written)
        count = sum(len(w.specs) for w in written.values())
        read = {"confluent": read_confluent(bs, topics, count), "kafka-python": read_kafka_python(bs, topics, count)}
        stored = {t: stored_codecs(bs, t) for t in topics}
        yield Matrix(written, read, dict(received.by_topic), stored, advertised_api_keys(bs))


@pytest.mark.parametrize("topic_type", TOPIC_TYPES)
@pytest.mark.parametrize("codec", PRODUCER_CODECS)
@pytest.mark.parametrize("client", CLIENTS)
def test_every_codec_to_every_compression_type(matrix, client, codec, topic_type):
    t = matrix_topic(client, codec, topic_type)
    specs, window, errors = matrix.written[t]
    assert errors == []
    sent, requested = matrix.sent_codecs[t], CODEC_IDS[codec_sent(client, codec, matrix.api_keys)]
    assert requested in sent and sent <= {requested, 0}, "a batch that compression does not shrink goes uncompressed"
    assert matrix.stored_codecs[t] == (sent if topic_type == "producer" else {CODEC_IDS[topic_type]})
    for reader, by_topic in matrix.read.items():
        try:
            assert_records_match(by_topic[t], specs, window)
        except AssertionError as exc:
            raise AssertionError(f"as {reader} read it: {exc}") from None


# -- LogAppendTime on compressed batches -----------------------------------------------------


@pytest.mark.parametrize(
    "client, codec", [("confluent", "gzip"), ("confluent", "snappy"), ("kafka-python", "lz4"), ("kafka-python", "zstd")]
)
def test_log_append_time_on_compressed_batches(brokkr_broker, topic_name, client, codec):
    bs = brokkr_broker.bootstrap_servers
    ck_create_topic(bs, topic_name, config={"message.timestamp.type": "LogAppendTime"})
    written = produce(client, bs, codec, [topic_name])[topic_name]
    assert written.errors == []
    assert CODEC_IDS[codec] in stored_codecs(bs, topic_name)
    n = len(written.specs)
    for reader in (read_confluent(bs, [topic_name], n), read_kafka_python(bs, [topic_name], n)):
        recs = reader[topic_name]
        assert [(r.key, r.value, r.headers) for r in recs] == [(s.key, s.value, s.headers) for s in written.specs]
        assert {r.timestamp_type for r in recs} == {LOG_APPEND_TIME}
        assert all(written.window[0] <= r.timestamp <= written.window[1] for r in recs), recs
