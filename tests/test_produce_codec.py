"""The written-out Produce codec (core/protocol/produce_codec.py) against the generic one
compiled from Kafka's JSON, for every version: the same objects from the same request
bytes, the same bytes for the same response, the same errors for broken requests."""

from __future__ import annotations

import random
import uuid

import pytest
from brokkr.core.errors import CorruptRequest
from brokkr.core.protocol import produce_codec
from brokkr.core.protocol.frames import request_spec, response_spec
from brokkr.core.protocol.primitives import Reader, Writer

REQ, RESP = request_spec(0), response_spec(0)
VERSIONS = range(REQ.valid[0], REQ.valid[1] + 1)


def _named(topic, rng: random.Random, version: int, t: int):
    """A topic by id from v13, else by name."""
    if version >= 13:
        topic.topic_id = uuid.UUID(int=rng.getrandbits(128))
    else:
        topic.name = f"tópic-{t}-{rng.randint(0, 999)}"
    return topic


def _request(rng: random.Random, version: int):
    topics = []
    for t in range(rng.randint(0, 3)):
        parts = [
            REQ.struct("PartitionProduceData")(
                index=rng.randint(0, 1 << 20), records=rng.choice([None, b"", rng.randbytes(rng.randint(1, 300))])
            )
            for _ in range(rng.randint(0, 3))
        ]
        topics.append(_named(REQ.struct("TopicProduceData")(partition_data=parts), rng, version, t))
    return REQ.cls(
        transactional_id=rng.choice([None, "", "txn-ü"]),
        acks=rng.choice([-1, 0, 1, 7]),
        timeout_ms=rng.randint(-5, 1 << 30),
        topic_data=topics,
    )


def _response(rng: random.Random, version: int):
    errors_struct = RESP.struct("BatchIndexAndErrorMessage")
    topics = []
    for t in range(rng.randint(0, 3)):
        parts = []
        for _ in range(rng.randint(0, 3)):
            p = RESP.struct("PartitionProduceResponse")(
                index=rng.randint(0, 99),
                error_code=rng.choice([0, 2, 87]),
                base_offset=rng.randint(-1, 1 << 40),
                log_append_time_ms=rng.choice([-1, 1_700_000_000_000]),
                log_start_offset=rng.randint(-1, 1 << 30),
                error_message=rng.choice([None, "", "bad ä"]),
            )
            p.record_errors = [
                errors_struct(batch_index=rng.randint(0, 9), batch_index_error_message=rng.choice([None, "x"]))
                for _ in range(rng.randint(0, 2))
            ]
            parts.append(p)
        topics.append(_named(RESP.struct("TopicProduceResponse")(partition_responses=parts), rng, version, t))
    return RESP.cls(responses=topics, throttle_time_ms=rng.randint(0, 5000))


@pytest.fixture(params=["c", "python"])
def written_out(request, monkeypatch):
    """The written-out codec with its C parts (core/protocol/_produce.c), and without them
    (as where they are not built)."""
    if request.param == "python":
        monkeypatch.setattr(produce_codec, "_produce", None)
    elif produce_codec._produce is None:
        pytest.skip("brokkr.core.protocol._produce is not built")


@pytest.mark.usefixtures("written_out")
@pytest.mark.parametrize("version", VERSIONS)
def test_requests_decode_as_the_generic_decoder_decodes_them(version):
    rng = random.Random(version)
    for _ in range(200):
        w = Writer()
        REQ.encode(version, _request(rng, version), w)
        data = bytes(w.buf)
        generic, written = REQ.decode(version, Reader(data)), produce_codec.decode_request(version, Reader(data))
        assert written == generic


@pytest.mark.usefixtures("written_out")
@pytest.mark.parametrize("version", VERSIONS)
def test_responses_encode_byte_for_byte_as_the_generic_encoder(version):
    rng = random.Random(100 + version)
    for _ in range(200):
        response = _response(rng, version)
        generic, written = Writer(), Writer()
        RESP.encode(version, response, generic)
        assert produce_codec.encode_response(version, response, written)
        assert written.buf == generic.buf


