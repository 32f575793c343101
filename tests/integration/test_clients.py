"""Real Kafka clients against a real brokkr broker.

confluent-kafka (librdkafka), kafka-python and aiokafka produce and consume through
the ``brokkr_broker`` fixture; the admin client creates, describes and deletes topics.
brokkr has no group coordinator, so consumers only ``assign()`` and never commit.
Every wait is bounded (see conftest.py).
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time

import pytest
from brokkr.core.plugins import hookimpl
from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import ConfigResource, ConfigSource, NewTopic, OffsetSpec

from .conftest import (
    DEFAULT_TIMEOUT,
    LOG_APPEND_TIME,
    T0,
    DeliveryReports,
    aio_consume,
    aio_consume_async,
    assert_records_match,
    broker_topics,
    ck_admin,
    ck_consume,
    ck_consumer,
    ck_create_topic,
    ck_describe_topic_configs,
    ck_flush,
    ck_poll,
    ck_producer,
    kp_consume,
    kp_consumer,
    kp_producer,
    now_ms,
    record_specs,
)

# kafka-python 3.0 loads its protocol schemas through deprecated importlib.resources calls.
pytestmark = [
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]

# -- helpers local to this module ------------------------------------------------------


def ck_produce_specs(bootstrap, topic, specs, *, partition=0, flush_after=(1, 3), **conf):
    """Produce ``specs`` with confluent-kafka, flushing after the given indexes so the
    records travel in several Produce requests (several batches). Returns the delivery
    reports and the client-clock window the records were stamped in."""
    reports = DeliveryReports()
    producer = ck_producer(bootstrap, **conf)
    before = now_ms()
    for i, spec in enumerate(specs):
        kwargs = {"key": spec.key, "value": spec.value, "partition": partition, "on_delivery": reports}
        if spec.headers:
            kwargs["headers"] = spec.headers
        if spec.timestamp is not None:
            kwargs["timestamp"] = spec.timestamp
        producer.produce(topic, **kwargs)
        if i in flush_after:
            ck_flush(producer)
    ck_flush(producer)
    after = now_ms()
    assert reports.errors == []
    assert len(reports.reports) == len(specs)
    return reports, (before, after)


def kp_produce_specs(bootstrap, topic, specs, *, partition=0, flush_after=(1, 3), **conf):
    """Produce ``specs`` with kafka-python; returns the record metadata and the window."""
    producer = kp_producer(bootstrap, **conf)
    try:
        before = now_ms()
        futures = []
        for i, spec in enumerate(specs):
            futures.append(
                producer.send(
                    topic,
                    key=spec.key,
                    value=spec.value,
                    headers=spec.headers,
                    partition=partition,
                    timestamp_ms=spec.timestamp,
                )
            )
            if i in flush_after:
                producer.flush(timeout=DEFAULT_TIMEOUT)
        producer.flush(timeout=DEFAULT_TIMEOUT)
        metadata = [f.get(timeout=DEFAULT_TIMEOUT) for f in futures]
        after = now_ms()
    finally:
        producer.close(timeout=5)
    return metadata, (before, after)


def ck_watermarks(bootstrap, topic, partition=0):
    consumer = ck_consumer(bootstrap)
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10, cached=False)
    finally:
        consumer.close()


def admin_error(future) -> KafkaError:
    with pytest.raises(KafkaException) as info:
        future.result(timeout=DEFAULT_TIMEOUT)
    return info.value.args[0]


# -- 1. confluent-kafka round trip ------------------------------------------------------


@pytest.mark.parametrize("acks", [0, 1, -1])
def test_confluent_produce_consume(brokkr_broker, topic_name, acks):
    bs = brokkr_broker.bootstrap_servers
    ck_create_topic(bs, topic_name)
    specs = record_specs(null_header_values=True)

    reports, window = ck_produce_specs(bs, topic_name, specs, acks=acks)

    if acks == 0:
        # No response, so librdkafka cannot know the offsets.
        assert [r[2] for r in reports.reports] == [None] * len(specs)
    else:
        assert [r[2] for r in reports.reports] == list(range(len(specs)))
    recs = ck_consume(bs, topic_name, len(specs))
    assert_records_match(recs, specs, window)
    # Consumed timestamps are exactly those the producer stamped (delivery reports).
    assert [r.timestamp for r in recs] == [r[3][1] for r in reports.reports]
    assert ck_watermarks(bs, topic_name) == (0, len(specs))


# -- 2. kafka-python round trip ---------------------------------------------------------


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_kafka_python_produce_consume(brokkr_broker, topic_name, acks):
    bs = brokkr_broker.bootstrap_servers
    ck_create_topic(bs, topic_name)
    # kafka-python only accepts (str, bytes) headers: no null header values.
    specs = record_specs(null_header_values=False)

    metadata, window = kp_produce_specs(bs, topic_name, specs, acks=acks)

    if acks != 0:  # with acks=0 kafka-python's offsets are made up client-side
        assert [m.offset for m in metadata] == list(range(len(specs)))
    recs = kp_consume(bs, topic_name, len(specs))
    assert_records_match(recs, specs, window)
    assert [r.timestamp for r in recs] == [m.timestamp for m in metadata]

    consumer = kp_consumer(bs)
    try:
        from kafka import TopicPartition as KTP

        tp = KTP(topic_name, 0)
        assert consumer.beginning_offsets([tp]) == {tp: 0}
        assert consumer.end_offsets([tp]) == {tp: len(specs)}
    finally:
        consumer.close()


# -- 3. aiokafka round trip -------------------------------------------------------------


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_aiokafka_produce_consume(brokkr_broker, topic_name, acks):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka import TopicPartition as ATP

    bs = brokkr_broker.bootstrap_servers
    ck_create_topic(bs, topic_name)
    specs = record_specs(null_header_values=True)

    async def produce():
        producer = AIOKafkaProducer(bootstrap_servers=bs, acks=acks, request_timeout_ms=10000)
        await asyncio.wait_for(producer.start(), DEFAULT_TIMEOUT)
        try:
            before = now_ms()
            # The first three in one batch, then one request per record.
            futures = [await producer.send(topic_name, s.value, s.key, 0, s.timestamp, s.headers) for s in specs[:3]]
            results = list(await asyncio.wait_for(asyncio.gather(*futures), DEFAULT_TIMEOUT))
            for s in specs[3:]:
                results.append(
                    await asyncio.wait_for(
                        producer.send_and_wait(topic_name, s.value, s.key, 0, s.timestamp, s.headers),
                        DEFAULT_TIMEOUT,
                    )
                )
            return results, (before, now_ms())
        finally:
            await asyncio.wait_for(producer.stop(), DEFAULT_TIMEOUT)

    async def main():
        results, window = await produce()
        recs = await aio_consume_async(bs, topic_name, len(specs))
        consumer = AIOKafkaConsumer(bootstrap_servers=bs, group_id=None, enable_auto_commit=False)
        await asyncio.wait_for(consumer.start(), DEFAULT_TIMEOUT)
        try:
            tp = ATP(topic_name, 0)
            ends = await asyncio.wait_for(consumer.end_offsets([tp]), DEFAULT_TIMEOUT)
            begins = await asyncio.wait_for(consumer.beginning_offsets([tp]), DEFAULT_TIMEOUT)
        finally:
            await asyncio.wait_for(consumer.stop(), DEFAULT_TIMEOUT)
        return results, window, recs, ends[tp], begins[tp]

    results, window, recs, end, begin = asyncio.run(main())

    if acks == 0:
        assert results == [None] * len(specs)  # aiokafka gives no metadata without acks
    else:
        assert [m.offset for m in results] == list(range(len(specs)))
        assert [m.timestamp_type for m in results] == [0] * len(specs)
        # aiokafka (0.14) reports the first record's timestamp for every record of a
        # batch (message_accumulator.done overwrites its loop variable), so only the
        # records that were alone in (or first in) their batch are compared.
        for i in (0, 3, 4, 5):
            assert recs[i].timestamp == results[i].timestamp, i
    assert_records_match(recs, specs, window)
    assert (begin, end) == (0, len(specs))


# -- 4. across clients ------------------------------------------------------------------


def test_confluent_to_kafka_python_and_aiokafka(brokkr_broker, topic_name):
    bs = brokkr_broker.bootstrap_servers
    ck_create_topic(bs, topic_name)
    specs = record_specs(null_header_values=True)
    reports, window = ck_produce_specs(bs, topic_name, specs, acks=-1)
    stamped = [r[3][1] for r in reports.reports]

    kp = kp_consume(bs, topic_name, len(specs))
    assert_records_match(kp, specs, window)
    assert [r.timestamp for r in kp] == stamped

    aio = aio_consume(bs, topic_name, len(specs))
    assert_records_match(aio, specs, window)
    assert aio == kp


def test_kafka_python_to_confluent(brokkr_broker, topic_name):
    bs = brokkr_broker.bootstrap_servers
    ck_create_topic(bs, topic_name)
    specs = record_specs(null_header_values=False)
    metadata, window = kp_produce_specs(bs, topic_name, specs, acks="all")

    recs = ck_consume(bs, topic_name, len(specs))
    assert_records_match(recs, specs, window)
    assert [r.timestamp for r in recs] == [m.timestamp for m in metadata]


# -- 5. several partitions and ListOffsets ---------------------------------------------

# partition -> timestamps of the records produced to it (partition 1 stays empty)
PARTITION_TIMESTAMPS = {0: [T0 + 10, T0 + 20, T0 + 30], 1: [], 2: [T0 + 5, T0 + 50, T0 + 15, T0 + 60, T0 + 70]}


def _produce_partitioned(bs, topic):
    ck_create_topic(bs, topic, partitions=3)
    reports = DeliveryReports()
    producer = ck_producer(bs, acks=-1)
    for p, stamps in PARTITION_TIMESTAMPS.items():
        for i, ts in enumerate(stamps):
            producer.produce(
                topic,
                key=f"p{p}-{i}".encode(),
                value=f"v{p}-{i}".encode(),
                partition=p,
                timestamp=ts,
                on_delivery=reports,
            )
    ck_flush(producer)
    assert reports.errors == []
    by_partition = {}
    for _, p, offset, _ in reports.reports:
        by_partition.setdefault(p, []).append(offset)
    assert by_partition == {p: list(range(len(s))) for p, s in PARTITION_TIMESTAMPS.items() if s}


def test_multiple_partitions_confluent(brokkr_broker, topic_name):
    bs = brokkr_broker.bootstrap_servers
    _produce_partitioned(bs, topic_name)

    metadata = ck_admin(bs).list_topics(topic_name, timeout=10).topics[topic_name]
    assert sorted(metadata.partitions) == [0, 1, 2]

    consumer = ck_consumer(bs)
    try:
        consumer.assign([TopicPartition(topic_name, p, OFFSET_BEGINNING) for p in PARTITION_TIMESTAMPS])
        recs = ck_poll(consumer, sum(len(s) for s in PARTITION_TIMESTAMPS.values()))
    finally:
        consumer.close()
    for p, stamps in PARTITION_TIMESTAMPS.items():
        mine = [r for r in recs if r.partition == p]
        assert [(r.offset, r.key, r.value, r.timestamp) for r in mine] == [
            (i, f"p{p}-{i}".encode(), f"v{p}-{i}".encode(), ts) for i, ts in enumerate(stamps)
        ]

    # ListOffsets from a consumer with no assignment: no fetch of its own waits in the
    # broker ahead of these requests on the same connection.
    consumer = ck_consumer(bs)
    try:
        for p, stamps in PARTITION_TIMESTAMPS.items():
            assert consumer.get_watermark_offsets(TopicPartition(topic_name, p), timeout=10, cached=False) == (
                0,
                len(stamps),
            )

        # ListOffsets by timestamp: the first offset whose timestamp is >= the one asked.
        queries = {
            (0, T0): 0,
            (0, T0 + 10): 0,
            (0, T0 + 11): 1,
            (0, T0 + 30): 2,
            (0, T0 + 31): -1,  # none: OFFSET_END
            (1, T0): -1,
            (2, T0 + 6): 1,  # T0+50 at offset 1 comes before T0+15 at offset 2
            (2, T0 + 51): 3,
            (2, T0 + 70): 4,
            (2, T0 + 71): -1,
        }
        for (p, ts), expected in queries.items():
            [answer] = consumer.offsets_for_times([TopicPartition(topic_name, p, ts)], timeout=10)
            assert answer.error is None
            assert answer.offset == expected, (p, ts)
    finally:
        consumer.close()

    # ListOffsets with the special specs, through the admin client (v7+ for max timestamp).
    admin = ck_admin(bs)
    specs = {
        "earliest": OffsetSpec.earliest(),
        "latest": OffsetSpec.latest(),
        "max_timestamp": OffsetSpec.max_timestamp(),
        "for_timestamp": OffsetSpec.for_timestamp(T0 + 16),
    }
    answers = {}
    for label, spec in specs.items():
        futures = admin.list_offsets({TopicPartition(topic_name, 2): spec}, request_timeout=10)
        answers[label] = next(iter(futures.values())).result(timeout=DEFAULT_TIMEOUT)
    assert answers["earliest"].offset == 0
    assert answers["latest"].offset == 5
    assert (answers["max_timestamp"].offset, answers["max_timestamp"].timestamp) == (4, T0 + 70)
    assert (answers["for_timestamp"].offset, answers["for_timestamp"].timestamp) == (1, T0 + 50)


def test_multiple_partitions_kafka_python(brokkr_broker, topic_name):
    from kafka import TopicPartition as KTP

    bs = brokkr_broker.bootstrap_servers
    _produce_partitioned(bs, topic_name)
    for p, stamps in PARTITION_TIMESTAMPS.items():
        recs = kp_consume(bs, topic_name, len(stamps), partition=p, timeout=DEFAULT_TIMEOUT if stamps else 0.5)
        assert [(r.partition, r.offset, r.key, r.timestamp) for r in recs] == [
            (p, i, f"p{p}-{i}".encode(), ts) for i, ts in enumerate(stamps)
        ]

    consumer = kp_consumer(bs)
    try:
        tps = [KTP(topic_name, p) for p in PARTITION_TIMESTAMPS]
        assert consumer.partitions_for_topic(topic_name) == {0, 1, 2}
        assert consumer.beginning_offsets(tps) == {tp: 0 for tp in tps}
        assert consumer.end_offsets(tps) == {tp: len(PARTITION_TIMESTAMPS[tp.partition]) for tp in tps}
        found = consumer.offsets_for_times({tp: T0 + 12 for tp in tps})
        assert found[tps[0]].offset == 1 and found[tps[0]].timestamp == T0 + 20
        assert found[tps[1]] is None  # empty partition
        assert found[tps[2]].offset == 1 and found[tps[2]].timestamp == T0 + 50
        late = consumer.offsets_for_times({tp: T0 + 1000 for tp in tps})
        assert late == {tp: None for tp in tps}
    finally:
        consumer.close()


@pytest.mark.brokkr_config(num_partitions=3)
def test_auto_created_topic_has_num_partitions(brokkr_broker, topic_name):
    """The producer's Metadata request auto-creates the topic with num.partitions."""
    bs = brokkr_broker.bootstrap_servers
    reports = DeliveryReports()
    producer = ck_producer(bs, acks=1)
    producer.produce(topic_name, key=b"k", value=b"v", partition=2, on_delivery=reports)
    ck_flush(producer)
    assert [(r[0], r[1], r[2]) for r in reports.reports] == [(None, 2, 0)]
    metadata = ck_admin(bs).list_topics(topic_name, timeout=10).topics[topic_name]
    assert sorted(metadata.partitions) == [0, 1, 2]
    assert [(r.partition, r.offset, r.key) for r in ck_consume(bs, topic_name, 1, partition=2)] == [(2, 0, b"k")]


