"""Every message Kafka defines, in every version it defines, survives encode -> decode -> encode.

Values are random but deterministic (seeded), and fill every field the version carries,
including tagged fields, nullable fields set to null, and nested structs.
"""

from __future__ import annotations

import random
import uuid

import pytest
from brokkr.core.protocol.primitives import Reader
from brokkr.core.protocol.schema import FieldSpec, MessageSpec, _in, all_message_names, load_message

_INTS = {"int8": 7, "int16": 15, "uint16": 16, "int32": 31, "int64": 63}


def _value(rng: random.Random, f: FieldSpec, version: int, element: bool = False):
    t = f.element if element else f.type
    if not element and _in(f.nullable, version) and rng.random() < 0.2:
        return None
    if t.startswith("[]"):
        return [_value(rng, f, version, element=True) for _ in range(rng.randint(0, 2))]
    if f.struct is not None:
        return _instance(rng, f.struct, version)
    if t in _INTS:
        bits = _INTS[t]
        return rng.randint(0, 2**bits - 1) if t == "uint16" else rng.randint(-(2**bits), 2**bits - 1)
    if t == "float64":
        return rng.choice([0.0, 1.5, -2.25, 1e300])
    if t == "bool":
        return rng.random() < 0.5
    if t == "string":
        return rng.choice(["", "a", "topic-ü", "x" * 300])
    if t in ("bytes", "records"):
        return rng.randbytes(rng.randint(0, 40))
    if t == "uuid":
        return uuid.UUID(int=rng.getrandbits(128))
    raise AssertionError(t)


def _instance(rng: random.Random, struct, version: int):
    kwargs = {f.attr: _value(rng, f, version) for f in struct.fields if _in(f.versions, version)}
    return struct.cls(**kwargs)


def _cases():
    for name in all_message_names():
        spec = load_message(name)
        lo, hi = spec.valid
        for version in range(lo, hi + 1):
            yield pytest.param(name, version, id=f"{name}-v{version}")


@pytest.mark.parametrize("name, version", list(_cases()))
def test_roundtrip(name: str, version: int) -> None:
    spec: MessageSpec = load_message(name)
    rng = random.Random(f"{name}:{version}")
    for _ in range(3):
        original = _instance(rng, spec.root, version)
        encoded = bytes(spec.encode(version, original).buf)
        decoded = spec.decode_bytes(version, encoded)
        assert decoded == original
        assert bytes(spec.encode(version, decoded).buf) == encoded


def test_every_api_and_version_in_scope_is_covered() -> None:
    covered = {(n, v) for n, v in (c.values for c in _cases())}
    required = {
        "ApiVersions": (0, 4),
        "Metadata": (0, 13),
        "Produce": (3, 13),
        "Fetch": (4, 17),
        "ListOffsets": (1, 10),
        "InitProducerId": (0, 5),
        "CreateTopics": (2, 7),
        "DeleteTopics": (1, 6),
        "DescribeConfigs": (1, 4),
        "ConsumerGroupHeartbeat": (0, 1),
        "ConsumerGroupDescribe": (0, 0),
    }
    for api, (lo, hi) in required.items():
        for kind in ("Request", "Response"):
            for v in range(lo, hi + 1):
                assert (api + kind, v) in covered


def test_unknown_tagged_fields_are_skipped() -> None:
    spec = load_message("ApiVersionsRequest")
    body = spec.cls(client_software_name="c", client_software_version="1")
    raw = bytearray(spec.encode(3, body).buf)
    assert raw[-1] == 0  # empty tagged-field section
    raw[-1:] = bytes([1, 99, 2, 0xAB, 0xCD])  # one unknown tag (99) of two bytes
    assert spec.decode_bytes(3, raw) == body


def test_fields_outside_a_version_keep_their_defaults() -> None:
    spec = load_message("ProduceRequest")
    req = spec.cls(transactional_id="tx", acks=-1, timeout_ms=5, topic_data=[])
    v3 = spec.decode_bytes(3, bytes(spec.encode(3, req).buf))
    assert v3.transactional_id == "tx" and v3.acks == -1
    topic = spec.struct("TopicProduceData")(name="t", topic_id=uuid.uuid4(), partition_data=[])
    req.topic_data = [topic]
    old = spec.decode_bytes(12, bytes(spec.encode(12, req).buf)).topic_data[0]
    new = spec.decode_bytes(13, bytes(spec.encode(13, req).buf)).topic_data[0]
    assert (old.name, old.topic_id.int) == ("t", 0)
    assert (new.name, new.topic_id) == ("", topic.topic_id)


def test_hand_encoded_metadata_v0_request_matches_kafka_layout() -> None:
    spec = load_message("MetadataRequest")
    req = spec.cls(topics=[spec.struct("MetadataRequestTopic")(name="ab")])
    # int32 array length 1, int16 string length 2, "ab"
    assert bytes(spec.encode(0, req).buf) == b"\x00\x00\x00\x01\x00\x02ab"
    # v9 is flexible: compact array (N+1), compact string (N+1), tagged fields of topic and of request
    assert bytes(spec.encode(9, req).buf) == b"\x02" + b"\x03ab" + b"\x00" + b"\x01" + b"\x00" + b"\x00" + b"\x00"


def test_reader_rejects_counts_larger_than_the_bytes_left() -> None:
    spec = load_message("MetadataRequest")
    with pytest.raises(Exception) as exc:
        spec.decode(1, Reader(b"\x7f\xff\xff\xff"))
    assert "cannot fit" in str(exc.value)
