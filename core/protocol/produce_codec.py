"""Produce's request decoder and response encoder, written out for versions 3-13.

Produce is the request a broker answers most, and the generic codec
(:mod:`brokkr.core.protocol.schema`: a closure per field, a dict per struct) showed in its
profile. These two functions do what the generic codec does for Produce, field by field
in Kafka's order, with the same bounds checks (a :class:`Reader`) and the same objects;
tests/test_produce_codec.py checks them byte for byte and object for object against the
generic codec over every version. A response carrying KIP-951's tagged leader hints
(``current_leader``, ``node_endpoints``) is left to the generic encoder.

The common request (v9-12 as clients send it) and the common answer are read and written
in C where brokkr was built with a compiler (``core/protocol/_produce.c``); what the C
code does not accept, or everything where it is not built, the Python code here handles.
"""

from __future__ import annotations

import struct

from ..errors import CorruptRequest
from .primitives import VARINT_MAX_BYTES, Reader, Writer, decode_uvarint
from .schema import load_message

try:
    from . import _produce  # the common request and answer in C (core/protocol/_produce.c)
except ImportError:  # not built: the Python reader runs alone
    _produce = None

KEY = 0
FLEXIBLE_VERSION = 9
TOPIC_IDS_VERSION = 13

_REQ = load_message("ProduceRequest")
_RESP = load_message("ProduceResponse")
_ProduceRequest = _REQ.cls
_TopicProduceData = _REQ.struct("TopicProduceData")
_PartitionProduceData = _REQ.struct("PartitionProduceData")
_NO_LEADER = _RESP.struct("LeaderIdAndEpoch")()

_ACKS_TIMEOUT_COUNT = struct.Struct(">hiB")  # acks, timeout, the topic count's first byte
_I32 = struct.Struct(">i")
_PARTITION = struct.Struct(">ihqq")  # index, error code, base offset, log append time
# A flexible version's partition with no record errors and no message: the fields above,
# log start offset, then an empty compact array, a null compact string, no tagged fields.
_PLAIN_PARTITION = struct.Struct(">ihqqq3s")
_PLAIN_TAIL = b"\x01\x00\x00"


def _leader_hint(p) -> bool:
    """Whether a partition answer carries KIP-951's current leader (not the null one)."""
    leader = p.current_leader
    return leader is None or leader.leader_id != _NO_LEADER.leader_id or leader.leader_epoch != _NO_LEADER.leader_epoch


def _count(r: Reader, flexible: bool, name: str) -> int:
    n = r.count(flexible)
    if n < 0:
        raise CorruptRequest(f"non-nullable field {name} was serialized as null")
    return n


def decode_request(version: int, r: Reader):
    """A ProduceRequest of ``version`` (3-13) from ``r``, as the generic decoder builds it."""
    if FLEXIBLE_VERSION <= version < TOPIC_IDS_VERSION:
        if _produce is not None:
            request = _produce.read_request(r, _ProduceRequest, _TopicProduceData, _PartitionProduceData)
        else:
            request = _decode_common(r)
        if request is not None:
            return request
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


def _decode_common(r: Reader):
    """The request as flexible versions by name (9-12) carry it from clients, read without
    a method call per field: one-byte topic counts and names, no tagged fields. None (``r``
    untouched) for anything else, which the field-by-field decoder then reads or refuses."""
    buf, pos, end = r.buf, r.pos, r.end
    try:
        n = buf[pos]  # transactional id: compact nullable string, length + 1
        if n >= 0x80:
            return None
        transactional_id = str(buf[pos + 1 : pos + n], "utf-8") if n else None
        pos += max(n, 1)
        acks, timeout_ms, n_topics = _ACKS_TIMEOUT_COUNT.unpack_from(buf, pos)
        pos += _ACKS_TIMEOUT_COUNT.size
        if not 0 < n_topics < 0x80:
            return None
        topics = []
        for _ in range(n_topics - 1):
            n = buf[pos]
            if not 0 < n < 0x80:
                return None
            name = str(buf[pos + 1 : pos + n], "utf-8")
            pos += n
            n_partitions, pos = decode_uvarint(buf, pos, end, VARINT_MAX_BYTES)  # 1,000 take two bytes
            if not 0 < n_partitions <= end - pos + 1:
                return None
            partitions = []
            for _ in range(n_partitions - 1):
                index = _I32.unpack_from(buf, pos)[0]
                size, pos = decode_uvarint(buf, pos + 4, end, VARINT_MAX_BYTES)
                if not size or pos + size - 1 > end or buf[pos + size - 1] != 0:
                    return None  # null records, or tagged fields after them
                partitions.append(_PartitionProduceData(index=index, records=buf[pos : pos + size - 1]))
                pos += size
            if buf[pos] != 0:
                return None
            pos += 1
            topics.append(_TopicProduceData(name=name, partition_data=partitions))
        if buf[pos] != 0:
            return None
        pos += 1
    except (IndexError, struct.error, UnicodeDecodeError, CorruptRequest):
        return None
    if pos > end:
        return None
    r.pos = pos
    return _ProduceRequest(transactional_id=transactional_id, acks=acks, timeout_ms=timeout_ms, topic_data=topics)


def encode_response(version: int, response, w: Writer) -> bool:
    """Write a ProduceResponse of ``version`` (3-13) to ``w`` as the generic encoder would;
    False (nothing written) when it carries tagged leader hints, for the generic encoder."""
    if (
        _produce is not None
        and FLEXIBLE_VERSION <= version < TOPIC_IDS_VERSION
        and _produce.write_response(response, w.buf)
    ):
        return True  # the common answer, in C
    flexible = version >= FLEXIBLE_VERSION
    if flexible and (
        response.node_endpoints or any(_leader_hint(p) for t in response.responses for p in t.partition_responses)
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
            if flexible and p.error_message is None and not p.record_errors:  # most answers: one pack
                buf += _PLAIN_PARTITION.pack(
                    p.index, p.error_code, p.base_offset, p.log_append_time_ms, p.log_start_offset, _PLAIN_TAIL
                )
                continue
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
