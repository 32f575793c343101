"""Produce's request decoder and response encoder, written out for versions 3-13.

Produce is the request a broker answers most, and the generic codec
(:mod:`brokkr.core.protocol.schema`: a closure per field, a dict per struct) showed in its
profile. These two functions do what the generic codec does for Produce, field by field
in Kafka's order, with the same bounds checks (a :class:`Reader`) and the same objects;
tests/test_produce_codec.py checks them byte for byte and object for object against the
generic codec over every version. A response carrying KIP-951's tagged leader hints
(``current_leader``, ``node_endpoints``) is left to the generic encoder.
"""

from __future__ import annotations

import struct

from ..errors import CorruptRequest
from .primitives import Reader, Writer
from .schema import load_message

KEY = 0
FLEXIBLE_VERSION = 9
TOPIC_IDS_VERSION = 13

_REQ = load_message("ProduceRequest")
_RESP = load_message("ProduceResponse")
_ProduceRequest = _REQ.cls
_TopicProduceData = _REQ.struct("TopicProduceData")
_PartitionProduceData = _REQ.struct("PartitionProduceData")
_NO_LEADER = _RESP.struct("LeaderIdAndEpoch")()

_PARTITION = struct.Struct(">ihqq")  # index, error code, base offset, log append time


def _count(r: Reader, flexible: bool, name: str) -> int:
    n = r.count(flexible)
    if n < 0:
        raise CorruptRequest(f"non-nullable field {name} was serialized as null")
    return n


def decode_request(version: int, r: Reader):
    """A ProduceRequest of ``version`` (3-13) from ``r``, as the generic decoder builds it."""
    flexible = version >= FLEXIBLE_VERSION
    transactional_id = r.string(flexible)
    acks = r.int16()
    timeout_ms = r.int32()
    topics = []
    for _ in range(_count(r, flexible, "topic_data")):
        if version >= TOPIC_IDS_VERSION:
            topic = {"topic_id": r.uuid()}
        else:
            name = r.string(flexible)
            if name is None:
                raise CorruptRequest("non-nullable field name was serialized as null")
            topic = {"name": name}
        partitions = []
        for _ in range(_count(r, flexible, "partition_data")):
            index = r.int32()
            partitions.append(_PartitionProduceData(index=index, records=r.bytes(flexible)))
            if flexible:
                r.skip_tagged_fields()
        if flexible:
            r.skip_tagged_fields()
        topics.append(_TopicProduceData(partition_data=partitions, **topic))
    if flexible:
        r.skip_tagged_fields()
    return _ProduceRequest(transactional_id=transactional_id, acks=acks, timeout_ms=timeout_ms, topic_data=topics)


def encode_response(version: int, response, w: Writer) -> bool:
    """Write a ProduceResponse of ``version`` (3-13) to ``w`` as the generic encoder would;
    False (nothing written) when it carries tagged leader hints, for the generic encoder."""
    flexible = version >= FLEXIBLE_VERSION
    if flexible and (
        response.node_endpoints
        or any(p.current_leader != _NO_LEADER for t in response.responses for p in t.partition_responses)
    ):
        return False
    buf = w.buf
    w.length(len(response.responses), flexible)
    for t in response.responses:
        if version >= TOPIC_IDS_VERSION:
            buf += t.topic_id.bytes
        else:
            w.string(t.name, flexible)
        w.length(len(t.partition_responses), flexible)
        for p in t.partition_responses:
            buf += _PARTITION.pack(p.index, p.error_code, p.base_offset, p.log_append_time_ms)
            if version >= 5:
                w.int64(p.log_start_offset)
            if version >= 8:
                w.length(len(p.record_errors), flexible)
                for e in p.record_errors:
                    w.int32(e.batch_index)
                    w.string(e.batch_index_error_message, flexible)
                    if flexible:
                        buf.append(0)
                w.string(p.error_message, flexible)
            if flexible:
                buf.append(0)
        if flexible:
            buf.append(0)
    w.int32(response.throttle_time_ms)
    if flexible:
        buf.append(0)
    return True
