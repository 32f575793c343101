"""Shared helpers for the real-client integration tests.

Every helper is bounded by a deadline: no poll, flush or getmany runs without a timeout.
Messages from the three Python clients are normalised to :class:`Rec` so tests can
compare what one client produced with what another consumed.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from typing import Any, NamedTuple

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"
DEFAULT_TIMEOUT = 15.0

_counter = itertools.count()


class Rec(NamedTuple):
    """One consumed record, whichever client read it."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    timestamp: int
    timestamp_type: str


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A topic name unique to the test (legal characters only)."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:80].strip("-")
    return f"{base}-{os.getpid()}-{next(_counter)}"


# -- confluent-kafka (librdkafka) ------------------------------------------------------


def ck_conf(bootstrap: str, **extra: Any) -> dict[str, Any]:
    conf = {"bootstrap.servers": bootstrap, "log_level": 3}
    conf.update(extra)
    return conf


def ck_admin(bootstrap: str) -> AdminClient:
    # The admin client is a producer inside librdkafka, so its Metadata requests would
    # auto-create the topics they name; looking a deleted topic up must not recreate it.
    return AdminClient(ck_conf(bootstrap, **{"allow.auto.create.topics": False}))


def ck_create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
    """Create a topic with confluent's AdminClient and wait (bounded) for the result."""
    admin = ck_admin(bootstrap)  # must outlive the future, or the request is abandoned
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})],
        request_timeout=10,
    )
    futures[name].result(timeout=DEFAULT_TIMEOUT)


def ck_describe_topic_configs(bootstrap: str, name: str) -> dict[str, Any]:
    """DescribeConfigs of one topic through confluent's AdminClient: name -> ConfigEntry."""
    from confluent_kafka.admin import ConfigResource

    admin = ck_admin(bootstrap)
    resource = ConfigResource(ConfigResource.Type.TOPIC, name)
    return admin.describe_configs([resource], request_timeout=10)[resource].result(timeout=DEFAULT_TIMEOUT)


class DeliveryReports:
    """Collects librdkafka delivery reports: (error, partition, offset, timestamp)."""

    def __init__(self) -> None:
        self.reports: list[tuple[Any, int, int, tuple[int, int]]] = []

    def __call__(self, err: Any, msg: Any) -> None:
        self.reports.append((err, msg.partition(), msg.offset(), msg.timestamp()))

    @property
    def errors(self) -> list[Any]:
        return [r[0] for r in self.reports if r[0] is not None]


def ck_producer(bootstrap: str, **extra: Any) -> Producer:
    return Producer(ck_conf(bootstrap, **{"linger.ms": 5, "message.timeout.ms": 10000, **extra}))


def ck_flush(producer: Producer, timeout: float = DEFAULT_TIMEOUT) -> None:
    remaining = producer.flush(timeout)
    assert remaining == 0, f"{remaining} message(s) still undelivered after {timeout}s"


def ck_rec(msg: Any) -> Rec:
    ts_type, ts = msg.timestamp()
    kind = {
        confluent_kafka.TIMESTAMP_CREATE_TIME: CREATE_TIME,
        confluent_kafka.TIMESTAMP_LOG_APPEND_TIME: LOG_APPEND_TIME,
    }
    return Rec(
        msg.partition(),
        msg.offset(),
        msg.key(),
        msg.value(),
        list(msg.headers() or []),
        ts,
        kind.get(ts_type, f"unknown({ts_type})"),
    )


def ck_consumer(bootstrap: str, **extra: Any) -> Consumer:
    # group.id is required by librdkafka; brokkr has no group coordinator, so the
    # consumer only ever assign()s and never commits.
    return Consumer(
        ck_conf(
            bootstrap,
            **{"group.id": "brokkr-it", "enable.auto.commit": False, "enable.auto.offset.store": False, **extra},
        )
    )


def ck_poll(consumer: Consumer, count: int, timeout: float = DEFAULT_TIMEOUT) -> list[Rec]:
    """Poll until ``count`` records arrived or the deadline passed; errors fail the test."""
    out: list[Rec] = []
    deadline = time.monotonic() + timeout
    while len(out) < count:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        msg = consumer.poll(min(left, 1.0))
        if msg is None:
            continue
        if msg.error():
            raise KafkaException(msg.error())
        out.append(ck_rec(msg))
    return out


def ck_consume(
    bootstrap: str, topic: str, count: int, partition: int = 0, timeout: float = DEFAULT_TIMEOUT, **extra: Any
) -> list[Rec]:
    """Read ``count`` records of one partition from the beginning with confluent-kafka."""
    consumer = ck_consumer(bootstrap, **extra)
    try:
        consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        return ck_poll(consumer, count, timeout)
    finally:
        consumer.close()


# -- kafka-python --------------------------------------------------------------------


def kp_producer(bootstrap: str, **extra: Any):
    from kafka import KafkaProducer

    conf = dict(
        bootstrap_servers=bootstrap,
        linger_ms=5,
        request_timeout_ms=10000,
        max_block_ms=10000,
        delivery_timeout_ms=20000,
    )
    conf.update(extra)
    return KafkaProducer(**conf)


