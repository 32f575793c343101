"""A fetch that reads a partition whose files are gone answers that partition alone: a
read_committed fetch waiting behind an open transaction on a topic that is then deleted
returns at once, the deleted partition answered UNKNOWN_TOPIC_ID (UNKNOWN_TOPIC_OR_PARTITION
before v13), the other topic's records delivered; a segment file removed behind the
broker's back answers KAFKA_STORAGE_ERROR for its partition. No traceback either way."""

from __future__ import annotations

import logging
import time

import pytest
from brokkr.core.errors import ErrorCode
from brokkr.core.testing import RawClient
from confluent_kafka.admin import AdminClient
from txn_wire import UNVERIFIED, txn_batch, txn_produce
from waiting import wait_for
from wire import FETCH, PRODUCE, batch, fetch_body, produce_body

READ_COMMITTED = 1


def two_topic_fetch(broker, first: str, second: str, **settings):
    body = fetch_body(first, topic_id=broker.topics[first].topic_id, **settings)
    body.topics += fetch_body(second, topic_id=broker.topics[second].topic_id).topics
    return body


def produce(broker, topic: str, records: bytes) -> None:
    with RawClient(broker.bootstrap_servers) as c:
        assert c.request(PRODUCE, 9, produce_body(topic, records)).responses[0].partition_responses[0].error_code == 0


def answers(response) -> dict:
    """{topic index in the request: (error code, records)} of partition 0 of each topic."""
    return {i: (t.partitions[0].error_code, t.partitions[0].records) for i, t in enumerate(response.responses)}


@pytest.mark.parametrize(
    "version, code", [(12, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), (13, ErrorCode.UNKNOWN_TOPIC_ID)]
)
def test_a_waiting_fetch_of_a_deleted_topic_answers_at_once_and_delivers_the_rest(
    brokkr_broker_factory, caplog, version, code
):
    caplog.set_level(logging.WARNING, logger="brokkr")
    broker = brokkr_broker_factory(UNVERIFIED)
    for name in ("A", "B"):
        broker.call(broker.broker.create_topic, name)
    assert txn_produce(broker, "A", txn_batch([b"open"], 9000)).error_code == 0  # left open: A's LSO stays 0
    produce(broker, "B", batch(1, value=b"b-record"))
    body = two_topic_fetch(broker, "A", "B", max_wait_ms=10_000, min_bytes=1 << 20)
    body.isolation_level = READ_COMMITTED
    with RawClient(broker.bootstrap_servers, timeout=5) as c:
        c.send(FETCH, version, body)
        wait_for("the fetch to wait", lambda: len(broker.purgatory) == 1)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        admin.delete_topics(["A"])["A"].result(10)
        deleted = time.monotonic()
        _, response = c.receive(FETCH, version)
    assert time.monotonic() - deleted < 2, "answered at once, not after max_wait_ms"
    assert response.error_code == 0
    (a_code, a_records), (b_code, b_records) = answers(response).values()
    assert (a_code, a_records) == (code, b"")
    assert b_code == 0 and b"b-record" in bytes(b_records)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info], "no traceback, no error"


def test_a_segment_file_gone_under_a_read_fails_that_partition_only(brokkr_broker_factory, caplog):
    caplog.set_level(logging.WARNING, logger="brokkr")
    broker = brokkr_broker_factory({"log.segment.bytes": "200"})
    for name in ("C", "B"):
        broker.call(broker.broker.create_topic, name)
    for _ in range(3):  # a segment each
        produce(broker, "C", batch(2, value=b"c" * 100))
    produce(broker, "B", batch(1, value=b"b-record"))
    log_dir = broker.partition("C", 0).log.dir
    first_index = sorted(log_dir.glob("*.index"))[0]
    first_index.unlink()  # behind the broker's back: the sealed index is read on the next lookup
    with RawClient(broker.bootstrap_servers) as c:
        response = c.request(FETCH, 12, two_topic_fetch(broker, "C", "B"))
    assert response.error_code == 0
    (c_code, c_records), (b_code, b_records) = answers(response).values()
    assert (c_code, c_records) == (ErrorCode.KAFKA_STORAGE_ERROR, b"")
    assert b_code == 0 and b"b-record" in bytes(b_records)
    [line] = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert "C-0: the read at offset 0 failed" in line.getMessage() and not line.exc_info