@pytest.mark.usefixtures("written_out")
def test_a_response_with_leader_hints_is_left_to_the_generic_encoder():
    partition = RESP.struct("PartitionProduceResponse")(index=0, error_code=6, base_offset=-1)
    partition.current_leader = RESP.struct("LeaderIdAndEpoch")(leader_id=2, leader_epoch=5)
    response = RESP.cls(responses=[RESP.struct("TopicProduceResponse")(name="t", partition_responses=[partition])])
    assert produce_codec.encode_response(10, response, Writer()) is False
    response.responses[0].partition_responses[0].current_leader = RESP.struct("LeaderIdAndEpoch")()
    assert produce_codec.encode_response(10, response, Writer()) is True
    response.node_endpoints = [RESP.struct("NodeEndpoint")(node_id=2, host="b", port=9092)]
    assert produce_codec.encode_response(10, response, Writer()) is False


@pytest.mark.usefixtures("written_out")
@pytest.mark.parametrize("version", [3, 9, 13])
def test_broken_requests_fail_as_in_the_generic_decoder(version):
    rng = random.Random(7)
    w = Writer()
    REQ.encode(version, _request(rng, version), w)
    data = bytes(w.buf)
    for cut in range(len(data)):  # every truncation, and every byte flipped to 0xff
        for broken in (data[:cut], data[:cut] + b"\xff" + data[cut + 1 :]):
            outcomes = []
            for decode in (lambda r: REQ.decode(version, r), lambda r: produce_codec.decode_request(version, r)):
                try:
                    outcomes.append(decode(Reader(broken)))
                except CorruptRequest:
                    outcomes.append(CorruptRequest)
            assert outcomes[0] == outcomes[1], (version, cut)


def _both_readers(data: bytes, end: int | None = None):
    """What the C reader and the Python one make of ``data``: (request or None, reader
    position) each."""
    c, python = Reader(data, 0, end), Reader(data, 0, end)
    classes = (produce_codec._ProduceRequest, produce_codec._TopicProduceData, produce_codec._PartitionProduceData)
    return (produce_codec._produce.read_request(c, *classes), c.pos), (produce_codec._decode_common(python), python.pos)


@pytest.mark.parametrize("version", range(produce_codec.FLEXIBLE_VERSION, produce_codec.TOPIC_IDS_VERSION))
def test_the_c_reader_accepts_exactly_what_the_python_reader_accepts(version):
    """core/protocol/_produce.c's read_request against _decode_common: the same request,
    the reader left at the same place, on requests as encoded and on every truncation and
    byte flipped of some of them."""
    if produce_codec._produce is None:
        pytest.skip("brokkr.core.protocol._produce is not built")
    rng = random.Random(200 + version)
    accepted = 0
    for i in range(300):
        w = Writer()
        REQ.encode(version, _request(rng, version), w)
        data = bytes(w.buf)
        c, python = _both_readers(data)
        assert c == python
        accepted += c[0] is not None
        ended = _both_readers(data + b"\x00", len(data))
        assert ended == (python, python), "bytes past the reader's end are not read"
        if i % 30 == 0:
            for cut in range(len(data)):
                for broken in (data[:cut], data[:cut] + b"\xff" + data[cut + 1 :], data[:cut] + b"\x00" + data[cut:]):
                    c, python = _both_readers(broken)
                    assert c == python, (cut, broken)
    assert accepted > 50, "the cases must include requests both accept"


