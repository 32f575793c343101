"""Each error path of the server and the produce path, on raw sockets against a real broker."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from authorizers import Deny
from brokkr.core.authorization import AclOperation, ResourceType
from brokkr.core.errors import ErrorCode
from brokkr.core.plugins import hookimpl
from brokkr.core.protocol.frames import decode_response, encode_request, request_spec
from brokkr.core.testing import RawClient
from confluent_kafka.admin import AdminClient
from waiting import wait_for
from wire import (
    API_VERSIONS,
    FETCH,
    LIST_OFFSETS,
    METADATA,
    PRODUCE,
    batch,
    fetch_body,
    metadata_body,
    produce_body,
)

API_VERSIONS_REQ = request_spec(API_VERSIONS).cls


def still_serving(broker) -> None:
    with RawClient(broker.bootstrap_servers) as c:
        assert (
            c.request(
                API_VERSIONS, 3, API_VERSIONS_REQ(client_software_name="t", client_software_version="1")
            ).error_code
            == 0
        )


def partition_error(response) -> int:
    return response.responses[0].partition_responses[0].error_code


def test_unknown_api_key_closes_only_that_connection(brokkr_broker):
    with RawClient(brokkr_broker.bootstrap_servers) as bystander, RawClient(brokkr_broker.bootstrap_servers) as c:
        c.sock.sendall((8).to_bytes(4, "big") + (999).to_bytes(2, "big") + b"\x00\x00\x00\x00\x00\x01")
        assert c.is_closed_by_peer()
        assert bystander.request(API_VERSIONS, 0, API_VERSIONS_REQ()).error_code == 0


def test_api_kafka_defines_but_brokkr_does_not_serve_closes_the_connection(brokkr_broker):
    update_features = 57  # brokkr finalizes no feature flags
    with RawClient(brokkr_broker.bootstrap_servers) as c:
        c.send(update_features, 1, request_spec(update_features).cls(feature_updates=[]))
        assert c.is_closed_by_peer()
    still_serving(brokkr_broker)


def test_garbage_body_closes_the_connection(brokkr_broker):
    with RawClient(brokkr_broker.bootstrap_servers) as c:
        # A Metadata v1 header followed by an array count far larger than the frame.
        body = (
            (3).to_bytes(2, "big") + (1).to_bytes(2, "big") + (7).to_bytes(4, "big") + b"\xff\xff" + b"\x7f\xff\xff\xff"
        )
        c.sock.sendall(len(body).to_bytes(4, "big") + body)
        assert c.is_closed_by_peer()
    still_serving(brokkr_broker)


@pytest.mark.parametrize("size", [-1, 1025])
def test_frames_outside_socket_request_max_bytes_close_before_allocating(brokkr_broker_factory, size):
    broker = brokkr_broker_factory({"socket.request.max.bytes": "1024"})
    with RawClient(broker.bootstrap_servers) as c:
        c.sock.sendall(size.to_bytes(4, "big", signed=True))  # no body follows: the broker must not wait for it
        assert c.is_closed_by_peer()
    still_serving(broker)


def test_idle_and_half_open_connections_time_out(brokkr_broker_factory):
    broker = brokkr_broker_factory({"connections.max.idle.ms": "300"})
    with RawClient(broker.bootstrap_servers) as idle, RawClient(broker.bootstrap_servers) as half:
        half.sock.sendall(b"\x00\x00\x01\x00\x00")  # declares 256 bytes, sends 1
        start = time.monotonic()
        assert idle.is_closed_by_peer() and half.is_closed_by_peer()
        assert time.monotonic() - start < 5


def test_unsupported_api_versions_version_answers_v0_with_the_supported_list(brokkr_broker):
    with RawClient(brokkr_broker.bootstrap_servers) as c:
        frame = bytearray(encode_request(API_VERSIONS, 3, 42, "x", API_VERSIONS_REQ()))
        frame[6:8] = (99).to_bytes(2, "big")  # api_version 99
        c.sock.sendall(frame)
        correlation_id, response = decode_response(API_VERSIONS, 0, c.receive_frame())
        assert correlation_id == 42
        assert response.error_code == ErrorCode.UNSUPPORTED_VERSION
        listed = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        assert listed[PRODUCE] == (0, 13) and listed[FETCH][1] >= 17 and listed[API_VERSIONS] == (0, 4)


def test_api_versions_lists_only_what_is_served(brokkr_broker):
    with RawClient(brokkr_broker.bootstrap_servers) as c:
        response = c.request(API_VERSIONS, 0, API_VERSIONS_REQ())
    core = {
        0,
        1,
        2,
        3,
        17,
        18,
        19,
        20,
        21,
        22,
        23,
        27,
        29,
        30,
        31,
        32,
        33,
        34,
        35,
        36,
        37,
        43,
        44,
        45,
        46,
        48,
        49,
        50,
        51,
        55,
        60,
        61,
        74,
        75,
    }
    groups = {8, 9, 10, 11, 12, 13, 14, 15, 16, 28, 42, 47, 68, 69}  # the built-in group coordinator plugin
    transactions = {22, 24, 25, 26, 65, 66}  # the built-in transaction coordinator plugin
    share_groups = {76, 77, 90, 91, 92}  # share groups in the group coordinator plugin
    share = {78, 79, 83, 84, 85, 86, 87}  # the built-in share plugin: ShareFetch/-Acknowledge, share state
    assert {k.api_key for k in response.api_keys} == core | groups | transactions | share_groups | share


def test_unsupported_produce_version_answers_unsupported_version(brokkr_broker, topic):
    with RawClient(brokkr_broker.bootstrap_servers) as c:
        frame = bytearray(encode_request(PRODUCE, 3, 5, "x", produce_body(topic, batch())))
        frame[6:8] = (2).to_bytes(2, "big")  # Produce v2 was removed in Kafka 4
        c.sock.sendall(frame)
        correlation_id, response = decode_response(PRODUCE, 3, c.receive_frame())
    assert correlation_id == 5 and partition_error(response) == ErrorCode.UNSUPPORTED_VERSION
    assert brokkr_broker.broker.topics[topic].partitions[0].log.log_end_offset == 0


def test_invalid_acks(brokkr_broker, topic):
    with RawClient(brokkr_broker.bootstrap_servers) as c:
        response = c.request(PRODUCE, 9, produce_body(topic, batch(), acks=2))
    assert partition_error(response) == ErrorCode.INVALID_REQUIRED_ACKS


def test_unknown_topic_partition_and_topic_id(brokkr_broker, topic):
    import uuid

    with RawClient(brokkr_broker.bootstrap_servers) as c:
        assert (
            partition_error(c.request(PRODUCE, 9, produce_body("nope", batch())))
            == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        )
        assert partition_error(c.request(PRODUCE, 9, produce_body(topic, batch(), partition=7))) == (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        )
        assert partition_error(c.request(PRODUCE, 13, produce_body("", batch(), topic_id=uuid.uuid4()))) == (
            ErrorCode.UNKNOWN_TOPIC_ID
        )
        topic_id = brokkr_broker.broker.topics[topic].topic_id
        ok = c.request(PRODUCE, 13, produce_body("", batch(), topic_id=topic_id))
        assert partition_error(ok) == 0 and ok.responses[0].topic_id == topic_id


def test_corrupt_crc_is_rejected_and_nothing_is_stored(brokkr_broker, topic):
    bad = bytearray(batch(3))
    bad[-1] ^= 0xFF
    with RawClient(brokkr_broker.bootstrap_servers) as c:
        response = c.request(PRODUCE, 9, produce_body(topic, bytes(bad)))
    part = response.responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.CORRUPT_MESSAGE and "Record is corrupt (stored crc = " in part.error_message
    assert brokkr_broker.broker.topics[topic].partitions[0].log.log_end_offset == 0


@pytest.mark.parametrize(
    "records, code",
    [
        (b"", ErrorCode.INVALID_RECORD),
        (batch() + batch(), ErrorCode.INVALID_RECORD),
        (batch()[:-2], ErrorCode.CORRUPT_MESSAGE),
        (batch(value=b"x" * 2000), ErrorCode.MESSAGE_TOO_LARGE),
    ],
    ids=["empty", "two-batches", "truncated", "too-large"],
)
def test_batch_level_rejections(brokkr_broker_factory, records, code):
    broker = brokkr_broker_factory({"message.max.bytes": "1000"})
    broker.call(broker.broker.create_topic, "t")
    with RawClient(broker.bootstrap_servers) as c:
        assert partition_error(c.request(PRODUCE, 9, produce_body("t", records))) == code


def test_acks_zero_sends_no_response_and_closes_on_error(brokkr_broker, topic):
    with RawClient(brokkr_broker.bootstrap_servers) as c:
        c.send(PRODUCE, 9, produce_body(topic, batch(), acks=0), correlation_id=100)
        correlation_id, _ = (c.send(API_VERSIONS, 0, API_VERSIONS_REQ(), correlation_id=101), None)
        got, _ = c.receive(API_VERSIONS, 0)
        assert got == correlation_id == 101
        c.send(PRODUCE, 9, produce_body("unknown-topic", batch(), acks=0))
        assert c.is_closed_by_peer()
    assert brokkr_broker.broker.topics[topic].partitions[0].log.log_end_offset == 1


def test_pipelined_requests_are_answered_in_order(brokkr_broker, topic):
    with RawClient(brokkr_broker.bootstrap_servers) as c:
        sent = []
        for i in range(60):
            if i % 3 == 0:
                sent.append((PRODUCE, 9, c.send(PRODUCE, 9, produce_body(topic, batch(2)))))
            elif i % 3 == 1:
                sent.append((METADATA, 12, c.send(METADATA, 12, metadata_body(topic))))
            else:
                sent.append((FETCH, 11, c.send(FETCH, 11, fetch_body(topic))))
        offsets = []
        for key, version, correlation_id in sent:
            got, response = c.receive(key, version)
            assert got == correlation_id
            if key == PRODUCE:
                offsets.append(response.responses[0].partition_responses[0].base_offset)
    assert offsets == list(range(0, 40, 2))


def test_many_concurrent_connections(brokkr_broker):
    errors = []

    def worker():
        try:
            for _ in range(5):
                still_serving(brokkr_broker)
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors


def test_a_dropped_connection_mid_request_does_not_hurt_the_broker(brokkr_broker, topic):
    frame = encode_request(PRODUCE, 9, 1, "x", produce_body(topic, batch(50)))
    for cut in (3, 10, len(frame) // 2, len(frame) - 1):
        s = socket.create_connection(brokkr_broker.bootstrap_servers.split(":"))
        s.sendall(frame[:cut])
        s.close()
    still_serving(brokkr_broker)
    assert brokkr_broker.broker.topics[topic].partitions[0].log.log_end_offset == 0


class NeverReplicated:
    """Holds acks=-1 writes until released, as a slow follower would."""

    def __init__(self):
        self.released = False

    @hookimpl
    def brokkr_produce_complete(self):
        return self.released


def test_acks_all_times_out_with_request_timed_out(brokkr_broker_factory):
    broker = brokkr_broker_factory(plugins=[NeverReplicated()])
    broker.call(broker.broker.create_topic, "t")
    with RawClient(broker.bootstrap_servers) as c:
        start = time.monotonic()
        response = c.request(PRODUCE, 9, produce_body("t", batch(), acks=-1, timeout_ms=300))
        elapsed = time.monotonic() - start
    assert partition_error(response) == ErrorCode.REQUEST_TIMED_OUT
    assert 0.25 < elapsed < 5
    assert len(broker.broker.purgatory) == 0


def test_acks_all_completes_when_the_check_agrees(brokkr_broker_factory):
    gate = NeverReplicated()
    broker = brokkr_broker_factory(plugins=[gate])
    broker.call(broker.broker.create_topic, "t")
    partition = broker.broker.topics["t"].partitions[0]

    def release():
        time.sleep(0.3)
        gate.released = True
        broker.call(broker.broker.purgatory.check, partition)

    threading.Thread(target=release).start()
    with RawClient(broker.bootstrap_servers) as c:
        start = time.monotonic()
        response = c.request(PRODUCE, 9, produce_body("t", batch(), acks=-1, timeout_ms=10000))
    assert partition_error(response) == 0 and 0.25 < time.monotonic() - start < 5


def test_acks_all_waiting_on_a_deleted_topic_answers_at_once_the_others_still_wait(brokkr_broker_factory):
    """Kafka's DelayedProduce: a partition that went (its topic deleted) completes at once,
    UNKNOWN_TOPIC_OR_PARTITION, though its acks never came; the request's other partitions
    still wait for theirs (here until their timeout)."""
    broker = brokkr_broker_factory(plugins=[NeverReplicated()])
    for name in ("A", "B"):
        broker.call(broker.broker.create_topic, name)
    both = produce_body("A", batch(), acks=-1, timeout_ms=1500)
    both.topic_data += produce_body("B", batch()).topic_data
    with RawClient(broker.bootstrap_servers, timeout=10) as alone, RawClient(broker.bootstrap_servers) as c:
        alone.send(PRODUCE, 9, produce_body("A", batch(), acks=-1, timeout_ms=30_000))
        c.send(PRODUCE, 9, both)
        sent = time.monotonic()
        wait_for("both produces to wait", lambda: len(broker.broker.purgatory) == 2)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        admin.delete_topics(["A"])["A"].result(10)
        deleted = time.monotonic()
        _, response = alone.receive(PRODUCE, 9)
        assert time.monotonic() - deleted < 2, "answered at once, not after timeout_ms"
        [answer] = response.responses[0].partition_responses
        assert (answer.error_code, answer.base_offset) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)
        _, response = c.receive(PRODUCE, 9)
        assert time.monotonic() - sent > 1.4, "B still waited for its acks"
    codes = [t.partition_responses[0].error_code for t in response.responses]
    assert codes == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.REQUEST_TIMED_OUT]
    assert len(broker.broker.purgatory) == 0


def test_acks_all_with_min_insync_replicas_above_one_is_not_enough_replicas(brokkr_broker):
    brokkr_broker.call(brokkr_broker.broker.create_topic, "t", 1, {"min.insync.replicas": "2"})
    with RawClient(brokkr_broker.bootstrap_servers) as c:
        assert (
            partition_error(c.request(PRODUCE, 9, produce_body("t", batch(), acks=-1))) == ErrorCode.NOT_ENOUGH_REPLICAS
        )
        assert partition_error(c.request(PRODUCE, 9, produce_body("t", batch(), acks=1))) == 0


def test_fetch_waits_without_blocking_and_wakes_on_produce(brokkr_broker, topic):
    result = {}

    def fetcher():
        with RawClient(brokkr_broker.bootstrap_servers) as c:
            start = time.monotonic()
            result["response"] = c.request(FETCH, 12, fetch_body(topic, min_bytes=1, max_wait_ms=10000))
            result["elapsed"] = time.monotonic() - start

    t = threading.Thread(target=fetcher)
    t.start()
    time.sleep(0.3)
    with RawClient(brokkr_broker.bootstrap_servers) as c:  # the loop is free while the fetch waits
        assert partition_error(c.request(PRODUCE, 9, produce_body(topic, batch(3)))) == 0
    t.join(10)
    part = result["response"].responses[0].partitions[0]
    assert part.error_code == 0 and part.high_watermark == 3 and len(part.records) > 0
    assert 0.2 < result["elapsed"] < 5


def test_fetch_max_wait_expires_empty(brokkr_broker, topic):
    with RawClient(brokkr_broker.bootstrap_servers) as c:
        start = time.monotonic()
        response = c.request(FETCH, 12, fetch_body(topic, min_bytes=1, max_wait_ms=300))
    assert 0.25 < time.monotonic() - start < 5
    part = response.responses[0].partitions[0]
    assert part.error_code == 0 and bytes(part.records) == b""


def test_fetch_honours_partition_max_bytes_but_returns_one_whole_batch(brokkr_broker, topic):
    one = batch(5)
    with RawClient(brokkr_broker.bootstrap_servers) as c:
        for _ in range(4):
            c.request(PRODUCE, 9, produce_body(topic, one))
        tiny = c.request(FETCH, 12, fetch_body(topic, partition_max_bytes=10)).responses[0].partitions[0]
        two = c.request(FETCH, 12, fetch_body(topic, partition_max_bytes=2 * len(one) + 5)).responses[0].partitions[0]
        capped = c.request(FETCH, 12, fetch_body(topic, max_bytes=len(one) + 1)).responses[0].partitions[0]
        middle = c.request(FETCH, 12, fetch_body(topic, offset=7)).responses[0].partitions[0]
        beyond = c.request(FETCH, 12, fetch_body(topic, offset=21)).responses[0].partitions[0]
    assert len(tiny.records) == len(one)  # KIP-74: the first batch, whole
    assert len(two.records) == 2 * len(one)
    assert len(capped.records) == len(one)
    assert len(middle.records) == 3 * len(one)  # from the batch holding offset 7
    assert beyond.error_code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_fetch_by_topic_id_from_v13(brokkr_broker, topic):
    import uuid

    topic_id = brokkr_broker.broker.topics[topic].topic_id
    with RawClient(brokkr_broker.bootstrap_servers) as c:
        c.request(PRODUCE, 9, produce_body(topic, batch(2)))
        ok = c.request(FETCH, 17, fetch_body("", topic_id=topic_id)).responses[0]
        unknown = c.request(FETCH, 17, fetch_body("", topic_id=uuid.uuid4())).responses[0].partitions[0]
        session = c.request(FETCH, 17, _with_session(fetch_body("", topic_id=topic_id), 123))
    assert ok.topic_id == topic_id and ok.partitions[0].high_watermark == 2 and len(ok.partitions[0].records) > 0
    assert unknown.error_code == ErrorCode.UNKNOWN_TOPIC_ID
    assert session.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def _with_session(body, session_id):
    body.session_id = session_id
    return body


def test_list_offsets_specs(brokkr_broker, topic):
    from wire import list_offsets_body

    with RawClient(brokkr_broker.bootstrap_servers) as c:
        for ts in (1000, 2000, 3000):
            c.request(PRODUCE, 9, produce_body(topic, batch(2, timestamp=ts)))

        def lookup(ts, version=7):
            p = c.request(LIST_OFFSETS, version, list_offsets_body(topic, ts)).topics[0].partitions[0]
            return p.error_code, p.offset, p.timestamp

        assert lookup(-2) == (0, 0, -1)
        assert lookup(-1) == (0, 6, -1)
        assert lookup(-3) == (0, 4, 3000)
        assert lookup(1500) == (0, 2, 2000)
        assert lookup(2000) == (0, 2, 2000)
        assert lookup(9999) == (0, -1, -1)
        assert lookup(-2, version=1)[:2] == (0, 0)
        assert c.request(LIST_OFFSETS, 7, list_offsets_body("nope", -1)).topics[0].partitions[0].error_code == (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        )


@pytest.mark.brokkr_config(num_partitions=3)
def test_metadata_auto_creates_with_num_partitions(brokkr_broker):
    with RawClient(brokkr_broker.bootstrap_servers) as c:
        t = c.request(METADATA, 12, metadata_body("fresh")).topics[0]
        assert t.error_code == 0 and len(t.partitions) == 3 and t.topic_id.int != 0
        assert c.request(METADATA, 12, metadata_body("other", auto_create=False)).topics[0].error_code == (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        )
        assert (
            c.request(METADATA, 12, metadata_body("bad/name")).topics[0].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
        )


@pytest.mark.brokkr_config(auto_create_topics_enable="false")
def test_auto_create_disabled(brokkr_broker):
    with RawClient(brokkr_broker.bootstrap_servers) as c:
        assert (
            c.request(METADATA, 4, metadata_body("fresh")).topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        )
    assert "fresh" not in brokkr_broker.broker.topics


def test_elect_leaders_alone_has_nothing_to_elect(brokkr_broker, topic):
    spec = request_spec(43)
    tps = spec.struct("TopicPartitions")
    body = spec.cls(election_type=0, topic_partitions=[tps(topic=topic, partitions=[0, 9])], timeout_ms=1000)
    with RawClient(brokkr_broker.bootstrap_servers) as c:
        response = c.request(43, 2, body)
        everything = c.request(43, 2, spec.cls(election_type=0, topic_partitions=None, timeout_ms=1000))
        bad = c.request(43, 2, spec.cls(election_type=5, topic_partitions=[], timeout_ms=1000))
    (result,) = response.replica_election_results
    assert [(p.partition_id, p.error_code) for p in result.partition_result] == [
        (0, ErrorCode.ELECTION_NOT_NEEDED),
        (9, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    ]
    assert everything.replica_election_results == [] and bad.error_code == ErrorCode.INVALID_REQUEST


def deny_alter_cluster(a) -> bool:
    return a.resource_type == ResourceType.CLUSTER and a.operation == AclOperation.ALTER


def test_elect_leaders_needs_alter_on_the_cluster(brokkr_broker_factory):
    broker = brokkr_broker_factory(plugins=(Deny(deny_alter_cluster),))
    spec = request_spec(43)
    with RawClient(broker.bootstrap_servers) as c:
        response = c.request(43, 1, spec.cls(election_type=0, topic_partitions=None, timeout_ms=1000))
    assert response.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