# -- 6. admin client ----------------------------------------------------------------------


def test_admin_create_topics(brokkr_broker, topic_name):
    bs = brokkr_broker.bootstrap_servers
    admin = ck_admin(bs)

    futures = admin.create_topics([NewTopic(topic_name, num_partitions=2, replication_factor=1)], request_timeout=10)
    assert futures[topic_name].result(timeout=DEFAULT_TIMEOUT) is None
    assert brokkr_broker.call(lambda: len(brokkr_broker.broker.topics[topic_name].partitions)) == 2

    again = admin.create_topics([NewTopic(topic_name, num_partitions=1, replication_factor=1)], request_timeout=10)
    assert admin_error(again[topic_name]).code() == KafkaError.TOPIC_ALREADY_EXISTS

    bad = [
        (NewTopic(topic_name + "-rf3", num_partitions=1, replication_factor=3), KafkaError.INVALID_REPLICATION_FACTOR),
        (
            NewTopic(topic_name + "-cfg", num_partitions=1, replication_factor=1, config={"no.such.config": "1"}),
            KafkaError.INVALID_CONFIG,
        ),
        (
            NewTopic(topic_name + "-val", num_partitions=1, replication_factor=1, config={"cleanup.policy": "bogus"}),
            KafkaError.INVALID_CONFIG,
        ),
        (NewTopic("bad/name", num_partitions=1, replication_factor=1), KafkaError.TOPIC_EXCEPTION),
    ]
    futures = admin.create_topics([t for t, _ in bad], request_timeout=10)
    for topic, code in bad:
        assert admin_error(futures[topic.topic]).code() == code, topic.topic
        assert topic.topic not in broker_topics(brokkr_broker)

    # validate_only checks but creates nothing
    futures = admin.create_topics(
        [NewTopic(topic_name + "-v", num_partitions=1, replication_factor=1)], validate_only=True, request_timeout=10
    )
    assert futures[topic_name + "-v"].result(timeout=DEFAULT_TIMEOUT) is None
    assert broker_topics(brokkr_broker) == {topic_name}
    unknown = admin.list_topics(topic_name + "-v", timeout=10).topics[topic_name + "-v"]
    assert unknown.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_admin_delete_topics(brokkr_broker, topic_name):
    bs = brokkr_broker.bootstrap_servers
    ck_create_topic(bs, topic_name)
    producer = ck_producer(bs)
    producer.produce(topic_name, value=b"gone soon")
    ck_flush(producer)
    admin = ck_admin(bs)

    futures = admin.delete_topics([topic_name], request_timeout=10)
    assert futures[topic_name].result(timeout=DEFAULT_TIMEOUT) is None
    assert admin.list_topics(topic_name, timeout=10).topics[topic_name].error.code() == (
        KafkaError.UNKNOWN_TOPIC_OR_PART
    )
    consumer = kp_consumer(bs)
    try:
        assert topic_name not in consumer.topics()
    finally:
        consumer.close()

    futures = admin.delete_topics([topic_name, "never-existed"], request_timeout=10)
    for name in (topic_name, "never-existed"):
        assert admin_error(futures[name]).code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    # Recreated under the same name, the topic starts empty.
    ck_create_topic(bs, topic_name)
    assert ck_watermarks(bs, topic_name) == (0, 0)