def kp_consumer(bootstrap: str, **extra: Any):
    from kafka import KafkaConsumer

    conf = dict(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        request_timeout_ms=10000,
    )
    conf.update(extra)
    return KafkaConsumer(**conf)


def kp_rec(msg: Any) -> Rec:
    """A kafka-python (or aiokafka) ConsumerRecord as a Rec."""
    return Rec(
        msg.partition,
        msg.offset,
        msg.key,
        msg.value,
        list(msg.headers or []),
        msg.timestamp,
        {0: CREATE_TIME, 1: LOG_APPEND_TIME}.get(msg.timestamp_type, f"unknown({msg.timestamp_type})"),
    )


def kp_consume(
    bootstrap: str, topic: str, count: int, partition: int = 0, timeout: float = DEFAULT_TIMEOUT, **extra: Any
) -> list[Rec]:
    """Read ``count`` records of one partition from the beginning with kafka-python."""
    from kafka import TopicPartition as KTP

    consumer = kp_consumer(bootstrap, **extra)
    try:
        tp = KTP(topic, partition)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        out: list[Rec] = []
        deadline = time.monotonic() + timeout
        while len(out) < count and time.monotonic() < deadline:
            left_ms = int((deadline - time.monotonic()) * 1000)
            for records in consumer.poll(timeout_ms=max(min(left_ms, 1000), 1)).values():
                out.extend(kp_rec(m) for m in records)
        return out
    finally:
        consumer.close()


# -- aiokafka ------------------------------------------------------------------------


_aio_rec = kp_rec  # aiokafka's ConsumerRecord has kafka-python's attributes


async def aio_consume_async(
    bootstrap: str, topic: str, count: int, partition: int = 0, timeout: float = DEFAULT_TIMEOUT, **extra: Any
) -> list[Rec]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATP

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False, **extra)
    await asyncio.wait_for(consumer.start(), timeout)
    try:
        tp = ATP(topic, partition)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        out: list[Rec] = []
        deadline = time.monotonic() + timeout
        while len(out) < count and time.monotonic() < deadline:
            left_ms = int((deadline - time.monotonic()) * 1000)
            batch = await consumer.getmany(tp, timeout_ms=max(min(left_ms, 1000), 1))
            out.extend(_aio_rec(m) for m in batch.get(tp, []))
        return out
    finally:
        await asyncio.wait_for(consumer.stop(), timeout)


def aio_consume(
    bootstrap: str, topic: str, count: int, partition: int = 0, timeout: float = DEFAULT_TIMEOUT, **extra: Any
):
    """Read ``count`` records of one partition from the beginning with aiokafka."""
    consume = aio_consume_async(bootstrap, topic, count, partition, timeout, **extra)
    return asyncio.run(asyncio.wait_for(consume, timeout + 10))


# -- what tests produce ----------------------------------------------------------------

#: An explicit CreateTime used by the record sets below (2023-11-14T22:13:20Z).
T0 = 1_700_000_000_000


class Spec(NamedTuple):
    """A record to produce: timestamp None lets the client stamp it."""

    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    timestamp: int | None


def record_specs(null_header_values: bool) -> list[Spec]:
    """Keys (and a null key), a null value, an empty value, binary data, repeated and
    (where the client allows it) null-valued headers, explicit and client timestamps
    (one out of order)."""
    null = None if null_header_values else b""
    return [
        Spec(b"key-0", b"value-0", [("h1", b"one")], T0),
        Spec(b"key-1", None, [], T0 + 1),
        Spec(None, b"value-2", [("a", b"x"), ("nul", null), ("a", b"dup")], None),
        Spec(b"", b"", [], T0 + 5),
        Spec(b"key-4", bytes(range(256)) * 64, [("bin", b"\x00\xff")], T0 + 2),
        Spec(b"key-5", b"value-5", [], None),
    ]


def assert_records_match(
    recs: list[Rec], specs: list[Spec], window: tuple[int, int], partition: int = 0, first_offset: int = 0
) -> None:
    """``recs`` are exactly ``specs``, in order, at contiguous offsets, CreateTime stamped
    with the explicit timestamp or (when the client stamped it) within ``window`` ms."""
    assert len(recs) == len(specs), recs
    assert [r.offset for r in recs] == list(range(first_offset, first_offset + len(specs)))
    for rec, spec in zip(recs, specs):
        assert rec.partition == partition
        assert (rec.key, rec.value) == (spec.key, spec.value), rec.offset
        assert rec.headers == spec.headers, rec.offset
        assert rec.timestamp_type == CREATE_TIME, rec.offset
        if spec.timestamp is not None:
            assert rec.timestamp == spec.timestamp, rec.offset
        else:
            assert window[0] <= rec.timestamp <= window[1], (rec.offset, rec.timestamp, window)


def broker_topics(broker_thread: Any) -> set[str]:
    """The names of the topics the broker holds, read on the broker's own loop."""
    return broker_thread.call(lambda: set(broker_thread.broker.topics))


def now_ms() -> int:
    return int(time.time() * 1000)