@pytest.mark.parametrize("partitions", [127, 128, 1000])
def test_both_readers_take_a_topic_of_many_partitions(partitions):
    """A partition count of 127 or more takes two bytes (the Java client's, kafka-python's
    or aiokafka's request to a topic of 1,000 partitions; librdkafka sends one partition a
    request): both readers take it, and refuse it with a count beyond the bytes that
    follow, or cut anywhere in it."""
    if produce_codec._produce is None:
        pytest.skip("brokkr.core.protocol._produce is not built")
    parts = [REQ.struct("PartitionProduceData")(index=i, records=b"r%d" % i) for i in range(partitions)]
    request = REQ.cls(
        acks=1, timeout_ms=5, topic_data=[REQ.struct("TopicProduceData")(name="wide", partition_data=parts)]
    )
    w = Writer()
    REQ.encode(9, request, w)
    data = bytes(w.buf)
    c, python = _both_readers(data)
    assert c == python == (REQ.decode(9, Reader(data)), len(data))
    count_at = 1 + 7 + 5  # the null transactional id, acks, timeout, topic count; the name "wide"
    assert data[count_at : count_at + 2] == bytes([(partitions + 1) & 0x7F | 0x80, (partitions + 1) >> 7])
    too_many = data[:count_at] + bytes([0xFF, 0x7F]) + data[count_at + 2 :]  # 16,382 partitions
    assert _both_readers(too_many) == ((None, 0), (None, 0))
    for cut in range(count_at - 1, count_at + 12):
        c, python = _both_readers(data[:cut])
        assert c == python == (None, 0), cut


def test_the_c_reader_keeps_the_records_as_views_of_the_frame():
    if produce_codec._produce is None:
        pytest.skip("brokkr.core.protocol._produce is not built")
    request = REQ.cls(
        acks=1,
        timeout_ms=5,
        topic_data=[
            REQ.struct("TopicProduceData")(
                name="t", partition_data=[REQ.struct("PartitionProduceData")(index=3, records=b"abc")]
            )
        ],
    )
    w = Writer()
    REQ.encode(9, request, w)
    frame = bytearray(w.buf)
    decoded = produce_codec.decode_request(9, Reader(frame))
    records = decoded.topic_data[0].partition_data[0].records
    assert isinstance(records, memoryview) and bytes(records) == b"abc" and not records.readonly
    records[0] = ord("x")  # validation stamps offsets into the request's own bytes
    assert b"xbc" in frame


@pytest.mark.parametrize("version", range(produce_codec.FLEXIBLE_VERSION, produce_codec.TOPIC_IDS_VERSION))
def test_the_c_writer_writes_the_common_answer_as_the_generic_encoder_and_leaves_the_rest(version):
    """core/protocol/_produce.c's write_response: byte for byte the generic encoder's
    output where it answers True; where an answer has an error message, record errors or
    leader hints, False and the buffer as it was."""
    if produce_codec._produce is None:
        pytest.skip("brokkr.core.protocol._produce is not built")
    rng = random.Random(300 + version)
    written = 0
    for _ in range(300):
        response = _response(rng, version)
        if rng.random() < 0.5:  # most answers are plain: make half of these so
            for t in response.responses:
                for p in t.partition_responses:
                    p.error_message, p.record_errors = None, []
        plain = all(
            p.error_message is None and not p.record_errors for t in response.responses for p in t.partition_responses
        )
        buf = bytearray(b"head")
        assert produce_codec._produce.write_response(response, buf) is plain
        if plain:
            generic = Writer()
            RESP.encode(version, response, generic)
            assert buf == b"head" + generic.buf
            written += 1
        else:
            assert buf == b"head"
    assert written > 100
    partition = RESP.struct("PartitionProduceResponse")(index=0, error_code=6, base_offset=-1)
    response = RESP.cls(responses=[RESP.struct("TopicProduceResponse")(name="t", partition_responses=[partition])])
    for hint in (RESP.struct("LeaderIdAndEpoch")(leader_id=2, leader_epoch=5), None):
        partition.current_leader = hint
        assert produce_codec._produce.write_response(response, bytearray()) is False
    partition.current_leader = RESP.struct("LeaderIdAndEpoch")()
    response.node_endpoints = [RESP.struct("NodeEndpoint")(node_id=2, host="b", port=9092)]
    assert produce_codec._produce.write_response(response, bytearray()) is False
    response.node_endpoints = []
    partition.index = 1 << 31  # out of int32: the Python encoder raises for it
    assert produce_codec._produce.write_response(response, bytearray()) is False