def test_admin_describe_configs(brokkr_broker, topic_name):
    bs = brokkr_broker.bootstrap_servers
    ck_create_topic(bs, topic_name, config={"cleanup.policy": "compact", "max.message.bytes": "2000000"})
    admin = ck_admin(bs)

    resource = ConfigResource(ConfigResource.Type.TOPIC, topic_name)
    configs = admin.describe_configs([resource], request_timeout=10)[resource].result(timeout=DEFAULT_TIMEOUT)

    def entry(name):
        e = configs[name]
        return e.value, e.source, e.is_read_only, e.is_sensitive

    assert entry("retention.ms") == ("604800000", ConfigSource.DEFAULT_CONFIG.value, False, False)
    assert entry("segment.bytes") == ("1073741824", ConfigSource.DEFAULT_CONFIG.value, False, False)
    assert entry("cleanup.policy") == ("compact", ConfigSource.DYNAMIC_TOPIC_CONFIG.value, False, False)
    assert entry("max.message.bytes") == ("2000000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value, False, False)
    assert configs["cleanup.policy"].is_default is False
    assert configs["retention.ms"].is_default is True

    missing = ConfigResource(ConfigResource.Type.TOPIC, topic_name + "-missing")
    error = admin_error(admin.describe_configs([missing], request_timeout=10)[missing])
    assert error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_admin_describe_configs_flush_ms_default(brokkr_broker, topic_name):
    bs = brokkr_broker.bootstrap_servers
    ck_create_topic(bs, topic_name)
    configs = ck_describe_topic_configs(bs, topic_name)
    assert configs["flush.ms"].value == str(2**63 - 1)
    assert configs["flush.ms"].source == ConfigSource.DEFAULT_CONFIG.value


def test_admin_describe_configs_default_synonyms(brokkr_broker, topic_name):
    bs = brokkr_broker.bootstrap_servers
    ck_create_topic(bs, topic_name)
    configs = ck_describe_topic_configs(bs, topic_name)

    def synonyms(name):
        return [(s.name, s.value, s.source) for s in configs[name].synonyms.values()]

    default = ConfigSource.DEFAULT_CONFIG.value
    assert ("log.cleanup.policy", "delete", default) in synonyms("cleanup.policy")  # control: passes today
    assert ("log.retention.hours", "168", default) in synonyms("retention.ms")
    assert ("log.roll.hours", "168", default) in synonyms("segment.ms")


def test_admin_create_colliding_topic_name(brokkr_broker, topic_name):
    bs = brokkr_broker.bootstrap_servers
    dotted, underscored = f"{topic_name}.x", f"{topic_name}_x"
    ck_create_topic(bs, dotted)
    admin = ck_admin(bs)
    futures = admin.create_topics([NewTopic(underscored, num_partitions=1, replication_factor=1)], request_timeout=10)
    try:
        futures[underscored].result(timeout=DEFAULT_TIMEOUT)
        code = None
    except KafkaException as exc:
        code = exc.args[0].code()
    assert code == KafkaError.TOPIC_EXCEPTION
    assert underscored not in broker_topics(brokkr_broker)


def test_admin_list_topics_metadata(brokkr_broker, topic_name):
    bs = brokkr_broker.bootstrap_servers
    ck_create_topic(bs, topic_name, partitions=4)
    ck_create_topic(bs, topic_name + "-other")
    metadata = ck_admin(bs).list_topics(topic_name, timeout=10)

    host, port = bs.split(":")
    assert {b.id: (b.host, b.port) for b in metadata.brokers.values()} == {0: (host, int(port))}
    assert metadata.controller_id == 0
    assert metadata.cluster_id == brokkr_broker.broker.cluster_id
    topic = metadata.topics[topic_name]
    assert topic.error is None
    assert sorted(topic.partitions) == [0, 1, 2, 3]
    for p in topic.partitions.values():
        assert (p.leader, p.replicas, p.isrs, p.error) == (0, [0], [0], None)

    # All topics, as kafka-python asks for them (Metadata v13, topics = null).
    consumer = kp_consumer(bs)
    try:
        assert consumer.topics() == {topic_name, topic_name + "-other"}
        assert consumer.partitions_for_topic(topic_name) == {0, 1, 2, 3}
    finally:
        consumer.close()


def test_admin_list_all_topics(brokkr_broker, topic_name):
    """confluent's ``list_topics()`` with no topic: librdkafka (2.x) writes the null
    topics array of Metadata v9+ into a 4-byte slot it reserved and never shrinks, so the
    body ends with 3 extra bytes. Kafka does not check for trailing bytes and answers."""
    bs = brokkr_broker.bootstrap_servers
    ck_create_topic(bs, topic_name, partitions=2)
    metadata = ck_admin(bs).list_topics(timeout=5)
    assert set(metadata.topics) == {topic_name}
    assert sorted(metadata.topics[topic_name].partitions) == [0, 1]


# -- 7. a fetch waiting on an empty partition --------------------------------------------


def test_long_poll_receives_new_record(brokkr_broker, topic_name):
    """A consumer fetching an empty partition with a long fetch.wait.max.ms is answered as
    soon as a record is appended, not when the wait expires."""
    bs = brokkr_broker.bootstrap_servers
    ck_create_topic(bs, topic_name)
    consumer = ck_consumer(bs, **{"fetch.wait.max.ms": 10000})
    try:
        consumer.assign([TopicPartition(topic_name, 0, OFFSET_BEGINNING)])
        assert ck_poll(consumer, 1, timeout=1.5) == []

        # The consumer's fetch is parked in the purgatory, not spinning.
        def parked() -> int:
            return brokkr_broker.call(lambda: len(brokkr_broker.broker.purgatory))

        deadline = time.monotonic() + 5
        while parked() == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert parked() >= 1

        producer = ck_producer(bs, acks=1, **{"linger.ms": 0})
        sent = time.monotonic()
        producer.produce(topic_name, key=b"late", value=b"arrival", timestamp=T0)
        ck_flush(producer)
        recs = ck_poll(consumer, 1, timeout=8)
        latency = time.monotonic() - sent
    finally:
        consumer.close()
    assert [(r.offset, r.key, r.value, r.timestamp) for r in recs] == [(0, b"late", b"arrival", T0)]
    assert latency < 3, f"record arrived after {latency:.1f}s: the waiting fetch was not completed by the append"


def test_long_poll_aiokafka(brokkr_broker, topic_name):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka import TopicPartition as ATP

    bs = brokkr_broker.bootstrap_servers
    ck_create_topic(bs, topic_name)

    async def main():
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bs, group_id=None, enable_auto_commit=False, fetch_max_wait_ms=10000
        )
        await asyncio.wait_for(consumer.start(), DEFAULT_TIMEOUT)
        try:
            tp = ATP(topic_name, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            assert await consumer.getmany(tp, timeout_ms=1000) == {}
            getter = asyncio.ensure_future(consumer.getone(tp))
            await asyncio.sleep(0.3)
            producer = AIOKafkaProducer(bootstrap_servers=bs, acks=1)
            await asyncio.wait_for(producer.start(), DEFAULT_TIMEOUT)
            try:
                sent = time.monotonic()
                await asyncio.wait_for(producer.send_and_wait(topic_name, b"v", b"k", 0, T0), DEFAULT_TIMEOUT)
            finally:
                await asyncio.wait_for(producer.stop(), DEFAULT_TIMEOUT)
            msg = await asyncio.wait_for(getter, 8)
            return msg, time.monotonic() - sent
        finally:
            await asyncio.wait_for(consumer.stop(), DEFAULT_TIMEOUT)

    msg, latency = asyncio.run(main())
    assert (msg.offset, msg.key, msg.value, msg.timestamp) == (0, b"k", b"v", T0)
    assert latency < 3, f"record arrived after {latency:.1f}s"


class FetchSpy:
    """A brokkr plugin that notes when each Fetch request arrives (and decodes nothing)."""

    def __init__(self) -> None:
        self.arrivals: list[float] = []

    @hookimpl
    def brokkr_decode_request(self, header):
        if header.api_key == 1:
            self.arrivals.append(time.monotonic())
        return None  # the built-in decoder answers


def test_fetch_wait_expires_on_empty_partition(brokkr_broker_factory, topic_name):
    """With nothing to read, each fetch is held for fetch.wait.max.ms and then answered
    empty: the consumer's fetches arrive about that far apart, neither back to back (no
    wait) nor only once (never answered)."""
    spy = FetchSpy()
    broker = brokkr_broker_factory({}, plugins=[spy])
    bs = broker.bootstrap_servers
    ck_create_topic(bs, topic_name)
    consumer = ck_consumer(bs, **{"fetch.wait.max.ms": 300})
    try:
        consumer.assign([TopicPartition(topic_name, 0, OFFSET_BEGINNING)])
        assert ck_poll(consumer, 1, timeout=2.5) == []
    finally:
        consumer.close()
    arrivals = spy.arrivals
    assert 3 <= len(arrivals) <= 12, arrivals
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
    assert min(gaps) >= 0.25, gaps
    assert max(gaps) < 2.0, gaps


# -- 8. kcat ------------------------------------------------------------------------------


def test_kcat_produce_consume(brokkr_broker, topic_name):
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    if kcat is None:
        pytest.skip("kcat is not installed")
    bs = brokkr_broker.bootstrap_servers
    ck_create_topic(bs, topic_name)

    def run(*args, stdin=None):
        return subprocess.run(
            [kcat, "-b", bs, *args], input=stdin, capture_output=True, text=True, check=True, timeout=30
        ).stdout

    run("-P", "-t", topic_name, "-K:", stdin="a:1\nb:2\nc:three\n")
    run("-P", "-t", topic_name, "-K:", "-Z", stdin="d:\n")  # -Z: empty value sent as null
    out = run("-C", "-t", topic_name, "-e", "-o", "beginning", "-f", "%k=%s\n")
    assert out.splitlines() == ["a=1", "b=2", "c=three", "d="]
    # value length (-1: null), offset, partition
    out = run("-C", "-t", topic_name, "-e", "-o", "beginning", "-f", "%k:%S:%o:%p\n")
    assert out.splitlines() == ["a:1:0:0", "b:1:1:0", "c:5:2:0", "d:-1:3:0"]
    listing = run("-L", "-t", topic_name)
    assert f'topic "{topic_name}" with 1 partitions' in listing
    assert "partition 0, leader 0, replicas: 0, isrs: 0" in listing


# -- sizes --------------------------------------------------------------------------------


def test_small_fetch_sizes_still_progress(brokkr_broker, topic_name):
    """Fetches smaller than a batch return one whole batch each (KIP-74), so a consumer
    with tiny fetch sizes reads every record once, in order, including one far larger
    than its fetch size."""
    bs = brokkr_broker.bootstrap_servers
    ck_create_topic(bs, topic_name)
    reports = DeliveryReports()
    producer = ck_producer(bs, acks=1, **{"batch.num.messages": 10})
    values = [i.to_bytes(4, "big") * 250 for i in range(200)] + [b"L" * 300_000]
    for i, value in enumerate(values):
        producer.produce(topic_name, key=str(i).encode(), value=value, partition=0, on_delivery=reports)
    ck_flush(producer)
    assert reports.errors == []

    recs = ck_consume(
        bs,
        topic_name,
        len(values),
        **{
            "max.partition.fetch.bytes": 1024,
            "fetch.max.bytes": 2048,
            "message.max.bytes": 1024,  # librdkafka wants fetch.max.bytes >= message.max.bytes
            "receive.message.max.bytes": 2_000_000,
        },
    )
    assert [r.offset for r in recs] == list(range(len(values)))
    assert [r.key for r in recs] == [str(i).encode() for i in range(len(values))]
    assert [r.value for r in recs] == values


def test_topic_max_message_bytes_enforced(brokkr_broker, topic_name):
    bs = brokkr_broker.bootstrap_servers
    ck_create_topic(bs, topic_name, config={"max.message.bytes": "2000"})
    error = _produce_one_error(bs, topic_name, key=b"big", value=b"x" * 5000)
    assert error is not None and error.code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert _produce_one_error(bs, topic_name, key=b"small", value=b"x" * 100) is None
    assert [(r.offset, r.key) for r in ck_consume(bs, topic_name, 1)] == [(0, b"small")]
    assert ck_watermarks(bs, topic_name) == (0, 1)


# -- record validation that Kafka does per record ------------------------------------------


def _produce_one_error(bs, topic, **produce_kwargs):
    reports = DeliveryReports()
    producer = ck_producer(bs, acks=-1, retries=0)
    producer.produce(topic, on_delivery=reports, partition=0, **produce_kwargs)
    ck_flush(producer)
    assert len(reports.reports) == 1
    return reports.reports[0][0]


def test_log_append_time_topic(brokkr_broker, topic_name):
    bs = brokkr_broker.bootstrap_servers
    ck_create_topic(bs, topic_name, config={"message.timestamp.type": "LogAppendTime"})
    before = now_ms()
    reports, _ = ck_produce_specs(bs, topic_name, record_specs(null_header_values=True)[:2], acks=-1, flush_after=())
    after = now_ms()
    recs = ck_consume(bs, topic_name, 2)
    assert [r.offset for r in recs] == [0, 1]
    for rec in recs:
        assert rec.timestamp_type == LOG_APPEND_TIME
        assert before <= rec.timestamp <= after


def test_future_timestamp_rejected(brokkr_broker, topic_name):
    bs = brokkr_broker.bootstrap_servers
    ck_create_topic(bs, topic_name, config={"message.timestamp.after.max.ms": "60000"})
    error = _produce_one_error(bs, topic_name, key=b"k", value=b"v", timestamp=now_ms() + 3_600_000)
    assert error is not None and error.code() == KafkaError.INVALID_TIMESTAMP
    assert ck_watermarks(bs, topic_name) == (0, 0)


def test_compacted_topic_rejects_null_key(brokkr_broker, topic_name):
    bs = brokkr_broker.bootstrap_servers
    ck_create_topic(bs, topic_name, config={"cleanup.policy": "compact"})
    error = _produce_one_error(bs, topic_name, value=b"no key")
    assert error is not None and error.code() == KafkaError.INVALID_RECORD
    assert ck_watermarks(bs, topic_name) == (0, 0)


def test_compacted_topic_accepts_keyed_records(brokkr_broker, topic_name):
    """The control for the test above: keyed records on a compacted topic are fine."""
    bs = brokkr_broker.bootstrap_servers
    ck_create_topic(bs, topic_name, config={"cleanup.policy": "compact"})
    assert _produce_one_error(bs, topic_name, key=b"k", value=b"v") is None
    assert [(r.offset, r.key, r.value) for r in ck_consume(bs, topic_name, 1)] == [(0, b"k", b"v")]


def test_partition_out_of_range_is_reported(brokkr_broker, topic_name):
    """Producing to a partition the topic does not have fails in the client (it knows the
    partition count from Metadata) without touching the log."""
    bs = brokkr_broker.bootstrap_servers
    ck_create_topic(bs, topic_name, partitions=1)
    producer = ck_producer(bs)
    reports = DeliveryReports()
    producer.produce(topic_name, value=b"x", partition=5, on_delivery=reports)
    ck_flush(producer)
    [(error, _, _, _)] = reports.reports
    assert error is not None and error.code() == KafkaError._UNKNOWN_PARTITION
    assert ck_watermarks(bs, topic_name) == (0, 0)
