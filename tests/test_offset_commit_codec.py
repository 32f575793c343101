"""The written-out OffsetCommit codec (core/protocol/offset_commit_codec.py) against the
generic one compiled from Kafka's JSON, for every version it covers: the same objects from
the same request bytes, the same bytes for the same response, the same errors for broken
requests; the versions it does not cover are left to the generic codec."""

from __future__ import annotations

import random

import pytest
from brokkr.core.errors import CorruptRequest
from brokkr.core.protocol import offset_commit_codec as codec
from brokkr.core.protocol.frames import request_spec, response_spec
from brokkr.core.protocol.primitives import Reader, Writer

REQ, RESP = request_spec(codec.KEY), response_spec(codec.KEY)
VERSIONS = range(codec.MIN_VERSION, codec.MAX_VERSION + 1)


def _request(rng: random.Random, version: int):
    topics = [
        REQ.struct("OffsetCommitRequestTopic")(
            name=f"tópic-{t}-{rng.randint(0, 999)}",
            partitions=[
                REQ.struct("OffsetCommitRequestPartition")(
                    partition_index=rng.randint(0, 1 << 20),
                    committed_offset=rng.choice([-1, 0, rng.randint(1, 1 << 62)]),
                    committed_leader_epoch=rng.choice([-1, 7]) if version >= 6 else -1,
                    committed_metadata=rng.choice([None, "", "meta-ä"]),
                )
                for _ in range(rng.randint(0, 3))
            ],
        )
        for t in range(rng.randint(0, 3))
    ]
    request = REQ.cls(
        group_id=rng.choice(["", "group-ü"]),
        generation_id_or_member_epoch=rng.randint(-1, 50),
        member_id=rng.choice(["", "member-1"]),
        topics=topics,
    )
    if version >= 7:
        request.group_instance_id = rng.choice([None, "instance-1"])
    if version <= 4:
        request.retention_time_ms = rng.choice([-1, 86_400_000])
    return request


def _response(rng: random.Random):
    return RESP.cls(
        throttle_time_ms=rng.randint(0, 5000),
        topics=[
            RESP.struct("OffsetCommitResponseTopic")(
                name=f"tópic-{t}",
                partitions=[
                    RESP.struct("OffsetCommitResponsePartition")(
                        partition_index=rng.randint(0, 99), error_code=rng.choice([0, 16, 22, 25, 27])
                    )
                    for _ in range(rng.randint(0, 3))
                ],
            )
            for t in range(rng.randint(0, 3))
        ],
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_requests_decode_as_the_generic_decoder_decodes_them(version):
    rng = random.Random(version)
    for _ in range(200):
        data = bytes(REQ.encode(version, _request(rng, version)).buf)
        generic, written = Reader(data), Reader(data)
        assert codec.decode_request(version, written) == REQ.decode(version, generic)
        assert written.pos == generic.pos == len(data)


@pytest.mark.parametrize("version", [8, 9])
def test_a_clients_commit_is_read_without_the_field_by_field_decoder(version):
    """librdkafka's and the Java client's commit (short strings, a few partitions, no tagged
    fields) takes the one-pass reader; a string of 127 bytes or more takes the other."""
    request = REQ.cls(
        group_id="group",
        generation_id_or_member_epoch=3,
        member_id="member-1",
        group_instance_id=None,
        topics=[
            REQ.struct("OffsetCommitRequestTopic")(
                name="t",
                partitions=[REQ.struct("OffsetCommitRequestPartition")(partition_index=1, committed_offset=42)],
            )
        ],
    )
    data = bytes(REQ.encode(version, request).buf)
    assert codec._decode_common(Reader(data)) == REQ.decode(version, Reader(data)) == request
    request.group_id = "g" * 127
    data = bytes(REQ.encode(version, request).buf)
    assert codec._decode_common(Reader(data)) is None
    assert codec.decode_request(version, Reader(data)) == request


@pytest.mark.parametrize("version", VERSIONS)
def test_responses_encode_byte_for_byte_as_the_generic_encoder(version):
    rng = random.Random(100 + version)
    for _ in range(200):
        response = _response(rng)
        written = Writer()
        assert codec.encode_response(version, response, written)
        assert written.buf == RESP.encode(version, response).buf


@pytest.mark.parametrize("version", [3, 6, 8, 9])
def test_broken_requests_fail_as_in_the_generic_decoder(version):
    rng = random.Random(7)
    request = _request(rng, version)
    while not any(t.partitions for t in request.topics):
        request = _request(rng, version)
    data = bytes(REQ.encode(version, request).buf)
    for cut in range(len(data)):  # every truncation, and every byte flipped to 0xff
        for broken in (data[:cut], data[:cut] + b"\xff" + data[cut + 1 :]):
            outcomes = []
            for decode in (REQ.decode, codec.decode_request):
                try:
                    outcomes.append(decode(version, Reader(broken)))
                except CorruptRequest:
                    outcomes.append(CorruptRequest)
            assert outcomes[0] == outcomes[1], (version, cut)


def test_other_versions_are_left_to_the_generic_codec():
    request = REQ.cls(group_id="g", topics=[])
    for version in (0, 1, 10):
        data = bytes(REQ.encode(version, request).buf)
        reader = Reader(data)
        assert codec.decode_request(version, reader) is None
        assert reader.pos == 0
        assert codec.encode_response(version, RESP.cls(), Writer()) is False
